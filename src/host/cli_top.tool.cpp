// `baton top`: the job's procs and actors on the whole terminal, refreshed every interval from
// the admin API, with CPU, memory and rates worked out between two refreshes; q quits.

#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "host/cli_client.hpp"

namespace baton::cli {
namespace {

using nlohmann::json;

volatile sig_atomic_t g_interrupted = 0;

/// The terminal in raw mode on the alternate screen, given back as it was on the way out.
class Screen {
 public:
  Screen() {
    if (::tcgetattr(STDIN_FILENO, &saved_) != 0) {
      throw Failure("baton top needs a terminal (baton ls prints the same once)");
    }
    termios raw = saved_;
    raw.c_lflag &= ~static_cast<tcflag_t>(ICANON | ECHO);
    raw.c_cc[VMIN] = 0;
    raw.c_cc[VTIME] = 0;
    ::tcsetattr(STDIN_FILENO, TCSANOW, &raw);
    struct sigaction sa {};
    sa.sa_handler = [](int) { g_interrupted = 1; };
    ::sigemptyset(&sa.sa_mask);
    ::sigaction(SIGINT, &sa, &old_int_);
    ::sigaction(SIGTERM, &sa, &old_term_);
    std::fputs("\x1b[?1049h\x1b[?25l", stdout);  // the alternate screen, no cursor
    std::fflush(stdout);
  }
  ~Screen() {
    std::fputs("\x1b[?25h\x1b[?1049l", stdout);
    std::fflush(stdout);
    ::tcsetattr(STDIN_FILENO, TCSANOW, &saved_);
    ::sigaction(SIGINT, &old_int_, nullptr);
    ::sigaction(SIGTERM, &old_term_, nullptr);
  }
  Screen(const Screen&) = delete;
  Screen& operator=(const Screen&) = delete;

  static int rows() {
    winsize ws{};
    return ::ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_row > 0 ? ws.ws_row : 24;
  }

  /// Waits up to `seconds` for a key; true if it asks to quit (q, or a signal).
  static bool quit_within(double seconds) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (g_interrupted == 0) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          until - std::chrono::steady_clock::now());
      if (left.count() <= 0) return false;
      pollfd in{STDIN_FILENO, POLLIN, 0};
      if (::poll(&in, 1, static_cast<int>(left.count())) > 0) {
        char c = 0;
        while (::read(STDIN_FILENO, &c, 1) == 1) {
          if (c == 'q' || c == 'Q') return true;
        }
      }
    }
    return true;
  }

 private:
  termios saved_{};
  struct sigaction old_int_ {};
  struct sigaction old_term_ {};
};

std::string cut(const std::string& s, std::size_t width) {
  return s.size() <= width ? s : s.substr(0, width - 1) + "~";
}

/// "ns::(anonymous namespace)::Type::method" as "Type::method".
std::string short_endpoint(const std::string& name) {
  const auto last = name.rfind("::");
  if (last == std::string::npos || last == 0) return name;
  const auto before = name.rfind("::", last - 1);
  return before == std::string::npos ? name : name.substr(before + 2);
}

/// What one refresh read, kept for the next one's rates.
struct Sample {
  std::chrono::steady_clock::time_point at;
  std::map<std::string, double> cpu_s;           // by proc
  std::map<std::string, std::uint64_t> handled;  // by actor
};

