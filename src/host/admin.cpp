// The controller's admin API (see admin.hpp): Boost.Beast parses and writes HTTP on an event loop
// of its own (Boost.Asio, one thread), nlohmann::json writes the bodies. The only translation unit
// that includes either.

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
#include <boost/beast.hpp>
#include <nlohmann/json.hpp>

#include "baton/actor/errors.hpp"
#include "baton/net/link.hpp"
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

/// Prometheus' text format: one metric family.
void family(std::string& out, const std::string& name, const std::string& type,
            const std::string& help) {
  out += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

/// The procs' own metrics, each sample labelled with its proc, grouped by family as the format
/// asks.
void procs_metrics_text(std::string& out,
                        const std::vector<std::pair<std::string, detail::ProcMetrics>>& procs) {
  std::vector<const detail::MetricFamily*> families;
  std::map<std::string, std::string> lines;  // by family
  for (const auto& [proc, m] : procs) {
    for (const auto& f : m.families) {
      if (lines.try_emplace(f.name).second) families.push_back(&f);
    }
  }
  for (const auto& [proc, m] : procs) {
    const std::string proc_label = detail::label("proc", proc);
    for (const auto& sm : m.samples) {
      std::string name = sm.name;
      auto it = lines.find(name);
      for (const char* suffix : {"_bucket", "_sum", "_count"}) {
        if (it != lines.end()) break;
        if (name.ends_with(suffix))
          it = lines.find(name.substr(0, name.size() - std::strlen(suffix)));
      }
      if (it == lines.end()) continue;  // a sample of no family: not valid text
      char value[40];
      std::snprintf(value, sizeof value, "%.17g", sm.value);
      it->second += name + "{" + proc_label + (sm.labels.empty() ? "" : "," + sm.labels) + "} " +
                    value + "\n";
    }
  }
  for (const auto* f : families) {
    family(out, f->name, f->type, f->help);
    out += lines[f->name];
  }
}

std::string metrics_text(const AdminSnapshot& s) {
  std::string out;
  family(out, "baton_up", "gauge", "1 while the job's controller serves this API.");
  out += "baton_up 1\n";
  family(out, "baton_uptime_seconds", "gauge", "Seconds since the controller's runtime started.");
  out += "baton_uptime_seconds " + std::to_string(s.uptime_s) + "\n";
  family(out, "baton_procs", "gauge", "The job's worker procs, by state.");
  for (const char* state : {"starting", "running", "stopping", "stopped", "exited", "failed"}) {
    std::size_t n = 0;
    for (const auto& p : s.procs) n += p.state == state ? 1 : 0;
    out += std::string("baton_procs{state=\"") + state + "\"} " + std::to_string(n) + "\n";
  }
  family(out, "baton_envelopes_sent_total", "counter",
         "Messages the controller's proc sent over links.");
  out += "baton_envelopes_sent_total " + std::to_string(s.envelopes_sent) + "\n";
  family(out, "baton_unhandled_failures_total", "counter",
         "Failures that reached the controller with nothing to handle them.");
  out += "baton_unhandled_failures_total " + std::to_string(s.failures.size()) + "\n";
  return out;
}

/// A request's target split into its path and its query's parameters, percent-decoded.
struct Target {
  std::string path;
  std::map<std::string, std::string> query;
};

std::string percent_decoded(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '+') {
      out += ' ';
    } else if (s[i] == '%' && i + 2 < s.size() &&
               std::isxdigit(static_cast<unsigned char>(s[i + 1])) != 0 &&
               std::isxdigit(static_cast<unsigned char>(s[i + 2])) != 0) {
      out += static_cast<char>(std::stoi(std::string(s.substr(i + 1, 2)), nullptr, 16));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

Target split_target(std::string_view target) {
  Target t;
  const auto q = target.find('?');
  t.path = percent_decoded(target.substr(0, q));
  if (q == std::string_view::npos) return t;
  std::string_view rest = target.substr(q + 1);
  while (!rest.empty()) {
    const auto amp = rest.find('&');
    const std::string_view pair = rest.substr(0, amp);
    const auto eq = pair.find('=');
    t.query[percent_decoded(pair.substr(0, eq))] =
        eq == std::string_view::npos ? "" : percent_decoded(pair.substr(eq + 1));
    rest = amp == std::string_view::npos ? std::string_view() : rest.substr(amp + 1);
  }
  return t;
}

std::string param(const Target& t, const std::string& name) {
  const auto it = t.query.find(name);
  return it == t.query.end() ? "" : it->second;
}

nlohmann::json stacks_json(const std::vector<AdminStacks>& procs) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& p : procs) {
    nlohmann::json threads = nlohmann::json::array();
    for (const auto& t : p.threads) {
      threads.push_back({{"tid", t.tid},
                         {"name", t.name},
                         {"actors", t.actors},
                         {"native", t.native},
                         {"python", t.python},
                         {"note", t.note}});
    }
    nlohmann::json j = {{"proc", p.proc}, {"pid", p.pid}, {"threads", threads}};
    if (!p.error.empty()) j["error"] = p.error;
    out.push_back(std::move(j));
  }
  return out;
}

