#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <future>

#include "actor/failures.hpp"
#include "actor/proc_state.hpp"
#include "host/hosts.hpp"
#include "log/log.hpp"
#include "mesh/hosted.hpp"
#include "runtime_impl.hpp"

namespace baton {
namespace internal {
namespace {

/// "exited with status 3" or "was killed by signal SIGKILL (Killed)". `oom`: the kernel says
/// its out-of-memory killer acted in the process's cgroup.
std::string describe_exit(const siginfo_t& info, bool oom) {
  if (info.si_code == CLD_EXITED) return "exited with status " + std::to_string(info.si_status);
  const int sig = info.si_status;
  const char* abbrev = ::sigabbrev_np(sig);
  std::string s = std::string("was killed by signal ") +
                  (abbrev != nullptr ? "SIG" + std::string(abbrev) : std::to_string(sig)) + " (" +
                  ::strsignal(sig) + ")";
  if (info.si_code == CLD_DUMPED) s += ", core dumped";
  if (oom) {
    s += ": the kernel's out-of-memory killer acted in its cgroup (it reached its memory limit)";
  }
  return s;
}

/// The file where the kernel counts its out-of-memory kills in `pid`'s cgroup: memory.events
/// (cgroup v2) or memory.oom_control (v1), each with an `oom_kill` line. Empty if none.
std::string oom_events_file(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/cgroup");
  std::string line;
  std::string v1;
  std::string v2;
  while (std::getline(in, line)) {
    const auto a = line.find(':');
    const auto b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1);
    const std::string path = line.substr(b + 1);
    if (line.compare(0, a, "0") == 0 && controllers.empty()) {
      v2 = path;
    } else if (controllers == "memory" || controllers.find("memory,") != std::string::npos ||
               controllers.find(",memory") != std::string::npos) {
      v1 = path;
    }
  }
  std::error_code ec;
  for (const std::string& f : {"/sys/fs/cgroup/memory" + v1 + "/memory.oom_control",
                               "/sys/fs/cgroup" + v2 + "/memory.events",
                               "/sys/fs/cgroup/unified" + v2 + "/memory.events"}) {
    if (std::filesystem::exists(f, ec)) return f;
  }
  return {};
}

/// The `oom_kill` count of an events file from oom_events_file().
std::optional<std::uint64_t> oom_kills(const std::string& file) {
  if (file.empty()) return std::nullopt;
  std::ifstream in(file);
  std::string key;
  std::uint64_t value = 0;
  while (in >> key >> value) {
    if (key == "oom_kill") return value;
  }
  return std::nullopt;
}

}  // namespace

int Spawner::spawn(pid_t* pid, const char* path, const posix_spawn_file_actions_t* actions,
                   char* const argv[], char* const envp[]) {
  std::promise<int> started;
  std::future<int> rc = started.get_future();
  const bool queued = queue_.post(
      [&] { started.set_value(::posix_spawn(pid, path, actions, nullptr, argv, envp)); });
  if (!queued) return ECANCELED;  // the runtime is going
  return rc.get();
}

ChildWatcher::ChildWatcher(OnExit on_exit) : on_exit_(std::move(on_exit)) {
  wake_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake_ < 0) {
    throw std::runtime_error(std::string("cannot create an eventfd: ") + std::strerror(errno));
  }
}

ChildWatcher::~ChildWatcher() {
  {
    std::lock_guard lock(mu_);
    quit_ = true;
  }
  poke();
  if (thread_.joinable()) thread_.join();
  for (auto& [pid, fd] : running_) ::close(fd);
  ::close(wake_);
}

void ChildWatcher::add(pid_t pid) {
  // The thread starts with the first child: most workers never start one.
  std::call_once(started_, [this] {
    const std::string own = oom_events_file(::getpid());
    if (auto n = oom_kills(own)) {
      std::lock_guard lock(mu_);
      oom_seen_[own] = *n;
    }
    thread_ = std::thread([this] { run(); });
  });
  const int fd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (fd < 0) {
    throw std::runtime_error("cannot watch worker process " + std::to_string(pid) +
                             " (pidfd_open: " + std::strerror(errno) +
                             "); baton needs Linux 5.3 or later");
  }
  const std::string oom_file = oom_events_file(pid);  // where it starts; a zombie's reads "/"
  const auto oom_now = oom_kills(oom_file);
  {
    std::lock_guard lock(mu_);
    running_.emplace(pid, fd);
    oom_file_[pid] = oom_file;
    if (oom_now) oom_seen_.emplace(oom_file, *oom_now);
  }
  poke();
}

void ChildWatcher::signal_all(int sig) {
  std::lock_guard lock(mu_);
  for (auto& [pid, fd] : running_) ::syscall(SYS_pidfd_send_signal, fd, sig, nullptr, 0);
}

std::optional<std::string> ChildWatcher::wait(pid_t pid,
                                              std::chrono::steady_clock::time_point deadline) {
  std::unique_lock lock(mu_);
  cv_.wait_until(lock, deadline, [&] { return exited_.count(pid) != 0; });
  auto it = exited_.find(pid);
  if (it == exited_.end()) return std::nullopt;
  return it->second;
}

void ChildWatcher::forget(pid_t pid) {
  std::lock_guard lock(mu_);
  exited_.erase(pid);
}

void ChildWatcher::poke() const {
  const std::uint64_t one = 1;
  [[maybe_unused]] const auto n = ::write(wake_, &one, sizeof one);
}

