#include "baton/host/runtime.hpp"

#include "actor/cell.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string_view>
#include <thread>
#include <unordered_map>

extern char** environ;

namespace baton {
namespace {

using namespace std::chrono_literals;

// Bootstrap variables: how a worker learns who it is and where its controller listens.
constexpr const char* kProcVar = "BATON_PROC";
constexpr const char* kControllerVar = "BATON_CONTROLLER";
constexpr const char* kControllerAddrVar = "BATON_CONTROLLER_ADDR";
constexpr const char* kParentVar = "BATON_PARENT_PID";
constexpr const char* kDirVar = "BATON_DIR";  // where the job's sockets live
// The job's secret: every link proves it holds it (net::LinkOptions::secret). It travels in
// the environment, never on a command line, and a worker removes it from its own environment.
constexpr const char* kSecretVar = "BATON_JOB_SECRET";
// TLS for links that leave the host: the job's certificate, key and CA (PEM files). Set by
// the user to bring their own; otherwise the controller makes a CA and certificate per job.
constexpr const char* kTlsCertVar = "BATON_TLS_CERT";
constexpr const char* kTlsKeyVar = "BATON_TLS_KEY";
constexpr const char* kTlsCaVar = "BATON_TLS_CA";

constexpr auto kStartTimeout = 30s;
// After a stop, how long the link of a process that exited may take to close.
constexpr auto kUnlinkWait = 2s;

/// True for "NAME=value" entries that are a worker's bootstrap (set anew for every worker).
bool is_bootstrap(std::string_view entry) {
  for (std::string_view var :
       {kProcVar, kControllerVar, kControllerAddrVar, kParentVar, kDirVar, kSecretVar, kTlsCertVar,
        kTlsKeyVar, kTlsCaVar, "BATON_RANK", "BATON_WORLD_SIZE"}) {
    if (entry.size() > var.size() && entry.substr(0, var.size()) == var &&
        entry[var.size()] == '=') {
      return true;
    }
  }
  return false;
}

Runtime* g_runtime = nullptr;

// A job's directory is "baton-<controller pid>-XXXXXX" in the temporary directory, with the
// controller's pid and start time in this file: a later controller removes it if that one died.
constexpr const char* kJobDirPrefix = "baton-";
constexpr const char* kControllerFile = "controller";

/// When process `pid` started (/proc/<pid>/stat field 22): with the pid, it names one process
/// even after the pid is reused. nullopt if there is no such process.
std::optional<std::uint64_t> start_time(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  std::getline(in, text);
  const auto close = text.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::istringstream rest(text.substr(close + 1));
  std::string field;
  for (int i = 3; i < 22; ++i) rest >> field;  // state (3) .. cstime (21)
  std::uint64_t t = 0;
  if (!(rest >> t)) return std::nullopt;
  return t;
}

/// Whether the controller that made a job directory (its pid, and its `controller` file) lives.
bool controller_alive(pid_t pid, const std::filesystem::path& file) {
  const auto started = start_time(pid);
  if (!started) return false;
  std::ifstream in(file);
  long long recorded_pid = 0;
  std::uint64_t recorded_start = 0;
  if (!(in >> recorded_pid >> recorded_start)) return true;  // being made right now: keep it
  return recorded_pid == pid && recorded_start == *started;
}

/// Removes the job directories in `tmp` of this user whose controller is dead: a controller
/// killed too hard to clean up left them, and they hold its job's key.
void remove_stale_job_dirs(const std::filesystem::path& tmp) {
  std::error_code ec;
  const std::string prefix = kJobDirPrefix;
  for (const auto& entry : std::filesystem::directory_iterator(tmp, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.compare(0, prefix.size(), prefix) != 0) continue;
    const auto dash = name.find('-', prefix.size());
    if (dash == std::string::npos || dash == prefix.size() || dash - prefix.size() > 9) continue;
    const std::string digits = name.substr(prefix.size(), dash - prefix.size());
    if (digits.find_first_not_of("0123456789") != std::string::npos) continue;
    struct stat st {};
    if (::lstat(entry.path().c_str(), &st) != 0 || !S_ISDIR(st.st_mode) ||
        st.st_uid != ::geteuid()) {
      continue;
    }
    const auto pid = static_cast<pid_t>(std::stol(digits));
    if (controller_alive(pid, entry.path() / kControllerFile)) continue;
    std::error_code removed;
    std::filesystem::remove_all(entry.path(), removed);
    if (!removed) {
      std::fprintf(stderr, "baton: removed %s: its controller (pid %d) is gone\n",
                   entry.path().c_str(), static_cast<int>(pid));
    }
  }
}

/// Makes the job's directory (only this user may enter it) and records who made it.
std::filesystem::path make_job_dir() {
  const auto tmp = std::filesystem::temp_directory_path();
  remove_stale_job_dirs(tmp);
  std::string tmpl = (tmp / (kJobDirPrefix + std::to_string(::getpid()) + "-XXXXXX")).string();
  if (::mkdtemp(tmpl.data()) == nullptr) {
    throw std::runtime_error("cannot create a directory for the job's sockets in " + tmp.string() +
                             ": " + std::strerror(errno) + " (set TMPDIR to a writable directory)");
  }
  const std::filesystem::path dir = tmpl;
  const std::string who =
      std::to_string(::getpid()) + " " + std::to_string(start_time(::getpid()).value_or(0)) + "\n";
  const int fd =
      ::open((dir / kControllerFile).c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0 || ::write(fd, who.data(), who.size()) != static_cast<ssize_t>(who.size())) {
    const std::string why = std::strerror(errno);
    if (fd >= 0) ::close(fd);
    std::error_code ignored;
    std::filesystem::remove_all(dir, ignored);
    throw std::runtime_error("cannot write " + (dir / kControllerFile).string() + ": " + why);
  }
  ::close(fd);
  return dir;
}

// The write end of the pipe that SIGINT and SIGTERM go into: a signal handler has no other way
// to reach the runtime. -1 while no runtime listens.
std::atomic<int> g_signal_pipe{-1};

extern "C" void on_stop_signal(int sig) {
  const int saved = errno;
  const int fd = g_signal_pipe.load();
  if (fd >= 0) {
    const auto b = static_cast<unsigned char>(sig);
    [[maybe_unused]] const auto n = ::write(fd, &b, 1);
  }
  errno = saved;
}

/// "SIGINT".
std::string signal_name(int sig) {
  const char* abbrev = ::sigabbrev_np(sig);
  return abbrev != nullptr ? "SIG" + std::string(abbrev) : "signal " + std::to_string(sig);
}

/// Turns SIGINT and SIGTERM into calls on a thread of its own: the first signal runs `first`
/// (on one more thread, so that a second signal is heard while it runs), later ones `again`.
/// Both end the process. The handlers that were there before come back when it is destroyed.
class StopSignals {
 public:
  StopSignals(std::function<void(int)> first, std::function<void(int)> again)
      : first_(std::move(first)), again_(std::move(again)) {
    if (::pipe2(pipe_, O_CLOEXEC) != 0) {
      throw std::runtime_error(std::string("cannot create a pipe for signals: ") +
                               std::strerror(errno));
    }
    ::fcntl(pipe_[1], F_SETFL, O_NONBLOCK);  // a handler never blocks
    int expected = -1;
    if (!g_signal_pipe.compare_exchange_strong(expected, pipe_[1])) {
      ::close(pipe_[0]);
      ::close(pipe_[1]);
      throw UsageError("only one baton::Runtime may handle SIGINT and SIGTERM in a process");
    }
    thread_ = std::thread([this] { run(); });
    struct sigaction sa {};
    sa.sa_handler = on_stop_signal;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGINT, &sa, &old_int_);
    ::sigaction(SIGTERM, &sa, &old_term_);
  }
  ~StopSignals() {
    ::sigaction(SIGINT, &old_int_, nullptr);
    ::sigaction(SIGTERM, &old_term_, nullptr);
    g_signal_pipe.store(-1);
    const unsigned char quit = 0;
    [[maybe_unused]] const auto n = ::write(pipe_[1], &quit, 1);
    thread_.join();
    // A stop that a signal began ends the process; this waits for it rather than race it.
    if (stopping_.joinable()) stopping_.join();
    ::close(pipe_[0]);
    ::close(pipe_[1]);
  }
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

