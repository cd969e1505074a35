// What the controller's admin API reads and does (see admin.hpp): the job's procs and actors,
// their threads' stacks, the workers' last lines, and a proc killed as a crash would.

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>
#include <tuple>

#include "actor/proc_state.hpp"
#include "actor/wait_all.hpp"
#include "baton/actor/errors.hpp"
#include "log/log.hpp"
#include "mesh/agent.hpp"
#include "runtime_impl.hpp"

namespace baton {

using namespace internal;

namespace {

constexpr std::chrono::seconds kStacksWait{10};  // naming a big binary's frames takes a while

/// A live process of this host as /proc sees it: CPU seconds, resident MB, seconds since it
/// started; false if it is gone.
bool proc_stats(pid_t pid, double& cpu_s, double& rss_mb, double& uptime_s) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  if (!std::getline(stat, text)) return false;
  const auto close = text.rfind(')');  // the command may hold spaces and parentheses
  if (close == std::string::npos) return false;
  std::istringstream fields(text.substr(close + 2));
  std::vector<std::string> f{std::istream_iterator<std::string>(fields), {}};
  // From the state (field 3): utime is field 14, stime 15, starttime 22, rss 24.
  if (f.size() < 22) return false;
  const double tick = static_cast<double>(::sysconf(_SC_CLK_TCK));
  cpu_s = (std::stod(f[11]) + std::stod(f[12])) / tick;
  rss_mb = std::stod(f[21]) * static_cast<double>(::sysconf(_SC_PAGESIZE)) / (1024.0 * 1024.0);
  std::ifstream up("/proc/uptime");
  double since_boot = 0;
  up >> since_boot;
  uptime_s = std::max(0.0, since_boot - std::stod(f[19]) / tick);
  return true;
}

std::string names_of(const AdminSnapshot& s) {
  std::string out = s.controller;
  for (const auto& p : s.procs) out += ", " + p.name;
  return out;
}

/// A line's level: baton's own lines say it ("[baton proc] warn: ..."), as Python's logging
/// does ("WARNING:root:..."); any other line is info on stdout and warn on stderr.
std::string level_of(const std::string& text, int stream) {
  static const std::pair<const char*, const char*> kTags[] = {
      {"] debug: ", "debug"}, {"] info: ", "info"}, {"] warn: ", "warn"},
      {"] error: ", "error"}, {"DEBUG:", "debug"},  {"INFO:", "info"},
      {"WARNING:", "warn"},   {"ERROR:", "error"},  {"CRITICAL:", "error"}};
  for (const auto& [tag, level] : kTags) {
    const std::string_view t(tag);
    if (t.front() == ']') {
      if (text.starts_with("[baton ") && text.find(t) != std::string::npos) return level;
    } else if (text.starts_with(t)) {
      return level;
    }
  }
  return stream == 2 ? "warn" : "info";
}

int level_rank(const std::string& level) {
  if (level == "debug") return 0;
  if (level == "info") return 1;
  if (level == "warn") return 2;
  if (level == "error") return 3;
  return -1;
}

}  // namespace

namespace {

internal::AdminActor admin_actor(const std::string& proc, const detail::ActorReport& r) {
  return {proc,     r.id.to_string(), r.type,      r.status,  r.handled,
          r.queued, r.running,        r.running_s, r.mean_ms, r.max_ms};
}

}  // namespace

