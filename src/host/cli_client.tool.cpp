// The `baton` command's side of the admin API (see cli_client.hpp): Boost.Beast writes each
// request and reads its response.

#include "host/cli_client.hpp"

#include <cctype>
#include <chrono>
#include <cstddef>  // before Boost.Asio, which configures its allocation from the standard library
#include <fstream>
#include <optional>
#include <utility>  // Boost 1.74's awaitable.hpp uses std::exchange without it

#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast.hpp>
#include <boost/beast/ssl.hpp>
#include <nlohmann/json.hpp>

#include "host/admin.hpp"
#include "host/job_dir.hpp"

namespace baton::cli {

namespace {

namespace http = boost::beast::http;
using tcp = boost::asio::ip::tcp;

std::string read_token(const std::string& file) {
  std::ifstream in(file);
  std::string token;
  if (!std::getline(in, token) || token.empty()) {
    throw Failure("cannot read an admin token from " + file +
                  " (the job may have just ended, or this user may not read it)");
  }
  return token;
}

}  // namespace

Target find_target(const std::string& addr, const std::string& token_file, int pid,
                   const std::string& ca_file) {
  if (!addr.empty()) {
    if (token_file.empty()) throw Failure("--addr needs --token FILE (the job's admin-token)");
    if (addr.starts_with("https://") && ca_file.empty()) {
      throw Failure("--addr " + addr +
                    " is served with TLS: give --ca FILE, the job's admin-ca.pem (its CA)");
    }
    return {addr, read_token(token_file), addr, ca_file};
  }
  const auto jobs = baton::internal::running_jobs();
  std::optional<baton::internal::RunningJob> job;
  if (pid != 0) {
    for (const auto& j : jobs) {
      if (j.pid == pid) job = j;
    }
    if (!job) {
      std::string known;
      for (const auto& j : jobs) known += " " + std::to_string(j.pid);
      throw Failure("no job of this user with controller pid " + std::to_string(pid) +
                    (jobs.empty() ? " (none runs on this host)"
                                  : " (running:" + known + "; see baton jobs)"));
    }
  } else if (jobs.empty()) {
    throw Failure(
        "no baton job of this user runs on this host (start one, or give --addr URL "
        "--token FILE for one elsewhere)");
  } else if (jobs.size() > 1) {
    std::string list;
    for (const auto& j : jobs) list += "\n  " + std::to_string(j.pid) + "  " + j.dir.string();
    throw Failure("several jobs run on this host; pick one with --job PID:" + list);
  } else {
    job = jobs.front();
  }
  if (job->admin_url.empty()) {
    throw Failure("the job of controller " + std::to_string(job->pid) +
                  " serves no admin API (it was started with BATON_ADMIN=off)");
  }
  return {job->admin_url, read_token((job->dir / baton::internal::kAdminTokenFile).string()),
          "the job of controller " + std::to_string(job->pid),
          ca_file.empty() ? (job->dir / baton::internal::kAdminCaFile).string() : ca_file};
}

namespace {

/// One request over `stream` (connected), its response read whole.
template <class Stream>
http::response<http::string_body> exchange(Stream& stream, const Target& t,
                                           const std::string& hostport, const std::string& method,
                                           const std::string& path) {
  http::request<http::empty_body> req{http::string_to_verb(method), path, 11};
  req.set(http::field::host, hostport);
  req.set(http::field::authorization, "Bearer " + t.token);
  req.set(http::field::user_agent, std::string("baton/") + kVersion);
  http::response<http::string_body> res;
  try {
    http::write(stream, req);
    boost::beast::flat_buffer buffer;
    http::read(stream, buffer, res);
  } catch (const std::exception& e) {
    throw Failure(t.name + " stopped answering (" + std::string(e.what()) + "): it has ended?");
  }
  return res;
}

}  // namespace

std::string request(const Target& t, const std::string& method, const std::string& path) {
  constexpr std::string_view kHttp = "http://";
  constexpr std::string_view kHttps = "https://";
  const bool tls = t.url.starts_with(kHttps);
  if (!tls && !t.url.starts_with(kHttp)) {
    throw Failure("--addr " + t.url + " is not http://HOST:PORT or https://HOST:PORT");
  }
  const std::string hostport = t.url.substr(tls ? kHttps.size() : kHttp.size());
  const auto colon = hostport.rfind(':');
  if (colon == std::string::npos) throw Failure(t.url + " names no port");
  std::string host = hostport.substr(0, colon);
  if (host.size() > 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
  boost::asio::io_context ctx;
  boost::beast::tcp_stream stream(ctx);
  stream.expires_after(std::chrono::seconds(10));
  try {
    tcp::resolver resolver(ctx);
    stream.connect(resolver.resolve(host, hostport.substr(colon + 1)));
  } catch (const std::exception& e) {
    const std::string where = t.name == t.url ? t.url : t.name + " at " + t.url;
    throw Failure("cannot reach " + where + " (" + e.what() +
                  "): it has ended, or the address is wrong");
  }
  http::response<http::string_body> res;
  if (!tls) {
    res = exchange(stream, t, hostport, method, path);
  } else {
    // The API's certificate must chain to the job's CA; like the job's own links, it is not
    // checked against a host name (the job's certificate names none).
    boost::asio::ssl::context ssl(boost::asio::ssl::context::tls_client);
    try {
      ssl.load_verify_file(t.ca);
    } catch (const std::exception& e) {
      throw Failure("cannot read the job's CA " + t.ca + " (" + e.what() +
                    "): give --ca FILE, the job's admin-ca.pem");
    }
    ssl.set_verify_mode(boost::asio::ssl::verify_peer);
    boost::beast::ssl_stream<boost::beast::tcp_stream> secure(std::move(stream), ssl);
    try {
      secure.handshake(boost::asio::ssl::stream_base::client);
    } catch (const std::exception& e) {
      throw Failure("the TLS handshake with " + t.name + " at " + t.url + " failed (" + e.what() +
                    "): is " + t.ca + " the CA of this job's certificate?");
    }
    res = exchange(secure, t, hostport, method, path);
  }
  if (res.result() == http::status::unauthorized) {
    throw Failure(t.name +
                  " refused the token: it is not this job's (another job's file, or "
                  "a job started again since?)");
  }
  if (res.result() != http::status::ok) {
    std::string why = res.body();
    try {
      why = nlohmann::json::parse(res.body()).at("error").get<std::string>();
    } catch (const std::exception&) {
    }
    throw Failure(path + ": " + std::to_string(res.result_int()) + " " + why);
  }
  return res.body();
}

std::string url_encoded(std::string_view s) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (std::isalnum(u) != 0 || c == '-' || c == '_' || c == '.' || c == '~') {
      out += c;
    } else {
      out += '%';
      out += kHex[u >> 4];
      out += kHex[u & 15];
    }
  }
  return out;
}

}  // namespace baton::cli