 private:
  void run() {
    for (;;) {
      unsigned char sig = 0;
      const auto n = ::read(pipe_[0], &sig, 1);
      if (n < 0 && errno == EINTR) continue;
      if (n != 1 || sig == 0) return;
      if (!stopping_.joinable()) {
        stopping_ = std::thread([this, sig] { first_(sig); });
      } else {
        again_(sig);
      }
    }
  }

  std::function<void(int)> first_;
  std::function<void(int)> again_;
  int pipe_[2] = {-1, -1};
  struct sigaction old_int_ {};
  struct sigaction old_term_ {};
  std::thread thread_;
  std::thread stopping_;
};

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

/// Starts processes from one thread that lives as long as the runtime. A worker's
/// PR_SET_PDEATHSIG follows the thread that started it, not the process: started from a
/// short-lived thread, it would die when that thread ends.
class Spawner {
 public:
  Spawner() : thread_([this] { run(); }) {}
  ~Spawner() {
    {
      std::lock_guard lock(mu_);
      quit_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  Spawner(const Spawner&) = delete;
  Spawner& operator=(const Spawner&) = delete;

  /// posix_spawn, run on the spawner's thread.
  int spawn(pid_t* pid, const char* path, const posix_spawn_file_actions_t* actions,
            char* const argv[], char* const envp[]) {
    Job job{[&] { return ::posix_spawn(pid, path, actions, nullptr, argv, envp); }};
    std::unique_lock lock(mu_);
    jobs_.push_back(&job);
    cv_.notify_all();
    cv_.wait(lock, [&] { return job.done; });
    return job.rc;
  }

 private:
  struct Job {
    std::function<int()> start;
    int rc = 0;
    bool done = false;
  };

  void run() {
    std::unique_lock lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return quit_ || !jobs_.empty(); });
      if (jobs_.empty()) return;  // quit, with nothing left to start
      Job* job = jobs_.front();
      jobs_.pop_front();
      lock.unlock();
      const int rc = job->start();
      lock.lock();
      job->rc = rc;
      job->done = true;
      cv_.notify_all();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job*> jobs_;
  bool quit_ = false;
  std::thread thread_;
};

/// Reaps child processes as they exit, on a thread of its own: one poll over their pidfds.
/// A child killed by SIGKILL is said to be the out-of-memory killer's only if the kernel's
/// count of such kills in the child's cgroup rose since it was last read.
class ChildWatcher {
 public:
  using OnExit = std::function<void(pid_t pid, const std::string& what)>;