nlohmann::json logs_json(const std::vector<AdminLogLine>& lines) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& l : lines) {
    out.push_back({{"proc", l.proc},
                   {"stream", l.stream},
                   {"level", l.level},
                   {"time", l.time},
                   {"seq", l.seq},
                   {"text", l.text}});
  }
  return out;
}

nlohmann::json procs_json(const AdminSnapshot& s) {
  nlohmann::json procs = nlohmann::json::array();
  procs.push_back({{"name", s.controller},
                   {"pid", s.controller_pid},
                   {"mesh", ""},
                   {"rank", 0},
                   {"host", ""},
                   {"state", "running"},
                   {"controller", true},
                   {"cpu_s", s.controller_cpu_s},
                   {"rss_mb", s.controller_rss_mb},
                   {"uptime_s", s.uptime_s}});
  for (const auto& p : s.procs) {
    nlohmann::json j = {{"name", p.name},     {"pid", p.pid},   {"mesh", p.mesh},
                        {"rank", p.rank},     {"host", p.host}, {"state", p.state},
                        {"controller", false}};
    if (!p.report.empty()) j["report"] = p.report;
    // Known for the procs of this host only.
    if (p.cpu_s >= 0) j["cpu_s"] = p.cpu_s;
    if (p.rss_mb >= 0) j["rss_mb"] = p.rss_mb;
    if (p.uptime_s >= 0) j["uptime_s"] = p.uptime_s;
    procs.push_back(std::move(j));
  }
  return procs;
}

}  // namespace