internal::AdminSnapshot Runtime::State::admin_snapshot(bool with_actors) {
  internal::AdminSnapshot s;
  s.controller = proc->id().name;
  s.controller_pid = static_cast<int>(::getpid());
  s.uptime_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  s.envelopes_sent = proc->envelopes_sent();
  {
    std::lock_guard lock(children_mu);
    for (const auto& [name, c] : children) {
      internal::AdminProc p{name, static_cast<int>(c.pid), c.mesh, c.rank, c.host, "running", ""};
      if (c.report) {
        p.state = "failed";
        p.report = *c.report;
      } else if (c.stopping && c.stopping->load()) {
        p.state = c.exited ? "stopped" : "stopping";
      } else if (c.exited) {
        p.state = "exited";
      } else if (!c.started) {
        p.state = "starting";
      }
      s.procs.push_back(std::move(p));
    }
  }
  if (stall_after) s.stall_after_s = std::chrono::duration<double>(*stall_after).count();
  double ignored = 0;
  proc_stats(::getpid(), s.controller_cpu_s, s.controller_rss_mb, ignored);
  for (auto& p : s.procs) {
    if (p.host.empty() && (p.state == "running" || p.state == "stopping")) {
      proc_stats(p.pid, p.cpu_s, p.rss_mb, p.uptime_s);
    }
  }
  std::sort(s.procs.begin(), s.procs.end(), [](const auto& a, const auto& b) {
    return std::tie(a.mesh, a.rank) < std::tie(b.mesh, b.rank);
  });
  {
    std::lock_guard lock(mu);
    s.failures.assign(failures.begin(), failures.end());
  }
  if (!with_actors) return s;
  for (const auto& r : detail::actor_reports(*proc))
    s.actors.push_back(admin_actor(s.controller, r));
  std::vector<std::pair<std::string, Future<std::vector<detail::ActorReport>>>> asked;
  for (const auto& p : s.procs) {
    if (p.state != "running") continue;
    asked.emplace_back(p.name, detail::agent_of(ProcId{p.name}).call(&detail::ProcAgent::actors));
  }
  detail::wait_all(
      asked, std::chrono::seconds(2),
      [&s](const std::string& name, const std::vector<detail::ActorReport>& reports) {
        for (const auto& r : reports) s.actors.push_back(admin_actor(name, r));
      },
      [&s](const std::string& name, const std::string& why) {
        s.unanswered.emplace_back(name, why);
      });
  return s;
}

AdminSource Runtime::State::admin_source() {
  AdminSource s;
  s.snapshot = [this](bool with_actors) { return admin_snapshot(with_actors); };
  s.stacks = [this](const std::string& p, const std::string& a) { return admin_stacks(p, a); };
  s.logs = [this](const std::string& p, const std::string& level, std::size_t n,
                  std::uint64_t since) { return admin_logs(p, level, n, since); };
  s.kill = [this](const std::string& p) { return admin_kill(p); };
  s.metrics = [this] { return admin_metrics(); };
  s.trace_start = [this] { trace_start(); };
  s.trace_stop = [this] { return trace_stop(); };
  s.debug_sessions = [this] { return admin_debug_sessions(); };
  s.debug_io = [this](const std::string& p, std::uint64_t id, const std::string& line, bool send) {
    return admin_debug_io(p, id, line, send);
  };
  return s;
}

std::vector<AdminStacks> Runtime::State::admin_stacks(const std::string& want_proc,
                                                      const std::string& actor) {
  const AdminSnapshot snap = admin_snapshot(false);
  std::string only = want_proc;
  if (!actor.empty()) {
    try {
      only = ActorId::parse(actor).proc.name;
    } catch (const std::exception& e) {
      throw AdminNotFound(e.what());
    }
  }
  std::vector<AdminStacks> out;
  std::vector<std::pair<std::string, Future<std::vector<detail::ThreadStack>>>> asked;
  bool found = only.empty() || only == snap.controller;
  if (only.empty() || only == snap.controller) {
    out.push_back({snap.controller, snap.controller_pid, detail::proc_stacks(*proc), ""});
  }
  for (const auto& p : snap.procs) {
    if (!only.empty() && p.name != only) continue;
    found = true;
    out.push_back({p.name, p.pid, {}, ""});
    if (p.state != "running") {
      out.back().error = "the proc is " + p.state + (p.report.empty() ? "" : ": " + p.report);
      continue;
    }
    asked.emplace_back(p.name, detail::agent_of(ProcId{p.name}).call(&detail::ProcAgent::stacks));
  }
  if (!found) {
    throw AdminNotFound("no proc " + only + " in this job; its procs: " + names_of(snap));
  }
  auto entry = [&out](const std::string& name) -> AdminStacks& {
    return *std::find_if(out.begin(), out.end(),
                         [&name](const AdminStacks& s) { return s.proc == name; });
  };
  detail::wait_all(
      asked, kStacksWait,
      [&](const std::string& name, std::vector<detail::ThreadStack> threads) {
        entry(name).threads = std::move(threads);
      },
      [&](const std::string& name, const std::string& why) { entry(name).error = why; });
  if (actor.empty()) return out;
  // One actor: the thread that runs it now, if one does.
  AdminStacks& p = out.front();
  std::erase_if(p.threads, [&actor](const detail::ThreadStack& t) {
    return std::none_of(t.actors.begin(), t.actors.end(), [&actor](const std::string& a) {
      return a == actor || a.starts_with(actor + ":");
    });
  });
  if (p.threads.empty() && p.error.empty()) {
    std::vector<detail::ActorReport> actors =
        p.proc == snap.controller
            ? detail::actor_reports(*proc)
            : detail::agent_of(ProcId{p.proc}).call(&detail::ProcAgent::actors).get(kStacksWait);
    std::string known;
    for (const auto& r : actors) {
      if (r.id.to_string() == actor) {
        p.error = actor + " runs on no thread now: it waits for a message";
        return out;
      }
      known += (known.empty() ? "" : ", ") + r.id.to_string();
    }
    throw AdminNotFound("no actor " + actor + "; the actors of " + p.proc + ": " + known);
  }
  return out;
}

