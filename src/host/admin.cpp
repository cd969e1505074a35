// The controller's admin API (see admin.hpp): Boost.Beast parses and writes HTTP on an event loop
// of its own (Boost.Asio, one thread), nlohmann::json writes the bodies. The only translation unit
// that includes Beast (its bodies are written in admin_json.cpp).

#include "host/admin.hpp"

#include <fcntl.h>
#include <openssl/crypto.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstddef>  // before Boost.Asio, which configures its allocation from the standard library
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <stdexcept>
#include <string_view>
#include <thread>
#include <utility>  // Boost 1.74's awaitable.hpp uses std::exchange without it

#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast.hpp>
#include <boost/beast/ssl.hpp>
#include <nlohmann/json.hpp>

#include "baton/actor/errors.hpp"
#include "baton/net/link.hpp"
#include "host/admin_json.hpp"
#include "host/dashboard.hpp"

namespace baton::internal {
namespace {

constexpr const char* kAdminVar = "BATON_ADMIN";
constexpr int kReadTimeoutS = 5;  // a connection that sends no whole request is dropped

/// Writes `text` to a new file at `path` that only this user may read.
void write_private(const std::filesystem::path& path, const std::string& text) {
  ::unlink(path.c_str());  // a file left by an earlier server of this job
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0 || ::write(fd, text.data(), text.size()) != static_cast<ssize_t>(text.size())) {
    const std::string why = std::strerror(errno);
    if (fd >= 0) ::close(fd);
    throw std::runtime_error("cannot write " + path.string() + ": " + why);
  }
  ::close(fd);
}

bool is_loopback(const std::string& host) {
  return host == "127.0.0.1" || host == "localhost" || host == "::1" || host.starts_with("127.");
}

}  // namespace

std::optional<std::string> admin_address_from_env() {
  const char* v = std::getenv(kAdminVar);
  if (v == nullptr || *v == '\0') return std::string("127.0.0.1:0");
  const std::string s = v;
  if (s == "off" || s == "0") return std::nullopt;
  const auto colon = s.rfind(':');
  const std::string host = colon == std::string::npos ? "" : s.substr(0, colon);
  const std::string port = colon == std::string::npos ? "" : s.substr(colon + 1);
  char* end = nullptr;
  const unsigned long p = std::strtoul(port.c_str(), &end, 10);
  if (host.empty() || port.empty() || *end != '\0' || p > 65535) {
    throw UsageError(std::string(kAdminVar) + "=" + s +
                     " is not HOST:PORT or off (e.g. 127.0.0.1:0 for a free port on the "
                     "loopback, the default; 0.0.0.0:8443 for every address, served with TLS)");
  }
  return s;
}

namespace beast = boost::beast;
namespace http = boost::beast::http;
using tcp = boost::asio::ip::tcp;

struct AdminServer::Impl {
  AdminSource source;
  std::string token;
  std::filesystem::path dir;
  std::string url;
  boost::asio::io_context ctx{1};
  tcp::acceptor acceptor{ctx};
  /// Set for an address other than the loopback: every connection is TLS, with the job's
  /// certificate.
  std::unique_ptr<boost::asio::ssl::context> tls;
  std::thread thread;

  /// Whether `req` carries the token ("Authorization: Bearer TOKEN"), compared in constant time.
  bool authorized(const http::request<http::string_body>& req) const {
    const auto it = req.find(http::field::authorization);
    if (it == req.end()) return false;
    const std::string_view header(it->value().data(), it->value().size());
    constexpr std::string_view kBearer = "Bearer ";
    if (!header.starts_with(kBearer)) return false;
    const std::string_view given = header.substr(kBearer.size());
    return given.size() == token.size() &&
           CRYPTO_memcmp(given.data(), token.data(), token.size()) == 0;
  }