std::string render(const json& procs, const json& actors, const Sample& was, Sample& now,
                   int rows) {
  const double dt = std::chrono::duration<double>(now.at - was.at).count();
  std::string out = "\x1b[H\x1b[2J";
  std::string controller;
  double uptime = 0;
  std::size_t running = 0;
  for (const json& p : procs) {
    if (p.value("controller", false)) {
      controller = p.at("name").get<std::string>();
      uptime = p.value("uptime_s", 0.0);
    } else if (p.at("state").get<std::string>() == "running") {
      ++running;
    }
  }
  out += fmt::format("baton top: job of {}, up {:.0f} s, {} procs running    (q quits)\r\n\r\n",
                     controller, uptime, running);
  out += fmt::format("\x1b[7m{:<28} {:>8} {:<9} {:>6} {:>8} {:>8}\x1b[0m\r\n", "PROC", "PID",
                     "STATE", "CPU%", "RSS MB", "UP s");
  for (const json& p : procs) {
    const std::string name = p.at("name").get<std::string>();
    std::string cpu = "-";
    if (p.contains("cpu_s")) {
      const double c = p.at("cpu_s").get<double>();
      now.cpu_s[name] = c;
      const auto it = was.cpu_s.find(name);
      if (it != was.cpu_s.end() && dt > 0) cpu = fmt::format("{:.1f}", (c - it->second) / dt * 100);
    }
    out += fmt::format(
        "{:<28} {:>8} {:<9} {:>6} {:>8} {:>8}\r\n", cut(name, 28), p.at("pid").get<int>(),
        p.value("controller", false) ? "control" : p.at("state").get<std::string>(), cpu,
        p.contains("rss_mb") ? fmt::format("{:.0f}", p.at("rss_mb").get<double>()) : "-",
        p.contains("uptime_s") ? fmt::format("{:.0f}", p.at("uptime_s").get<double>()) : "-");
  }
  out += fmt::format("\r\n\x1b[7m{:<30} {:<18} {:<26} {:>8} {:>7} {:>6} {:>8}\x1b[0m\r\n", "ACTOR",
                     "TYPE", "DOING", "HANDLED", "RATE/s", "QUEUE", "MEAN ms");
  int left = rows - static_cast<int>(procs.size()) - 6;
  std::size_t hidden = 0;
  for (const json& a : actors.at("actors")) {
    const std::string id = a.at("id").get<std::string>();
    if (id.find("/agent[") != std::string::npos) continue;  // the runtime's own
    const auto handled = a.at("handled").get<std::uint64_t>();
    now.handled[id] = handled;
    if (left <= 1) {
      ++hidden;
      continue;
    }
    --left;
    std::string doing = a.at("status").get<std::string>();
    if (doing == "running") {
      const std::string ep = short_endpoint(a.at("running").get<std::string>());
      doing = ep.empty() ? "idle"
                         : fmt::format("{}{} {:.1f} s", a.value("stalled", false) ? "STALLED " : "",
                                       ep, a.at("running_s").get<double>());
    }
    std::string rate = "-";
    const auto it = was.handled.find(id);
    if (it != was.handled.end() && dt > 0) {
      rate = fmt::format("{:.1f}", static_cast<double>(handled - it->second) / dt);
    }
    out += fmt::format("{:<30} {:<18} {:<26} {:>8} {:>7} {:>6} {:>8.2f}\r\n", cut(id, 30),
                       cut(a.at("type").get<std::string>(), 18), cut(doing, 26), handled, rate,
                       a.at("queued").get<std::uint64_t>(), a.at("mean_ms").get<double>());
  }
  if (hidden > 0) out += fmt::format("... and {} more actors (baton ls lists all)\r\n", hidden);
  for (const json& u : actors.at("unanswered")) {
    out += fmt::format("({} did not answer: {})\r\n", u.at("proc").get<std::string>(),
                       u.at("why").get<std::string>());
  }
  return out;
}

}  // namespace

int run_top(const Target& t, double interval_s) {
  // The first read, before the screen changes: a job that is not there is said plainly.
  json procs = json::parse(get(t, "/api/procs"));
  json actors = json::parse(get(t, "/api/actors"));
  const Screen screen;
  Sample was;
  while (true) {
    Sample now;
    now.at = std::chrono::steady_clock::now();
    const std::string frame = render(procs, actors, was, now, Screen::rows());
    std::fwrite(frame.data(), 1, frame.size(), stdout);
    std::fflush(stdout);
    was = std::move(now);
    if (Screen::quit_within(interval_s)) return 0;
    procs = json::parse(get(t, "/api/procs"));
    actors = json::parse(get(t, "/api/actors"));
  }
}

}  // namespace baton::cli