std::vector<AdminLogLine> Runtime::State::admin_logs(const std::string& want_proc,
                                                     const std::string& level, std::size_t lines,
                                                     std::uint64_t since) {
  const int min_rank = level.empty() ? 0 : level_rank(level);
  if (min_rank < 0) {
    throw UsageError("level=" + level + " is not one of debug, info, warn, error");
  }
  std::map<std::pair<std::string, std::size_t>, std::string> by_rank;
  {
    std::lock_guard lock(children_mu);
    for (const auto& [name, c] : children) by_rank[{c.mesh, c.rank}] = name;
    if (!want_proc.empty() && children.count(want_proc) == 0) {
      std::string known;
      for (const auto& [name, c] : children) known += (known.empty() ? "" : ", ") + name;
      throw AdminNotFound("no worker proc " + want_proc +
                          " in this job; its workers: " + (known.empty() ? "none" : known));
    }
  }
  std::vector<AdminLogLine> out;
  for (const KeptLine& k : output->kept()) {
    if (k.seq <= since) continue;
    const std::string lvl = level_of(k.line.text, k.line.stream);
    if (level_rank(lvl) < min_rank) continue;
    const double t = std::chrono::duration<double>(k.at.time_since_epoch()).count();
    for (const std::size_t rank : k.line.ranks) {
      const auto it = by_rank.find({k.line.mesh, rank});
      const std::string name =
          it != by_rank.end() ? it->second : k.line.mesh + "." + std::to_string(rank);
      if (!want_proc.empty() && name != want_proc) continue;
      out.push_back({name, k.line.stream == 2 ? "stderr" : "stdout", lvl, t, k.seq, k.line.text});
    }
  }
  if (out.size() > lines) out.erase(out.begin(), out.end() - static_cast<std::ptrdiff_t>(lines));
  return out;
}

std::vector<std::pair<std::string, detail::ProcMetrics>> Runtime::State::admin_metrics() {
  const AdminSnapshot snap = admin_snapshot(false);
  std::vector<std::pair<std::string, detail::ProcMetrics>> out;
  out.emplace_back(snap.controller, detail::proc_metrics(*proc));
  std::vector<std::pair<std::string, Future<detail::ProcMetrics>>> asked;
  for (const auto& p : snap.procs) {
    if (p.state != "running") continue;
    asked.emplace_back(p.name, detail::agent_of(ProcId{p.name}).call(&detail::ProcAgent::metrics));
  }
  detail::wait_all(
      asked, std::chrono::seconds(2),
      [&out](const std::string& name, detail::ProcMetrics m) {
        out.emplace_back(name, std::move(m));
      },
      [](const std::string& name, const std::string& why) {
        detail::log_debug("metrics: proc {} did not answer: {}", name, why);
      });
  return out;
}

void Runtime::State::trace_start() {
  detail::set_tracing(true);
  std::vector<std::pair<std::string, Future<int>>> asked;
  for (const auto& p : admin_snapshot(false).procs) {
    if (p.state != "running") continue;
    asked.emplace_back(p.name,
                       detail::agent_of(ProcId{p.name}).call(&detail::ProcAgent::trace_on, true));
  }
  detail::wait_all(
      asked, std::chrono::seconds(2), [](const std::string&, int) {},
      [](const std::string& name, const std::string& why) {
        detail::log_warn("proc {} records no trace: {}", name, why);
      });
}