  explicit ChildWatcher(OnExit on_exit) : on_exit_(std::move(on_exit)) {
    wake_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (wake_ < 0) {
      throw std::runtime_error(std::string("cannot create an eventfd: ") + std::strerror(errno));
    }
    const std::string own = oom_events_file(::getpid());
    if (auto n = oom_kills(own)) oom_seen_[own] = *n;
    thread_ = std::thread([this] { run(); });
  }
  ~ChildWatcher() {
    {
      std::lock_guard lock(mu_);
      quit_ = true;
    }
    poke();
    thread_.join();
    for (auto& [pid, fd] : running_) ::close(fd);
    ::close(wake_);
  }
  ChildWatcher(const ChildWatcher&) = delete;
  ChildWatcher& operator=(const ChildWatcher&) = delete;

  void add(pid_t pid) {
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

  /// Sends `sig` to every child still running (through its pidfd: never to a reused pid).
  void signal_all(int sig) {
    std::lock_guard lock(mu_);
    for (auto& [pid, fd] : running_) ::syscall(SYS_pidfd_send_signal, fd, sig, nullptr, 0);
  }

  /// What became of `pid` once it exited, waiting until `deadline`; nullopt if still running.
  std::optional<std::string> wait(pid_t pid, std::chrono::steady_clock::time_point deadline) {
    std::unique_lock lock(mu_);
    cv_.wait_until(lock, deadline, [&] { return exited_.count(pid) != 0; });
    auto it = exited_.find(pid);
    if (it == exited_.end()) return std::nullopt;
    return it->second;
  }

  /// Forgets what became of `pid` (its group is gone).
  void forget(pid_t pid) {
    std::lock_guard lock(mu_);
    exited_.erase(pid);
  }

 private:
  void poke() const {
    const std::uint64_t one = 1;
    [[maybe_unused]] const auto n = ::write(wake_, &one, sizeof one);
  }

  void run() {
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
        std::fprintf(stderr, "baton: the child watcher's poll failed: %s\n", std::strerror(errno));
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
        cv_.notify_all();
        on_exit_(pids[i], what);
      }
    }
  }

  /// Whether the out-of-memory killer acted in `pid`'s cgroup since its count was last read.
  bool oom_killed(pid_t pid) {
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

  OnExit on_exit_;
  int wake_ = -1;
  std::mutex mu_;
  std::condition_variable cv_;
  std::unordered_map<pid_t, int> running_;  // pidfd of each child still running
  std::unordered_map<pid_t, std::string> exited_;
  std::unordered_map<pid_t, std::string> oom_file_;          // each running child's events file
  std::unordered_map<std::string, std::uint64_t> oom_seen_;  // oom_kill count last read, by file
  bool quit_ = false;
  std::thread thread_;
};

/// Worker processes started by one spawn_procs call.
class LocalProcGroup final : public detail::ProcGroup {
 public:
  /// `gone` runs once every process has exited, to let go of what was theirs.
  LocalProcGroup(ChildWatcher& watcher, std::chrono::milliseconds grace,
                 std::function<void(const std::vector<ProcId>&)> gone)
      : watcher_(watcher), grace_(grace), gone_(std::move(gone)) {}
  ~LocalProcGroup() override { stop(grace_); }

