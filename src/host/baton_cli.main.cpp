// `baton`: looks inside a running job through its controller's admin API (src/host/admin.hpp).
//
//   baton jobs                    the running jobs of this user on this host
//   baton ls [--json] [--all]     the job's procs, as a tree by proc mesh, with their actors
//   baton top                     the same, live, with CPU, memory and rates; q quits
//   baton stack [PROC|ACTOR]      every thread's native and Python stack
//   baton logs [--proc P] [-f]    the workers' last lines
//   baton failures [--json]       the failures that reached the controller, newest first
//   baton metrics                 the job's metrics, in Prometheus' text format
//   baton kill PROC               kills a proc as a crash would: supervision hears of it
//   baton dashboard               the web dashboard's address, with the token for a browser
//   baton trace -s N -o FILE      a trace of every proc for N seconds (Chrome's format)
//   baton debug [--list]          the Python actors paused in breakpoint(), and pdb for each
//
// It finds the job from the job directories of this user (with several, --job PID picks one), or
// takes --addr URL and --token FILE for one elsewhere (through ssh -L, say).

#include <CLI/CLI.hpp>
#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "host/cli_client.hpp"
#include "host/job_dir.hpp"

namespace {

using baton::cli::Failure;
using baton::cli::get;
using baton::cli::Target;
using baton::cli::url_encoded;
using nlohmann::json;

void print_jobs(bool as_json) {
  const auto jobs = baton::internal::running_jobs();
  if (as_json) {
    json out = json::array();
    for (const auto& j : jobs) {
      out.push_back({{"pid", j.pid}, {"directory", j.dir.string()}, {"admin", j.admin_url}});
    }
    std::cout << out.dump(2) << "\n";
    return;
  }
  if (jobs.empty()) {
    std::cout << "no baton job of this user runs on this host\n";
    return;
  }
  for (const auto& j : jobs) {
    std::cout << j.pid << "  " << (j.admin_url.empty() ? "(no admin API)" : j.admin_url) << "  "
              << j.dir.string() << "\n";
  }
}

/// A duration as a person reads it: "12.5 s", "310 ms", "2.4 ms", "38 us".
std::string duration_text(double seconds) {
  std::array<char, 32> text{};
  if (seconds >= 1) {
    std::snprintf(text.data(), text.size(), "%.1f s", seconds);
  } else if (seconds >= 0.1) {
    std::snprintf(text.data(), text.size(), "%.0f ms", seconds * 1e3);
  } else if (seconds >= 1e-3) {
    std::snprintf(text.data(), text.size(), "%.1f ms", seconds * 1e3);
  } else {
    std::snprintf(text.data(), text.size(), "%.0f us", seconds * 1e6);
  }
  return text.data();
}

/// One actor's line: its id, type, what it does, what it handled.
void print_actor(const json& a, const std::string& indent) {
  std::cout << indent << a.at("id").get<std::string>() << "  " << a.at("type").get<std::string>()
            << "  ";
  const std::string running = a.at("running").get<std::string>();
  if (a.at("status").get<std::string>() != "running") {
    std::cout << a.at("status").get<std::string>();
  } else if (!running.empty()) {
    std::cout << (a.value("stalled", false) ? "STALLED " : "") << "in " << running << " for "
              << duration_text(a.at("running_s").get<double>());
  } else {
    std::cout << "idle";
  }
  std::cout << "  handled " << a.at("handled").get<std::uint64_t>();
  if (a.at("queued").get<std::uint64_t>() > 0) {
    std::cout << ", " << a.at("queued").get<std::uint64_t>() << " queued";
  }
  if (a.at("handled").get<std::uint64_t>() > 0) {
    std::cout << " (mean " << duration_text(a.at("mean_ms").get<double>() / 1e3) << ", max "
              << duration_text(a.at("max_ms").get<double>() / 1e3) << ")";
  }
  std::cout << "\n";
}

/// The procs as a tree: the controller, then each proc mesh with its procs by rank, each with
/// its actors (the runtime's own agents only with `all`).
void print_tree(const json& procs, const json& actors, bool all) {
  auto actors_of = [&](const std::string& proc, const std::string& indent) {
    for (const json& a : actors.at("actors")) {
      if (a.at("proc").get<std::string>() != proc) continue;
      const std::string id = a.at("id").get<std::string>();
      if (!all && id.find("/agent[") != std::string::npos) continue;
      print_actor(a, indent);
    }
  };
  std::string mesh = "\x01";  // none yet
  std::vector<const json*> in_mesh;
  auto flush = [&] {
    for (std::size_t i = 0; i < in_mesh.size(); ++i) {
      const json& p = *in_mesh[i];
      const bool last = i + 1 == in_mesh.size();
      std::cout << "   " << (last ? "└─ " : "├─ ") << p.at("name").get<std::string>() << " (pid "
                << p.at("pid").get<int>() << ", rank " << p.at("rank").get<int>() << ")  "
                << p.at("state").get<std::string>();
      if (p.contains("host") && !p.at("host").get<std::string>().empty()) {
        std::cout << "  on " << p.at("host").get<std::string>();
      }
      std::cout << "\n";
      if (p.contains("report")) std::cout << "      " << p.at("report").get<std::string>() << "\n";
      actors_of(p.at("name").get<std::string>(), last ? "         " : "   │     ");
    }
    in_mesh.clear();
  };
  for (const json& p : procs) {
    if (p.value("controller", false)) {
      std::cout << p.at("name").get<std::string>() << " (pid " << p.at("pid").get<int>()
                << ")  controller\n";
      actors_of(p.at("name").get<std::string>(), "      ");
      continue;
    }
    const std::string m = p.at("mesh").get<std::string>();
    if (m != mesh) {
      flush();
      mesh = m;
      std::cout << "└─ " << m << "\n";
    }
    in_mesh.push_back(&p);
  }
  flush();
  for (const json& u : actors.at("unanswered")) {
    std::cout << "(" << u.at("proc").get<std::string>()
              << " did not say what its actors do: " << u.at("why").get<std::string>() << ")\n";
  }
}

void print_stacks(const json& procs) {
  for (const json& p : procs) {
    std::cout << "== " << p.at("proc").get<std::string>() << " (pid " << p.at("pid").get<int>()
              << ")\n";
    if (p.contains("error")) std::cout << "   " << p.at("error").get<std::string>() << "\n";
    for (const json& t : p.at("threads")) {
      std::cout << "\nthread " << t.at("tid").get<int>() << " \"" << t.at("name").get<std::string>()
                << "\"";
      for (const json& a : t.at("actors")) std::cout << "  runs " << a.get<std::string>();
      std::cout << "\n";
      if (!t.at("note").get<std::string>().empty()) {
        std::cout << "  (" << t.at("note").get<std::string>() << ")\n";
      }
      int i = 0;
      for (const json& f : t.at("native")) {
        std::cout << "  #" << i++ << " " << f.get<std::string>() << "\n";
      }
      if (!t.at("python").empty()) {
        std::cout << "  Python (most recent call last):\n";
        for (const json& f : t.at("python")) {
          std::string frame = f.get<std::string>();
          std::string indented = "    ";
          for (const char c : frame)
            indented += c == '\n' ? std::string("\n      ") : std::string(1, c);
          std::cout << indented << "\n";
        }
      }
    }
    std::cout << "\n";
  }
}

/// Prints the lines after `since`; returns the last one's place.
std::uint64_t print_logs(const json& lines, bool as_json) {
  std::uint64_t last = 0;
  for (const json& l : lines) {
    last = l.at("seq").get<std::uint64_t>();
    if (as_json) {
      std::cout << l.dump() << "\n";
    } else {
      std::cout << "[" << l.at("proc").get<std::string>() << "] " << l.at("text").get<std::string>()
                << "\n";
    }
  }
  std::cout.flush();
  return last;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"baton: look inside a running job through its controller's admin API"};
  app.set_version_flag("--version", std::string("baton ") + baton::cli::kVersion);
  app.require_subcommand(1);
  std::string addr;
  std::string token_file;
  int pid = 0;
  bool as_json = false;
  app.add_option("--addr", addr, "the admin API's URL (http://HOST:PORT), for a job elsewhere");
  app.add_option("--token", token_file, "with --addr: the job's admin-token file");
  std::string ca_file;
  app.add_option("--ca", ca_file,
                 "with an https --addr: the job's admin-ca.pem (the CA its certificate chains to)");
  app.add_option("--job", pid, "the job's controller pid, when several run on this host");
  auto* jobs = app.add_subcommand("jobs", "the running jobs of this user on this host");
  auto* ls = app.add_subcommand("ls", "the job's procs by proc mesh, with what each actor does");
  auto* failures = app.add_subcommand("failures", "failures that reached the controller");
  auto* metrics = app.add_subcommand("metrics", "the job's metrics (Prometheus' text format)");
  auto* top = app.add_subcommand("top", "a live view of the job's procs and actors (q quits)");
  double interval = 1.0;
  top->add_option("--interval", interval, "seconds between refreshes")
      ->check(CLI::Range(0.1, 3600.0));
  auto* stack = app.add_subcommand(
      "stack", "every thread's native and Python stack: of all procs, of one, or of one actor");
  std::string stack_of;
  stack->add_option("target", stack_of, "a proc's name, or an actor's id (proc/name[0])");
  auto* logs = app.add_subcommand("logs", "the workers' last lines (stdout and stderr)");
  std::string log_proc;
  std::string log_level;
  std::size_t log_lines = 100;
  bool follow = false;
  logs->add_option("--proc", log_proc, "one proc's lines only");
  logs->add_option("--level", log_level, "at this level or above")
      ->check(CLI::IsMember({"debug", "info", "warn", "error"}));
  logs->add_option("-n,--lines", log_lines, "how many of the last lines")
      ->check(CLI::Range(1, 100000));
  logs->add_flag("-f,--follow", follow, "then print new lines as they come, until the job ends");
  auto* kill = app.add_subcommand("kill", "kill a proc as a crash would (supervision hears of it)");
  std::string kill_proc;
  kill->add_option("proc", kill_proc, "the proc's name (see baton ls)")->required();
  auto* dashboard =
      app.add_subcommand("dashboard", "the web dashboard's address, with the token in it");
  auto* trace = app.add_subcommand(
      "trace", "record every proc's endpoints and the calls between them for a while");
  double trace_s = 5;
  std::string trace_out;
  trace->add_option("-s,--seconds", trace_s, "how long to record")->check(CLI::Range(0.01, 3600.0));
  trace
      ->add_option("-o,--output", trace_out,
                   "the file to write (Chrome's trace format, which "
                   "Perfetto and chrome://tracing open)")
      ->required();
  auto* debug = app.add_subcommand(
      "debug", "the Python actors paused in breakpoint(): attach to one with pdb, continue them");
  bool debug_list = false;
  debug->add_flag("--list", debug_list, "list the paused actors and return");
  for (auto* sub : {jobs, ls, failures, stack, logs, debug}) {
    sub->add_flag("--json", as_json, "print JSON");
  }
  bool all = false;
  ls->add_flag("--all", all, "the runtime's own agents too");
  CLI11_PARSE(app, argc, argv);
  try {
    if (jobs->parsed()) {
      print_jobs(as_json);
      return 0;
    }
    const Target t = baton::cli::find_target(addr, token_file, pid, ca_file);
    if (ls->parsed()) {
      const json procs = json::parse(get(t, "/api/procs"));
      const json actors = json::parse(get(t, "/api/actors"));
      if (as_json) {
        std::cout << json{{"procs", procs},
                          {"actors", actors.at("actors")},
                          {"unanswered", actors.at("unanswered")}}
                         .dump(2)
                  << "\n";
      } else {
        print_tree(procs, actors, all);
      }
    } else if (failures->parsed()) {
      const std::string body = get(t, "/api/failures");
      if (as_json) {
        std::cout << body;
      } else {
        const json list = json::parse(body);
        if (list.empty()) std::cout << "no failure reached the controller\n";
        for (const auto& f : list) std::cout << f.get<std::string>() << "\n";
      }
    } else if (metrics->parsed()) {
      std::cout << get(t, "/metrics");
    } else if (debug->parsed()) {
      return baton::cli::run_debug(t, debug_list, as_json);
    } else if (top->parsed()) {
      return baton::cli::run_top(t, interval);
    } else if (stack->parsed()) {
      std::string path = "/api/stacks";
      if (stack_of.find('/') != std::string::npos) {
        path += "?actor=" + url_encoded(stack_of);
      } else if (!stack_of.empty()) {
        path += "?proc=" + url_encoded(stack_of);
      }
      const std::string body = get(t, path);
      if (as_json) {
        std::cout << body;
      } else {
        print_stacks(json::parse(body));
      }
    } else if (logs->parsed()) {
      auto path = [&](std::uint64_t since) {
        return "/api/logs?lines=" + std::to_string(log_lines) + "&proc=" + url_encoded(log_proc) +
               "&level=" + url_encoded(log_level) + "&since=" + std::to_string(since);
      };
      std::uint64_t since = print_logs(json::parse(get(t, path(0))), as_json);
      while (follow) {
        std::this_thread::sleep_for(std::chrono::milliseconds(500));  // a poll, not a wait
        try {
          const std::uint64_t last = print_logs(json::parse(get(t, path(since))), as_json);
          since = std::max(since, last);
        } catch (const Failure&) {
          std::cerr << "baton: the job ended\n";
          return 0;
        }
      }
    } else if (trace->parsed()) {
      (void)baton::cli::request(t, "POST", "/api/trace/start");
      std::this_thread::sleep_for(std::chrono::duration<double>(trace_s));  // what is recorded
      const std::string json = baton::cli::request(t, "POST", "/api/trace/stop");
      std::ofstream out(trace_out);
      out << json;
      if (!out.flush()) throw Failure("cannot write " + trace_out);
      std::cout << "wrote " << trace_out << " (" << json.size()
                << " bytes): open it in https://ui.perfetto.dev or chrome://tracing\n";
    } else if (dashboard->parsed()) {
      (void)get(t, "/api/job");  // the job answers, and takes the token
      // In the fragment: a browser keeps it to itself, and the page drops it from the bar.
      std::cout << t.url << "/#token=" << url_encoded(t.token) << "\n";
    } else if (kill->parsed()) {
      const json done =
          json::parse(baton::cli::request(t, "POST", "/api/kill?proc=" + url_encoded(kill_proc)));
      std::cout << "killed " << done.at("killed").get<std::string>() << " ("
                << done.at("how").get<std::string>() << ")\n";
    }
  } catch (const Failure& e) {
    std::cerr << "baton: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "baton: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