std::string Runtime::State::trace_stop(const std::vector<std::string>& parts) {
  detail::set_tracing(false);
  const AdminSnapshot snap = admin_snapshot(false);
  std::vector<std::pair<int, std::string>> procs_by_pid = {{snap.controller_pid, snap.controller}};
  std::vector<detail::TraceRecord> events = detail::take_trace();
  std::vector<std::pair<std::string, Future<int>>> stopped;
  for (const auto& p : snap.procs) {
    procs_by_pid.emplace_back(p.pid, p.name);
    if (p.state != "running") continue;
    stopped.emplace_back(
        p.name, detail::agent_of(ProcId{p.name}).call(&detail::ProcAgent::trace_on, false));
  }
  detail::wait_all(
      stopped, std::chrono::seconds(2), [](const std::string&, int) {},
      [](const std::string&, const std::string&) {});
  // Stopped everywhere before any is taken: a flow sent late has both of its ends, or neither.
  std::vector<std::pair<std::string, Future<std::vector<detail::TraceRecord>>>> asked;
  asked.reserve(stopped.size());
  for (const auto& [name, reply] : stopped) {
    asked.emplace_back(name, detail::agent_of(ProcId{name}).call(&detail::ProcAgent::trace_take));
  }
  detail::wait_all(
      asked, std::chrono::seconds(10),
      [&events](const std::string&, std::vector<detail::TraceRecord> more) {
        events.insert(events.end(), std::make_move_iterator(more.begin()),
                      std::make_move_iterator(more.end()));
      },
      [](const std::string& name, const std::string& why) {
        detail::log_warn("the trace of proc {} is missing: {}", name, why);
      });
  return chrome_trace_json(events, procs_by_pid, parts);
}

void Runtime::State::write_trace_part() {
  // A worker that stops before the controller's runtime ends: its part of the trace, beside
  // the file, for the controller to take in (trace_parts_of).
  const std::string part = trace_file + ".part." + std::to_string(::getpid());
  std::ofstream out(part);
  out << chrome_trace_json(detail::take_trace(), {{static_cast<int>(::getpid()), proc->id().name}},
                           {}, false);
  if (!out.flush()) detail::log_warn("BATON_TRACE: cannot write {}", part);
}

void Runtime::State::write_trace() {
  try {
    // The parts of the procs that stopped already, taken in and removed.
    std::vector<std::string> parts;
    const std::filesystem::path file(trace_file);
    const std::filesystem::path in_dir = file.has_parent_path() ? file.parent_path() : ".";
    const std::string part_prefix = file.filename().string() + ".part.";
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(in_dir, ec)) {
      if (!entry.path().filename().string().starts_with(part_prefix)) continue;
      std::ifstream in(entry.path());
      std::stringstream text;
      text << in.rdbuf();
      parts.push_back(text.str());
      std::filesystem::remove(entry.path(), ec);
    }
    const std::string json = trace_stop(parts);
    std::ofstream out(trace_file);
    out << json;
    if (!out.flush()) throw std::runtime_error("cannot write " + trace_file);
    detail::log_info("the trace of this run is in {} (Chrome's format: open it in Perfetto)",
                     trace_file);
  } catch (const std::exception& e) {
    detail::log_error("BATON_TRACE={}: no trace written: {}", trace_file, e.what());
  }
}

std::string Runtime::State::admin_kill(const std::string& name) {
  pid_t pid = 0;
  std::string host;
  {
    std::lock_guard lock(children_mu);
    const auto it = children.find(name);
    if (it == children.end()) {
      std::string known;
      for (const auto& [n, c] : children) {
        if (!c.exited && !c.report) known += (known.empty() ? "" : ", ") + n;
      }
      throw AdminNotFound("no worker proc " + name +
                          " in this job; the running ones: " + (known.empty() ? "none" : known));
    }
    if (it->second.exited || it->second.report) {
      throw AdminNotFound("proc " + name + " has already ended; nothing to kill");
    }
    pid = it->second.pid;
    host = it->second.host;
  }
  detail::log_warn("the admin API kills proc {} (pid {}{})", name, pid,
                   host.empty() ? "" : " on " + host);
  if (host.empty()) {
    ::kill(pid, SIGKILL);
    return "SIGKILL to pid " + std::to_string(pid);
  }
  detail::agent_of(ProcId{name}).send(&detail::ProcAgent::die);
  return "SIGKILL by its own agent on " + host;
}

}  // namespace baton