  /// Set before the group's processes are told to stop, so their exits read as stops.
  std::shared_ptr<std::atomic<bool>> stopping = std::make_shared<std::atomic<bool>>(false);

  void add(pid_t pid, ProcId name) {
    std::lock_guard lock(mu_);
    children_.push_back({pid, std::move(name)});
  }

  std::chrono::milliseconds default_grace() const override { return grace_; }
  std::shared_ptr<std::atomic<bool>> stopped_flag() const override { return stopping; }

  void stop(std::chrono::milliseconds grace) override {
    std::lock_guard lock(mu_);
    if (stopped_) return;
    stopped_ = true;
    stopping->store(true);
    using Clock = std::chrono::steady_clock;
    // 1. Orderly: each proc stops the meshes it owns, then its actors, running on_stop.
    std::vector<Future<int>> acks;
    for (auto& c : children_) {
      const ActorId agent{c.name, "agent", 0};
      acks.push_back(ActorRef<ProcAgent>(agent, nullptr).call(&ProcAgent::shutdown));
    }
    auto deadline = Clock::now() + grace;
    for (std::size_t i = 0; i < acks.size(); ++i) {
      if (!acks[i].state()->wait_until(deadline)) {
        std::fprintf(stderr,
                     "baton: proc %s did not finish stopping its actors within %lld ms "
                     "(an on_stop hook still running?); it gets SIGTERM now\n",
                     children_[i].name.name.c_str(), static_cast<long long>(grace.count()));
      }
    }
    // 2. SIGTERM, then SIGKILL for whatever is still running after the grace.
    for (auto& c : children_) ::kill(c.pid, SIGTERM);
    deadline = Clock::now() + grace;
    for (auto& c : children_) {
      if (!watcher_.wait(c.pid, deadline)) {
        std::fprintf(stderr, "baton: proc %s ignored SIGTERM for %lld ms; sending SIGKILL\n",
                     c.name.name.c_str(), static_cast<long long>(grace.count()));
        ::kill(c.pid, SIGKILL);
        watcher_.wait(c.pid, Clock::time_point::max());
      }
      watcher_.forget(c.pid);
    }
    std::vector<ProcId> names;
    for (auto& c : children_) names.push_back(c.name);
    if (gone_) gone_(names);
  }

 private:
  struct Child {
    pid_t pid;
    ProcId name;
  };
  ChildWatcher& watcher_;
  const std::chrono::milliseconds grace_;
  std::function<void(const std::vector<ProcId>&)> gone_;
  std::mutex mu_;
  bool stopped_ = false;
  std::vector<Child> children_;
};

}  // namespace

struct Runtime::State {
  struct Child {
    pid_t pid;
    std::string mesh;
    std::size_t rank;
    std::shared_ptr<std::atomic<bool>> stopping;  // its group is being stopped on purpose
    ActorId owner;                                // who hears of its death
    std::optional<std::string> report;            // once it died
    bool started = false;  // linked: a death before is a failed spawn, not a failure
  };

  std::mutex children_mu;
  std::condition_variable children_cv;
  std::unordered_map<std::string, Child> children;  // by proc name
  std::unordered_map<pid_t, std::string> names;     // proc name by pid
  std::vector<std::string> argv;
  std::unique_ptr<OutputForwarder> output;
  std::filesystem::path dir;
  bool own_dir = false;
  std::unique_ptr<Proc> proc;
  Address address;
  std::string prefix;  // of this process's mesh names: empty in the controller
  std::string secret;  // the job's, shared by every proc of the job
  std::chrono::milliseconds stop_grace{5000};
  std::chrono::milliseconds exit_wait{2000};
  net::LinkOptions link;
  std::size_t mailbox_limit = 10000;
  std::mutex mu;
  std::size_t next_mesh = 0;
  std::vector<std::weak_ptr<LocalProcGroup>> groups;
  std::function<bool(const MeshFailure&)> supervise;  // under mu
  std::unique_ptr<ChildWatcher> watcher;
  std::unique_ptr<Spawner> spawner;
  std::unique_ptr<StopSignals> signals;  // the controller's