void ChildWatcher::run() {
  std::vector<pollfd> fds;
  std::vector<pid_t> pids;
  for (;;) {
    fds.assign(1, pollfd{wake_, POLLIN, 0});
    pids.assign(1, 0);
    {
      std::lock_guard lock(mu_);
      if (quit_) return;
      for (auto& [pid, fd] : running_) {
        fds.push_back(pollfd{fd, POLLIN, 0});
        pids.push_back(pid);
      }
    }
    if (::poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      detail::log_error("the child watcher's poll failed: {}", std::strerror(errno));
      return;
    }
    if ((fds[0].revents & POLLIN) != 0) {
      std::uint64_t n = 0;
      [[maybe_unused]] const auto r = ::read(wake_, &n, sizeof n);
    }
    for (std::size_t i = 1; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      siginfo_t info{};
      if (::waitid(P_PID, static_cast<id_t>(pids[i]), &info, WEXITED | WNOHANG) != 0 ||
          info.si_pid == 0) {
        continue;
      }
      const bool killed = info.si_code == CLD_KILLED && info.si_status == SIGKILL;
      const std::string what = describe_exit(info, killed && oom_killed(pids[i]));
      {
        std::lock_guard lock(mu_);
        ::close(fds[i].fd);
        running_.erase(pids[i]);
        oom_file_.erase(pids[i]);
        exited_[pids[i]] = what;
      }
      // The runtime hears of the exit before a wait for it returns: whoever stopped the child
      // then finds it recorded as gone.
      on_exit_(pids[i], what);
      cv_.notify_all();
    }
  }
}

bool ChildWatcher::oom_killed(pid_t pid) {
  std::string file;
  {
    std::lock_guard lock(mu_);
    auto it = oom_file_.find(pid);
    if (it == oom_file_.end()) return false;
    file = it->second;
  }
  const auto now = oom_kills(file);
  if (!now) return false;
  std::lock_guard lock(mu_);
  auto [seen, fresh] = oom_seen_.emplace(file, *now);
  const bool rose = !fresh && *now > seen->second;
  seen->second = *now;
  return rose;
}

}  // namespace internal

using namespace internal;

void Runtime::child_exited(pid_t pid, const std::string& what) {
  State::Child c;
  std::string name;
  {
    std::lock_guard lock(state_->children_mu);
    auto n = state_->names.find(pid);
    if (n == state_->names.end()) return;
    name = n->second;
    auto& child = state_->children.at(name);
    child.exited = true;
    c = child;
  }
  if (c.stopping->load() || !c.started) {  // a stop, or a failed spawn (which throws)
    (void)detail::take_hosted(name);       // forgotten, however it ended
    return;
  }
  std::string report = "proc " + name + " (rank " + std::to_string(c.rank) + " of " + c.mesh +
                       ", pid " + std::to_string(pid) + ") " + what;
  state_->output->flush();  // its last words are in the pipe
  const auto last = state_->output->recent_stderr(c.mesh, c.rank);
  if (!last.empty()) {
    report += "; its last stderr lines:";
    for (const auto& l : last) report += "\n  " + l;
  }
  state_->report_exit(name, c, report);
}

void Runtime::State::report_exit(const std::string& name, const Child& c,
                                 const std::string& report) {
  // The members of actor meshes it hosted, not stopped since (forgotten, however it ended).
  const std::vector<detail::HostedMember> hosted = detail::take_hosted(name);
  {
    std::lock_guard lock(children_mu);
    auto it = children.find(name);
    if (it != children.end()) it->second.report = report;
  }
  children_cv.notify_all();
  detail::mark_proc_failed(name, report);  // later calls fail at once
  if (c.report_to) {
    // Agent mode: the controller that asked for this proc tells its owners.
    detail::make_ref<HostClient>(*c.report_to, nullptr).send(&HostClient::exited, name, report);
    return;
  }
  // The owner of each actor mesh with a member there hears of its member: the user's actor,
  // mesh, rank and point, not the runtime's agent. A proc that hosted none is reported as
  // itself to the owner of its proc mesh.
  if (hosted.empty()) {
    SupervisionEvent ev{
        ActorId{ProcId{name}, "agent", 0}, report, c.mesh, static_cast<std::int64_t>(c.rank), {}};
    detail::report_failure_to(c.owner, std::move(ev), detail::state_of(*proc));
    return;
  }
  for (const auto& m : hosted) {
    SupervisionEvent ev{
        m.actor, "member " + m.point.to_string() + " lost: its " + report, m.mesh, m.rank, {}};
    detail::report_failure_to(m.owner, std::move(ev), detail::state_of(*proc));
  }
}

std::optional<std::string> Runtime::exit_report(const std::string& proc_name,
                                                std::chrono::steady_clock::time_point since) {
  std::unique_lock lock(state_->children_mu);
  auto it = state_->children.find(proc_name);
  if (it == state_->children.end()) return std::nullopt;
  auto stopping = it->second.stopping;
  if (!it->second.host.empty()) {
    // On another host: its report comes from its agent, over a link that the thread asking
    // (an I/O thread, as a link closes) serves itself. Waiting here would only stall it.
    return stopping->load() ? std::nullopt : it->second.report;
  }
  // From when it was seen lost, not from now: procs lost together (a host's, frozen) are waited
  // for together, in one exit_wait, though their links' closings are handled one by one.
  state_->children_cv.wait_until(lock, since + state_->exit_wait, [&] {
    return stopping->load() || state_->children.at(proc_name).report.has_value();
  });
  if (stopping->load()) return std::nullopt;
  return state_->children.at(proc_name).report;
}

}  // namespace baton