  /// The dashboard's files, and Chart.js from where Debian installs it; false for any other path.
  static bool serve_file(const std::string& path, http::response<http::string_body>& res) {
    for (std::size_t i = 0; i < kDashboardFileCount; ++i) {
      if (path != kDashboardFiles[i].path) continue;
      res.set(http::field::content_type, kDashboardFiles[i].type);
      res.set(http::field::cache_control, "no-cache");
      res.body() = kDashboardFiles[i].text;
      return true;
    }
    if (path != "/js/chart.min.js") return false;
    std::ifstream in(kChartJs, std::ios::binary);
    if (!in) {
      res.result(http::status::not_found);
      res.body() = "// Chart.js is not installed here (Debian: apt-get install libjs-chart.js)\n";
    } else {
      res.body().assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
    res.set(http::field::content_type, "text/javascript; charset=utf-8");
    return true;
  }

  /// One exchange with a paused actor's debugger: the command in `line`, if there is one; then
  /// what it wrote, and whether it paused again, still runs, or ended.
  template <class Json>
  void debug_input(const Target& target, Json& json) {
    const std::string session = param(target, "session");
    char* end = nullptr;
    const unsigned long long id = std::strtoull(session.c_str(), &end, 10);
    if (session.empty() || *end != '\0') {
      json(http::status::bad_request,
           {{"error", "session=" + session + " is not a session's number (GET /api/debug)"}});
      return;
    }
    const auto line = target.query.find("line");
    try {
      const detail::DebugOutput out =
          source.debug_io(param(target, "proc"), id, line == target.query.end() ? "" : line->second,
                          line != target.query.end());
      if (out.state == "gone") {
        json(http::status::not_found,
             {{"error", "no actor of proc " + param(target, "proc") + " is paused as session " +
                            session + " (GET /api/debug lists those that are)"}});
      } else {
        json(http::status::ok, {{"output", out.output}, {"state", out.state}});
      }
    } catch (const AdminNotFound& e) {
      json(http::status::not_found, {{"error", e.what()}});
    } catch (const std::exception& e) {
      json(http::status::bad_gateway, {{"error", e.what()}});
    }
  }

  /// The response to one request.
  http::response<http::string_body> answer(const http::request<http::string_body>& req) {
    http::response<http::string_body> res{http::status::ok, req.version()};
    res.keep_alive(req.keep_alive());
    auto json = [&res](http::status status, const nlohmann::json& body) {
      res.result(status);
      res.set(http::field::content_type, "application/json");
      res.body() = body.dump(2) + "\n";
    };
    const Target target = split_target(std::string_view(req.target().data(), req.target().size()));
    const std::string& path = target.path;
    // The dashboard's page and script hold nothing of the job: they ask the API with the token.
    if (req.method() == http::verb::get && serve_file(path, res)) {
      res.prepare_payload();
      return res;
    }
    if (!authorized(req)) {
      json(http::status::unauthorized,
           {{"error",
             "missing or wrong admin token: send the header 'Authorization: Bearer "
             "TOKEN' with the token in " +
                 (dir / kAdminTokenFile).string()}});
    } else if (path == "/api/trace/start" || path == "/api/trace/stop") {
      if (req.method() != http::verb::post) {
        json(http::status::method_not_allowed,
             {{"error", "POST /api/trace/start, then POST /api/trace/stop for the trace"}});
      } else if (path == "/api/trace/start") {
        source.trace_start();
        json(http::status::ok, {{"tracing", true}});
      } else {
        res.set(http::field::content_type, "application/json");
        res.body() = source.trace_stop();
      }
    } else if (path == "/api/kill") {
      if (req.method() != http::verb::post) {
        json(http::status::method_not_allowed,
             {{"error", "POST /api/kill?proc=NAME kills a proc"}});
      } else if (param(target, "proc").empty()) {
        json(http::status::bad_request,
             {{"error",
               "name the proc to kill: POST /api/kill?proc=NAME (GET /api/procs lists "
               "them)"}});
      } else {
        try {
          json(http::status::ok,
               {{"killed", param(target, "proc")}, {"how", source.kill(param(target, "proc"))}});
        } catch (const AdminNotFound& e) {
          json(http::status::not_found, {{"error", e.what()}});
        }
      }
    } else if (path == "/api/debug/input") {
      if (req.method() != http::verb::post) {
        json(http::status::method_not_allowed,
             {{"error", "POST /api/debug/input?proc=P&session=N[&line=COMMAND]"}});
      } else {
        debug_input(target, json);
      }
    } else if (req.method() != http::verb::get) {
      json(http::status::method_not_allowed,
           {{"error",
             "the admin API takes GET, and POST for /api/kill, /api/trace and "
             "/api/debug/input"}});
    } else if (path == "/api/debug") {
      nlohmann::json out = nlohmann::json::array();
      for (const auto& d : source.debug_sessions()) {
        out.push_back({{"proc", d.proc},
                       {"session", d.session.id},
                       {"actor", d.session.actor},
                       {"mesh", d.session.mesh},
                       {"rank", d.session.rank},
                       {"where", d.session.where},
                       {"paused_s", d.session.paused_s}});
      }
      json(http::status::ok, out);
    } else if (path == "/api") {
      json(http::status::ok,
           {{"resources",
             {"/api/job", "/api/procs", "/api/actors", "/api/failures",
              "/api/stacks?proc=P|actor=A", "/api/logs?proc=P&level=L&lines=N&since=SEQ",
              "/api/kill?proc=P (POST)", "/api/trace/start (POST)", "/api/trace/stop (POST)",
              "/api/debug", "/api/debug/input?proc=P&session=N&line=COMMAND (POST)", "/metrics"}}});
    } else if (path == "/api/stacks") {
      try {
        json(http::status::ok,
             stacks_json(source.stacks(param(target, "proc"), param(target, "actor"))));
      } catch (const AdminNotFound& e) {
        json(http::status::not_found, {{"error", e.what()}});
      }
    } else if (path == "/api/logs") {
      const std::string lines = param(target, "lines");
      char* end = nullptr;
      const unsigned long n = lines.empty() ? 100 : std::strtoul(lines.c_str(), &end, 10);
      try {
        if (!lines.empty() && (*end != '\0' || n == 0)) {
          throw UsageError("lines=" + lines + " is not a count of lines (e.g. lines=100)");
        }
        const std::uint64_t since = std::strtoull(param(target, "since").c_str(), nullptr, 10);
        json(http::status::ok,
             logs_json(source.logs(param(target, "proc"), param(target, "level"), n, since)));
      } catch (const AdminNotFound& e) {
        json(http::status::not_found, {{"error", e.what()}});
      } catch (const UsageError& e) {
        json(http::status::bad_request, {{"error", e.what()}});
      }
    } else if (path == "/api/job") {
      const AdminSnapshot s = source.snapshot(false);
      json(http::status::ok, {{"controller", s.controller},
                              {"pid", s.controller_pid},
                              {"uptime_s", s.uptime_s},
                              {"procs", s.procs.size() + 1},
                              {"stall_after_s", s.stall_after_s},
                              {"directory", dir.string()}});
    } else if (path == "/api/procs") {
      json(http::status::ok, procs_json(source.snapshot(false)));
    } else if (path == "/api/actors") {
      const AdminSnapshot s = source.snapshot(true);
      nlohmann::json actors = nlohmann::json::array();
      for (const auto& a : s.actors) {
        actors.push_back({{"proc", a.proc},
                          {"id", a.id},
                          {"type", a.type},
                          {"status", a.status},
                          {"handled", a.handled},
                          {"queued", a.queued},
                          {"running", a.running},
                          {"running_s", a.running_s},
                          {"mean_ms", a.mean_ms},
                          {"max_ms", a.max_ms},
                          {"stalled", s.stall_after_s > 0 && a.running_s >= s.stall_after_s}});
      }
      nlohmann::json unanswered = nlohmann::json::array();
      for (const auto& [proc, why] : s.unanswered) {
        unanswered.push_back({{"proc", proc}, {"why", why}});
      }
      json(http::status::ok, {{"actors", actors}, {"unanswered", unanswered}});
    } else if (path == "/api/failures") {
      const AdminSnapshot s = source.snapshot(false);
      nlohmann::json out = nlohmann::json::array();
      for (auto it = s.failures.rbegin(); it != s.failures.rend(); ++it) out.push_back(*it);
      json(http::status::ok, out);
    } else if (path == "/metrics") {
      res.set(http::field::content_type, "text/plain; version=0.0.4");
      res.body() = metrics_text(source.snapshot(false));
      procs_metrics_text(res.body(), source.metrics());
    } else {
      json(http::status::not_found, {{"error", "no resource " + path + " (GET /api lists them)"}});
    }
    res.prepare_payload();
    return res;
  }

  void accept() {
    acceptor.async_accept([this](beast::error_code ec, tcp::socket socket) {
      if (ec == boost::asio::error::operation_aborted) return;  // stopping
      if (!ec && !tls) {
        serve(std::make_shared<beast::tcp_stream>(std::move(socket)));
      } else if (!ec) {
        auto stream =
            std::make_shared<beast::ssl_stream<beast::tcp_stream>>(std::move(socket), *tls);
        beast::get_lowest_layer(*stream).expires_after(std::chrono::seconds(kReadTimeoutS));
        stream->async_handshake(boost::asio::ssl::stream_base::server,
                                [this, stream](beast::error_code e) {
                                  if (!e) serve(stream);  // else: not TLS, or not ours: it goes
                                });
      }
      accept();
    });
  }

  /// Reads requests from one connection and answers each, until it closes, errs or idles.
  template <class Stream>
  void serve(const std::shared_ptr<Stream>& stream) {
    auto buffer = std::make_shared<beast::flat_buffer>();
    auto req = std::make_shared<http::request<http::string_body>>();
    beast::get_lowest_layer(*stream).expires_after(std::chrono::seconds(kReadTimeoutS));
    http::async_read(
        *stream, *buffer, *req, [this, stream, buffer, req](beast::error_code ec, std::size_t) {
          if (ec) return;  // closed, garbage or too slow: the connection just goes
          auto res = std::make_shared<http::response<http::string_body>>(answer(*req));
          http::async_write(*stream, *res, [this, stream, res](beast::error_code e, std::size_t) {
            if (e || !res->keep_alive()) {
              beast::error_code ignored;
              beast::get_lowest_layer(*stream).socket().shutdown(tcp::socket::shutdown_both,
                                                                 ignored);
              return;
            }
            serve(stream);
          });
        });
  }
};

AdminServer::AdminServer(const std::string& address, const std::filesystem::path& dir,
                         AdminSource source, const net::TlsOptions& tls)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.source = std::move(source);
  m.token = net::new_job_secret();
  m.dir = dir;
  const auto colon = address.rfind(':');
  std::string host = address.substr(0, colon);
  if (host == "localhost") host = "127.0.0.1";
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);  // [::]:PORT
  }
  const auto port = static_cast<unsigned short>(std::atoi(address.c_str() + colon + 1));
  if (!is_loopback(host)) {
    if (!tls.enabled()) {
      throw UsageError("the admin API on " + address +
                       " (not the loopback) is served with TLS only, and this job has no TLS "
                       "certificate: give it one, or serve the loopback");
    }
    try {
      m.tls = std::make_unique<boost::asio::ssl::context>(boost::asio::ssl::context::tls_server);
      m.tls->set_options(boost::asio::ssl::context::no_sslv2 | boost::asio::ssl::context::no_sslv3 |
                         boost::asio::ssl::context::no_tlsv1 |
                         boost::asio::ssl::context::no_tlsv1_1);
      m.tls->use_certificate_chain_file(tls.cert_file);
      m.tls->use_private_key_file(tls.key_file, boost::asio::ssl::context::pem);
    } catch (const std::exception& e) {
      throw std::runtime_error("the admin API cannot use the job's TLS certificate " +
                               tls.cert_file + ": " + e.what());
    }
    // Its CA, beside the token: what a client checks the API's certificate with.
    std::ifstream ca(tls.ca_file, std::ios::binary);
    const std::string pem((std::istreambuf_iterator<char>(ca)), std::istreambuf_iterator<char>());
    if (pem.empty()) throw std::runtime_error("cannot read the job's CA " + tls.ca_file);
    ::unlink((dir / kAdminCaFile).c_str());
    std::ofstream(dir / kAdminCaFile) << pem;
  }
  try {
    const tcp::endpoint at(boost::asio::ip::make_address(host), port);
    m.acceptor.open(at.protocol());
    m.acceptor.set_option(tcp::acceptor::reuse_address(true));
    m.acceptor.bind(at);
    m.acceptor.listen();
    ::fcntl(m.acceptor.native_handle(), F_SETFD, FD_CLOEXEC);  // no program it starts holds it
  } catch (const std::exception& e) {
    throw std::runtime_error("the admin API cannot listen on " + address + ": " + e.what() +
                             " (set BATON_ADMIN to a free HOST:PORT, or to off)");
  }
  const std::string shown = host.find(':') != std::string::npos ? "[" + host + "]" : host;
  m.url = std::string(m.tls ? "https://" : "http://") + shown + ":" +
          std::to_string(m.acceptor.local_endpoint().port());
  write_private(dir / kAdminTokenFile, m.token + "\n");
  write_private(dir / kAdminAddressFile, m.url + "\n");
  m.accept();
  m.thread = std::thread([&m] { m.ctx.run(); });
}

AdminServer::~AdminServer() {
  boost::asio::post(impl_->ctx, [m = impl_.get()] {
    beast::error_code ignored;
    m->acceptor.close(ignored);
  });
  impl_->ctx.stop();  // connections still open go with the context
  if (impl_->thread.joinable()) impl_->thread.join();
}

const std::string& AdminServer::url() const {
  return impl_->url;
}

}  // namespace baton::internal