  /// Removes the job's directory (its sockets, CA and key), if this process made it.
  void remove_job_dir() {
    if (!own_dir) return;
    std::error_code ignored;
    std::filesystem::remove_all(dir, ignored);
  }

  void stop_groups() {
    std::vector<std::shared_ptr<LocalProcGroup>> live;
    {
      std::lock_guard lock(mu);
      for (auto& w : groups) {
        if (auto g = w.lock()) live.push_back(std::move(g));
      }
    }
    for (auto& g : live) g->stop(stop_grace);
  }
};

namespace {
OutputOptions output_options(OutputOptions options) {
  if (const char* w = std::getenv("BATON_LOG_WINDOW_MS")) {
    options.window = std::chrono::milliseconds(std::strtoul(w, nullptr, 10));
  }
  return options;
}
}  // namespace

Runtime::Runtime(int argc, char** argv, RuntimeOptions options)
    : state_(std::make_unique<State>()) {
  if (g_runtime != nullptr) throw UsageError("only one baton::Runtime may exist in a process");
  for (int i = 0; i < argc; ++i) state_->argv.emplace_back(argv[i]);
  state_->stop_grace = options.stop_grace;
  state_->exit_wait = options.exit_wait;
  state_->link = options.link;
  state_->mailbox_limit = options.mailbox_limit;
  state_->supervise = std::move(options.supervise);
  state_->output = std::make_unique<OutputForwarder>(output_options(std::move(options.output)));
  state_->watcher = std::make_unique<ChildWatcher>(
      [this](pid_t pid, const std::string& what) { child_exited(pid, what); });
  state_->spawner = std::make_unique<Spawner>();
  if (std::getenv(kProcVar) != nullptr) run_worker();
  state_->dir = make_job_dir();
  state_->own_dir = true;
  state_->secret = net::new_job_secret();
  // TLS for every link that leaves the host: the user's certificates (options, else the
  // environment), or a CA and certificate made for this job.
  if (!state_->link.tls.enabled()) {
    const char* cert = std::getenv(kTlsCertVar);
    const char* key = std::getenv(kTlsKeyVar);
    const char* ca = std::getenv(kTlsCaVar);
    if (cert != nullptr && key != nullptr && ca != nullptr) {
      state_->link.tls = net::TlsOptions{cert, key, ca};
    } else if (cert != nullptr || key != nullptr || ca != nullptr) {
      throw UsageError(std::string("set all three of ") + kTlsCertVar + ", " + kTlsKeyVar +
                       " and " + kTlsCaVar + " to use your own TLS certificates, or none");
    } else {
      state_->link.tls = net::make_job_certificates(state_->dir.string());
    }
  }
  detail::install_cast();
  ProcOptions proc_options{
      .name = "ctl", .on_unhandled_failure = [this](const MeshFailure& ev) { unhandled(ev); }};
  proc_options.link = state_->link;
  proc_options.link.secret = state_->secret;
  proc_options.mailbox_limit = state_->mailbox_limit;
  state_->proc = std::make_unique<Proc>(std::move(proc_options));
  state_->address =
      state_->proc->serve(Address::parse("unix://" + (state_->dir / "ctl.sock").string()));
  detail::set_exit_probe([this](const std::string& peer) { return exit_report(peer); });
  detail::set_shutdown_hook([this] { state_->stop_groups(); });
  state_->signals = std::make_unique<StopSignals>([this](int sig) { stop_on_signal(sig); },
                                                  [this](int sig) { kill_on_signal(sig); });
  g_runtime = this;
}

void Runtime::stop_on_signal(int sig) {
  std::fprintf(stderr, "baton: %s: stopping the job (send it again to kill it at once)\n",
               signal_name(sig).c_str());
  std::fflush(stderr);
  state_->stop_groups();
  state_->output->flush();
  state_->remove_job_dir();
  std::fflush(stdout);
  std::fflush(stderr);
  std::_Exit(128 + sig);
}

void Runtime::kill_on_signal(int sig) {
  std::fprintf(stderr, "baton: %s again: killing the job's processes\n", signal_name(sig).c_str());
  state_->watcher->signal_all(SIGKILL);
  state_->remove_job_dir();
  std::fflush(stdout);
  std::fflush(stderr);
  std::_Exit(128 + sig);
}

void Runtime::run_worker() {
  // No orphans: die with the process that started us, even if it is SIGKILLed. (With the
  // thread that started us, to be exact: the spawner's, which lives as long as its runtime.)
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  const char* parent = std::getenv(kParentVar);
  if (parent != nullptr && ::getppid() != std::atoi(parent)) std::_Exit(1);
  const char* name = std::getenv(kProcVar);
  // `ps` and `ss` show the proc's name (its command line says "baton <name>" in full).
  ::prctl(PR_SET_NAME, ("baton " + std::string(name)).substr(0, 15).c_str());
  // A terminal's Ctrl-C reaches every process of its foreground group: the controller stops
  // the workers in order, so they do not die of it first.
  ::signal(SIGINT, SIG_IGN);
  const char* controller = std::getenv(kControllerVar);
  const char* controller_addr = std::getenv(kControllerAddrVar);
  if (controller == nullptr || controller_addr == nullptr) {
    std::fprintf(stderr,
                 "baton: worker %s started without %s/%s; it must be started by a "
                 "baton controller\n",
                 name, kControllerVar, kControllerAddrVar);
    std::_Exit(2);
  }
  const char* dir = std::getenv(kDirVar);
  if (const char* secret = std::getenv(kSecretVar)) {
    state_->secret = secret;
    ::unsetenv(kSecretVar);  // not for whatever this process starts on its own
  }
  {
    const char* cert = std::getenv(kTlsCertVar);
    const char* key = std::getenv(kTlsKeyVar);
    const char* ca = std::getenv(kTlsCaVar);
    if (cert != nullptr && key != nullptr && ca != nullptr) {
      state_->link.tls = net::TlsOptions{cert, key, ca};
    }
  }
  if (state_->secret.empty()) {
    std::fprintf(stderr, "baton: worker %s started without the job's secret (%s)\n", name,
                 kSecretVar);
    std::_Exit(2);
  }
  // Output goes to the controller over a pipe: lines, not blocks, so they come back promptly.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  {
    detail::install_cast();
    // A failure nobody here handled goes to whoever started this process.
    const ActorId spawner{ProcId::parse(controller), "client", 0};
    ProcOptions proc_options{
        .name = name, .on_unhandled_failure = [spawner](const MeshFailure& ev) {
          if (detail::forward_failure(spawner, ev)) return;
          std::fprintf(stderr,
                       "baton: unhandled failure, and its owner %s cannot be reached:\n  %s\n",
                       spawner.to_string().c_str(), ev.to_string().c_str());
          std::fflush(stderr);
          std::_Exit(1);
        }};
    proc_options.link = state_->link;
    proc_options.link.secret = state_->secret;
    proc_options.mailbox_limit = state_->mailbox_limit;
    state_->proc = std::make_unique<Proc>(std::move(proc_options));
    Proc& proc = *state_->proc;
    proc.spawn<ProcAgent>("agent");
    state_->prefix = std::string(name) + "-";
    // Other workers link here when a cast or a passed reference sends them our way.
    if (dir != nullptr) {
      state_->dir = dir;
      state_->address =
          proc.serve(Address::parse("unix://" + std::string(dir) + "/" + name + ".sock"));
    }
    detail::set_exit_probe([this](const std::string& peer) { return exit_report(peer); });
    detail::set_shutdown_hook([this] { state_->stop_groups(); });
    g_runtime = this;  // actors here may spawn procs of their own
    std::mutex mu;
    std::condition_variable cv;
    bool lost = false;
    proc.connect(ProcId::parse(controller), Address::parse(controller_addr),
                 [&](const std::string&) {
                   std::lock_guard lock(mu);
                   lost = true;
                   cv.notify_all();
                 });
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return lost; });  // the controller stopped us or went away
  }
  std::fflush(stdout);
  std::_Exit(0);  // the procs this one started die with it (PR_SET_PDEATHSIG)
}