std::string chrome_trace_json(const std::vector<detail::TraceRecord>& events,
                              const std::vector<std::pair<int, std::string>>& names,
                              const std::vector<std::string>& parts, bool whole) {
  nlohmann::json all = nlohmann::json::array();
  for (const auto& [pid, name] : names) {
    all.push_back(
        {{"ph", "M"}, {"name", "process_name"}, {"pid", pid}, {"args", {{"name", name}}}});
  }
  for (const auto& e : events) {
    nlohmann::json j = {{"ph", std::string(1, e.phase)},
                        {"name", e.name},
                        {"cat", e.category},
                        {"pid", e.pid},
                        {"tid", e.tid},
                        {"ts", static_cast<double>(e.begin_ns) / 1e3}};
    if (e.phase == 'X') {
      j["dur"] = static_cast<double>(e.end_ns - e.begin_ns) / 1e3;
      if (!e.actor.empty()) j["args"] = {{"actor", e.actor}};
    } else {
      j["id"] = e.flow;
      if (e.phase == 'f') j["bp"] = "e";  // ends in the span it falls in, as it starts in one
    }
    all.push_back(std::move(j));
  }
  for (const auto& part : parts) {
    nlohmann::json parsed;
    try {
      parsed = nlohmann::json::parse(part);
      (void)parsed.at("traceEvents");
    } catch (const std::exception&) {
      continue;  // a part its proc did not finish writing (killed): the rest of the trace stands
    }
    for (auto& e : parsed.at("traceEvents")) {
      if (e.at("ph") != "M") all.push_back(std::move(e));  // the controller names every proc
    }
  }
  nlohmann::json out = nlohmann::json::array();
  if (whole) {
    // A flow recorded at one end only (in flight when the trace stopped) is left out.
    std::map<std::uint64_t, int> ends;
    for (const auto& e : all) {
      if (e.at("ph") == "s") ends[e.at("id").get<std::uint64_t>()] |= 1;
      if (e.at("ph") == "f") ends[e.at("id").get<std::uint64_t>()] |= 2;
    }
    for (auto& e : all) {
      const bool flow = e.at("ph") == "s" || e.at("ph") == "f";
      if (!flow || ends[e.at("id").get<std::uint64_t>()] == 3) out.push_back(std::move(e));
    }
  } else {
    out = std::move(all);
  }
  return nlohmann::json{{"traceEvents", out}, {"displayTimeUnit", "ns"}}.dump() + "\n";
}

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
                     "loopback, the default)");
  }
  if (!is_loopback(host)) {
    throw UsageError(std::string(kAdminVar) + "=" + s +
                     ": the admin API serves only the loopback for now (TLS for other addresses "
                     "is not there yet); reach it from another host through ssh -L");
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
      } else {
        try {
          json(http::status::ok,
               {{"killed", param(target, "proc")}, {"how", source.kill(param(target, "proc"))}});
        } catch (const AdminNotFound& e) {
          json(http::status::not_found, {{"error", e.what()}});
        }
      }
    } else if (req.method() != http::verb::get) {
      json(http::status::method_not_allowed,
           {{"error", "the admin API takes GET, and POST for /api/kill and /api/trace"}});
    } else if (path == "/api") {
      json(http::status::ok,
           {{"resources",
             {"/api/job", "/api/procs", "/api/actors", "/api/failures",
              "/api/stacks?proc=P|actor=A", "/api/logs?proc=P&level=L&lines=N&since=SEQ",
              "/api/kill?proc=P (POST)", "/metrics"}}});
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
      if (!ec) serve(std::make_shared<beast::tcp_stream>(std::move(socket)));
      accept();
    });
  }

  /// Reads requests from one connection and answers each, until it closes, errs or idles.
  void serve(const std::shared_ptr<beast::tcp_stream>& stream) {
    auto buffer = std::make_shared<beast::flat_buffer>();
    auto req = std::make_shared<http::request<http::string_body>>();
    stream->expires_after(std::chrono::seconds(kReadTimeoutS));
    http::async_read(
        *stream, *buffer, *req, [this, stream, buffer, req](beast::error_code ec, std::size_t) {
          if (ec) return;  // closed, garbage or too slow: the connection just goes
          auto res = std::make_shared<http::response<http::string_body>>(answer(*req));
          http::async_write(*stream, *res, [this, stream, res](beast::error_code e, std::size_t) {
            if (e || !res->keep_alive()) {
              beast::error_code ignored;
              stream->socket().shutdown(tcp::socket::shutdown_both, ignored);
              return;
            }
            serve(stream);
          });
        });
  }
};

AdminServer::AdminServer(const std::string& address, const std::filesystem::path& dir,
                         AdminSource source)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.source = std::move(source);
  m.token = net::new_job_secret();
  m.dir = dir;
  const auto colon = address.rfind(':');
  std::string host = address.substr(0, colon);
  if (host == "localhost") host = "127.0.0.1";
  const auto port = static_cast<unsigned short>(std::atoi(address.c_str() + colon + 1));
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
  m.url = "http://" + host + ":" + std::to_string(m.acceptor.local_endpoint().port());
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
