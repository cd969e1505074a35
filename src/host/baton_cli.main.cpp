// `baton`: looks inside a running job through its controller's admin API (src/host/admin.hpp).
//
//   baton jobs                 the running jobs of this user on this host
//   baton ls [--json] [--all]  the job's procs, as a tree by proc mesh, with their actors
//   baton failures [--json]    the failures that reached the controller, newest first
//   baton metrics              the job's metrics, in Prometheus' text format
//
// It finds the job from the job directories of this user (with several, --job PID picks one), or
// takes --addr URL and --token FILE for one elsewhere (through ssh -L, say).

#include <CLI/CLI.hpp>
#include <cstddef>  // before Boost.Asio, which configures its allocation from the standard library
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>  // Boost 1.74's awaitable.hpp uses std::exchange without it
#include <vector>

#include <boost/asio.hpp>
#include <boost/beast.hpp>
#include <nlohmann/json.hpp>

#include "host/admin.hpp"
#include "host/job_dir.hpp"

namespace {

namespace http = boost::beast::http;
using tcp = boost::asio::ip::tcp;
using nlohmann::json;

constexpr const char* kVersion = "0.1.0";

/// A failure to report as "baton: WHAT" and exit with status 1.
struct Failure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Target {
  std::string url;    // http://HOST:PORT
  std::string token;  // the admin token
  std::string name;   // how to name the job in errors
};

std::string read_token(const std::string& file) {
  std::ifstream in(file);
  std::string token;
  if (!std::getline(in, token) || token.empty()) {
    throw Failure("cannot read an admin token from " + file +
                  " (the job may have just ended, or this user may not read it)");
  }
  return token;
}

/// The job to talk to: --addr (with --token), --job, or the only one running.
Target find_target(const std::string& addr, const std::string& token_file, int pid) {
  if (!addr.empty()) {
    if (token_file.empty()) throw Failure("--addr needs --token FILE (the job's admin-token)");
    return {addr, read_token(token_file), addr};
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
          "the job of controller " + std::to_string(job->pid)};
}

/// GET `path` from the job's admin API; its body. Fails saying why on anything but 200.
std::string get(const Target& t, const std::string& path) {
  constexpr std::string_view kHttp = "http://";
  if (!t.url.starts_with(kHttp)) throw Failure("--addr " + t.url + " is not http://HOST:PORT");
  const std::string hostport = t.url.substr(kHttp.size());
  const auto colon = hostport.rfind(':');
  if (colon == std::string::npos) throw Failure(t.url + " names no port");
  boost::asio::io_context ctx;
  boost::beast::tcp_stream stream(ctx);
  stream.expires_after(std::chrono::seconds(10));
  try {
    tcp::resolver resolver(ctx);
    stream.connect(resolver.resolve(hostport.substr(0, colon), hostport.substr(colon + 1)));
  } catch (const std::exception& e) {
    throw Failure("cannot reach " + t.name + " at " + t.url + " (" + e.what() +
                  "): it has ended, or the address is wrong");
  }
  http::request<http::empty_body> req{http::verb::get, path, 11};
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
  if (res.result() == http::status::unauthorized) {
    throw Failure(t.name +
                  " refused the token: it is not this job's (another job's file, or "
                  "a job started again since?)");
  }
  if (res.result() != http::status::ok) {
    std::string why = res.body();
    try {
      why = json::parse(res.body()).at("error").get<std::string>();
    } catch (const std::exception&) {
    }
    throw Failure(path + ": " + std::to_string(res.result_int()) + " " + why);
  }
  return res.body();
}

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

/// One actor's line: its id, type, what it does, what it handled.
void print_actor(const json& a, const std::string& indent) {
  std::cout << indent << a.at("id").get<std::string>() << "  " << a.at("type").get<std::string>()
            << "  ";
  const std::string running = a.at("running").get<std::string>();
  if (a.at("status").get<std::string>() != "running") {
    std::cout << a.at("status").get<std::string>();
  } else if (!running.empty()) {
    std::cout << "in " << running << " for " << a.at("running_s").get<double>() << " s";
  } else {
    std::cout << "idle";
  }
  std::cout << "  handled " << a.at("handled").get<std::uint64_t>();
  if (a.at("queued").get<std::uint64_t>() > 0) {
    std::cout << ", " << a.at("queued").get<std::uint64_t>() << " queued";
  }
  if (a.at("handled").get<std::uint64_t>() > 0) {
    std::cout << " (mean " << a.at("mean_ms").get<double>() << " ms, max "
              << a.at("max_ms").get<double>() << " ms)";
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

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"baton: look inside a running job through its controller's admin API"};
  app.set_version_flag("--version", std::string("baton ") + kVersion);
  app.require_subcommand(1);
  std::string addr;
  std::string token_file;
  int pid = 0;
  bool as_json = false;
  app.add_option("--addr", addr, "the admin API's URL (http://HOST:PORT), for a job elsewhere");
  app.add_option("--token", token_file, "with --addr: the job's admin-token file");
  app.add_option("--job", pid, "the job's controller pid, when several run on this host");
  auto* jobs = app.add_subcommand("jobs", "the running jobs of this user on this host");
  auto* ls = app.add_subcommand("ls", "the job's procs by proc mesh, with what each actor does");
  auto* failures = app.add_subcommand("failures", "failures that reached the controller");
  auto* metrics = app.add_subcommand("metrics", "the job's metrics (Prometheus' text format)");
  for (auto* sub : {jobs, ls, failures}) sub->add_flag("--json", as_json, "print JSON");
  bool all = false;
  ls->add_flag("--all", all, "the runtime's own agents too");
  CLI11_PARSE(app, argc, argv);
  try {
    if (jobs->parsed()) {
      print_jobs(as_json);
      return 0;
    }
    const Target t = find_target(addr, token_file, pid);
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