void Runtime::child_exited(pid_t pid, const std::string& what) {
  State::Child c;
  std::string name;
  {
    std::lock_guard lock(state_->children_mu);
    auto n = state_->names.find(pid);
    if (n == state_->names.end()) return;
    name = n->second;
    c = state_->children.at(name);
  }
  if (c.stopping->load() || !c.started) return;  // a stop, or a failed spawn (which throws)
  std::string report = "proc " + name + " (rank " + std::to_string(c.rank) + " of " + c.mesh +
                       ", pid " + std::to_string(pid) + ") " + what;
  state_->output->flush();  // its last words are in the pipe
  const auto last = state_->output->recent_stderr(c.mesh, c.rank);
  if (!last.empty()) {
    report += "; its last stderr lines:";
    for (const auto& l : last) report += "\n  " + l;
  }
  {
    std::lock_guard lock(state_->children_mu);
    state_->children.at(name).report = report;
  }
  state_->children_cv.notify_all();
  detail::mark_proc_failed(name, report);  // later calls fail at once
  // The owner of its mesh hears of it.
  SupervisionEvent ev{
      ActorId{ProcId{name}, "agent", 0}, report, c.mesh, static_cast<std::int64_t>(c.rank), {}};
  detail::report_failure_to(c.owner, std::move(ev), state_->proc->state());
}

std::optional<std::string> Runtime::exit_report(const std::string& proc_name) {
  std::unique_lock lock(state_->children_mu);
  auto it = state_->children.find(proc_name);
  if (it == state_->children.end()) return std::nullopt;
  auto stopping = it->second.stopping;
  state_->children_cv.wait_for(lock, state_->exit_wait, [&] {
    return stopping->load() || state_->children.at(proc_name).report.has_value();
  });
  if (stopping->load()) return std::nullopt;
  return state_->children.at(proc_name).report;
}

void Runtime::unhandled(const MeshFailure& event) {
  std::function<bool(const MeshFailure&)> handler;
  {
    std::lock_guard lock(state_->mu);
    handler = state_->supervise;
  }
  if (handler) {
    try {
      if (handler(event)) return;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "baton: the controller's supervise hook threw: %s\n", e.what());
    }
  }
  state_->output->flush();
  std::fprintf(stderr,
               "baton: a failure that nothing handled stops this program:\n  %s\n"
               "  (an owner may handle failures in Actor::supervise, the controller in "
               "RuntimeOptions::supervise)\n",
               event.to_string().c_str());
  state_->remove_job_dir();
  std::fflush(stdout);
  std::fflush(stderr);
  std::_Exit(1);  // every worker dies with this process (PR_SET_PDEATHSIG)
}

Runtime::~Runtime() {
  state_->signals.reset();  // the previous handlers are back
  detail::set_exit_probe(nullptr);
  detail::set_shutdown_hook(nullptr);
  state_->stop_groups();
  state_->proc.reset();
  state_->spawner.reset();
  state_->watcher.reset();
  state_->output.reset();  // the workers are gone: print what they left in the pipes
  state_->remove_job_dir();
  g_runtime = nullptr;
}

Proc& Runtime::proc() {
  return *state_->proc;
}

Runtime& Runtime::get() {
  if (g_runtime == nullptr) {
    throw UsageError(
        "no baton::Runtime: create `baton::Runtime rt(argc, argv);` at the top of main");
  }
  return *g_runtime;
}

void Runtime::flush_output() {
  state_->output->flush();
}

void Runtime::set_output_window(std::chrono::milliseconds window) {
  state_->output->set_window(window);
}

net::LinkOptions Runtime::link_options() const {
  net::LinkOptions o = state_->link;
  o.secret = state_->secret;
  return o;
}

void Runtime::set_supervise(std::function<bool(const MeshFailure&)> handler) {
  std::lock_guard lock(state_->mu);
  state_->supervise = std::move(handler);
}

Future<void> HostMesh::stop() const {
  Runtime& rt = Runtime::get();
  rt.state_->stop_groups();
  return make_ready_future();
}

HostMesh this_host() {
  return HostMesh{};
}

ProcMesh HostMesh::spawn_procs(const std::vector<std::pair<std::string, std::size_t>>& dims) const {
  Runtime& rt = Runtime::get();
  Runtime::State& st = *rt.state_;
  const Shape shape = Shape::of(dims);
  std::size_t mesh_index = 0;
  // Once its processes are gone, stop() returns only after their links and pipes are closed.
  auto group = std::make_shared<LocalProcGroup>(
      *st.watcher, st.stop_grace, [&st](const std::vector<ProcId>& gone) {
        for (const auto& name : gone) {
          if (!st.proc->wait_unlinked(name, kUnlinkWait)) {
            std::fprintf(stderr, "baton: the link to stopped proc %s is still open\n",
                         name.name.c_str());
          }
        }
        st.output->flush();
      });
  {
    std::lock_guard lock(st.mu);
    mesh_index = st.next_mesh++;
    std::erase_if(st.groups, [](const auto& w) { return w.expired(); });
    st.groups.push_back(group);
  }
  const std::string mesh = st.prefix + "procs" + std::to_string(mesh_index);
  // The caller owns the mesh: the running actor, or code outside actors (the controller).
  const ActorId owner = detail::current_owner();
  std::vector<ProcId> names;
  std::vector<pid_t> pids;
  for (std::size_t r = 0; r < shape.len(); ++r) {
    const Point p = shape.point(r);
    ProcId name{mesh + "." + std::to_string(r)};
    // `ps` says which proc this is: "baton procs0.3", then the program's own arguments.
    std::string argv0 = "baton " + name.name;
    std::vector<char*> argv{argv0.data()};
    for (std::size_t i = 1; i < st.argv.size(); ++i) argv.push_back(st.argv[i].data());
    argv.push_back(nullptr);
    std::vector<std::string> env;
    for (char** e = environ; *e != nullptr; ++e) {
      if (!is_bootstrap(*e)) env.emplace_back(*e);  // a worker's own is replaced below
    }
    env.push_back(std::string(kProcVar) + "=" + name.name);
    env.push_back(std::string(kControllerVar) + "=" + rt.proc().id().name);
    env.push_back(std::string(kControllerAddrVar) + "=" + st.address.to_string());
    env.push_back(std::string(kParentVar) + "=" + std::to_string(::getpid()));
    env.push_back(std::string(kDirVar) + "=" + st.dir.string());
    env.push_back(std::string(kSecretVar) + "=" + st.secret);
    if (st.link.tls.enabled()) {
      env.push_back(std::string(kTlsCertVar) + "=" + st.link.tls.cert_file);
      env.push_back(std::string(kTlsKeyVar) + "=" + st.link.tls.key_file);
      env.push_back(std::string(kTlsCaVar) + "=" + st.link.tls.ca_file);
    }
    detail::remember_address(name, "unix://" + (st.dir / (name.name + ".sock")).string());
    env.push_back("BATON_RANK=" + std::to_string(r));
    env.push_back("BATON_WORLD_SIZE=" + std::to_string(shape.len()));
    if (shape.has("gpus")) {
      env.push_back("CUDA_VISIBLE_DEVICES=" + std::to_string(p["gpus"]));
      env.push_back("HIP_VISIBLE_DEVICES=" + std::to_string(p["gpus"]));
    }
    std::vector<char*> envp;
    envp.reserve(env.size() + 1);
    for (auto& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    // The worker's stdout and stderr come back over pipes, to be printed with its rank.
    int out[2];
    int err[2];
    if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0) {
      throw std::runtime_error(std::string("cannot create pipes for a worker: ") +
                               std::strerror(errno));
    }
    posix_spawn_file_actions_t actions;
    ::posix_spawn_file_actions_init(&actions);
    ::posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
    ::posix_spawn_file_actions_adddup2(&actions, err[1], STDERR_FILENO);
#if defined(__GLIBC__) && __GLIBC_PREREQ(2, 34)
    // Nothing but stdin, stdout and stderr: not even a descriptor someone opened without
    // close-on-exec (the runtime's own all have it).
    ::posix_spawn_file_actions_addclosefrom_np(&actions, STDERR_FILENO + 1);
#endif
    pid_t pid = -1;
    const int rc = st.spawner->spawn(&pid, "/proc/self/exe", &actions, argv.data(), envp.data());
    ::posix_spawn_file_actions_destroy(&actions);
    ::close(out[1]);
    ::close(err[1]);
    st.output->add(out[0], 1, mesh, r);
    st.output->add(err[0], 2, mesh, r);
    if (rc != 0) {
      throw std::runtime_error("cannot start worker process " + name.name + ": " +
                               std::strerror(rc));
    }
    {
      std::lock_guard lock(st.children_mu);
      st.children[name.name] =
          Runtime::State::Child{pid, mesh, r, group->stopping, owner, std::nullopt, false};
      st.names[pid] = name.name;
    }
    group->add(pid, name);
    st.watcher->add(pid);
    names.push_back(std::move(name));
    pids.push_back(pid);
  }
  // Each worker dials us; wait for every hello, and notice one that died.
  const auto deadline = std::chrono::steady_clock::now() + kStartTimeout;
  for (std::size_t r = 0; r < names.size(); ++r) {
    while (!rt.proc().wait_linked(names[r], 50ms)) {
      if (auto exited = st.watcher->wait(pids[r], std::chrono::steady_clock::now())) {
        group->stop(0ms);
        throw std::runtime_error("worker " + names[r].name + " " + *exited +
                                 " during start-up (see its output above)");
      }
      if (std::chrono::steady_clock::now() > deadline) {
        group->stop(0ms);
        throw std::runtime_error("worker " + names[r].name + " did not connect within " +
                                 std::to_string(kStartTimeout.count()) + " s");
      }
    }
  }
  {
    std::lock_guard lock(st.children_mu);
    for (const auto& n : names) st.children.at(n.name).started = true;
  }
  return ProcMesh(shape, std::move(names), group);
}

}  // namespace baton
