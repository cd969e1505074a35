#include "baton/host/runtime.hpp"

#include "actor/cell.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
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

constexpr auto kStartTimeout = 30s;
constexpr auto kStopGrace = 5s;

Runtime* g_runtime = nullptr;

[[noreturn]] void run_worker() {
  // No orphans: die with the controller even if it is SIGKILLed.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  const char* parent = std::getenv(kParentVar);
  if (parent != nullptr && ::getppid() != std::atoi(parent)) std::_Exit(1);
  const char* name = std::getenv(kProcVar);
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
  // Output goes to the controller over a pipe: lines, not blocks, so they come back promptly.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  {
    detail::install_cast();
    Proc proc(ProcOptions{.name = name});
    proc.spawn<ProcAgent>("agent");
    // Other workers link here when a cast or a passed reference sends them our way.
    if (dir != nullptr) {
      proc.serve(Address::parse("unix://" + std::string(dir) + "/" + name + ".sock"));
    }
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
  std::_Exit(0);
}

/// Worker processes started by one spawn_procs call.
class LocalProcGroup final : public detail::ProcGroup {
 public:
  ~LocalProcGroup() override { stop(); }

  /// Set before the group's processes are signalled, so their exits read as stops.
  std::shared_ptr<std::atomic<bool>> stopping = std::make_shared<std::atomic<bool>>(false);

  void add(pid_t pid, std::string name) {
    std::lock_guard lock(mu_);
    children_.push_back({pid, std::move(name)});
  }

  /// Exit status text if `pid` has exited, else empty.
  static std::string reap_if_exited(pid_t pid) {
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) != pid) return {};
    if (WIFSIGNALED(status))
      return std::string("killed by signal ") + ::strsignal(WTERMSIG(status));
    return "exited with status " + std::to_string(WEXITSTATUS(status));
  }

  void stop() override {
    stopping->store(true);
    std::lock_guard lock(mu_);
    for (auto& c : children_) {
      if (c.pid > 0) ::kill(c.pid, SIGTERM);
    }
    const auto deadline = std::chrono::steady_clock::now() + kStopGrace;
    for (auto& c : children_) {
      while (c.pid > 0) {
        if (!reap_if_exited(c.pid).empty()) {
          c.pid = -1;
        } else if (std::chrono::steady_clock::now() > deadline) {
          ::kill(c.pid, SIGKILL);
          ::waitpid(c.pid, nullptr, 0);
          c.pid = -1;
        } else {
          std::this_thread::sleep_for(2ms);  // a bounded reap, not synchronisation
        }
      }
    }
  }

 private:
  struct Child {
    pid_t pid;
    std::string name;
  };
  std::mutex mu_;
  std::vector<Child> children_;
};

// How long the controller waits, after a worker's link closes, for its process to be seen
// exiting before it calls the loss a lost link instead.
constexpr auto kExitWait = 2s;

}  // namespace

struct Runtime::State {
  struct Child {
    pid_t pid;
    std::string mesh;
    std::size_t rank;
    std::shared_ptr<std::atomic<bool>> stopping;  // its group is being stopped on purpose
  };

  std::mutex children_mu;
  std::unordered_map<std::string, Child> children;  // by proc name
  std::vector<std::string> argv;
  std::unique_ptr<OutputForwarder> output;
  std::filesystem::path dir;
  std::unique_ptr<Proc> proc;
  Address address;
  std::mutex mu;
  std::size_t next_mesh = 0;
  std::vector<std::weak_ptr<LocalProcGroup>> groups;
};

Runtime::Runtime(int argc, char** argv, RuntimeOptions options)
    : state_(std::make_unique<State>()) {
  if (std::getenv(kProcVar) != nullptr) run_worker();
  if (g_runtime != nullptr) throw UsageError("only one baton::Runtime may exist in a process");
  if (const char* w = std::getenv("BATON_LOG_WINDOW_MS")) {
    options.output.window = std::chrono::milliseconds(std::strtoul(w, nullptr, 10));
  }
  state_->output = std::make_unique<OutputForwarder>(std::move(options.output));
  for (int i = 0; i < argc; ++i) state_->argv.emplace_back(argv[i]);
  std::string tmpl = (std::filesystem::temp_directory_path() / "baton-XXXXXX").string();
  if (::mkdtemp(tmpl.data()) == nullptr) {
    throw std::runtime_error("cannot create a directory for the job's sockets in " +
                             std::filesystem::temp_directory_path().string());
  }
  state_->dir = tmpl;
  detail::install_cast();
  state_->proc = std::make_unique<Proc>(ProcOptions{.name = "ctl"});
  state_->address =
      state_->proc->serve(Address::parse("unix://" + (state_->dir / "ctl.sock").string()));
  detail::set_exit_probe([this](const std::string& peer) { return exit_report(peer); });
  g_runtime = this;
}

namespace {

/// "exited with status 3" or "was killed by signal SIGKILL (Killed)", once `pid` has exited
/// (waiting up to kExitWait); nothing if it is still running. The child is not reaped here.
std::optional<std::string> exit_of(pid_t pid) {
  const int fd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (fd >= 0) {
    pollfd p{fd, POLLIN, 0};
    ::poll(&p, 1, static_cast<int>(std::chrono::milliseconds(kExitWait).count()));
    ::close(fd);
  }
  siginfo_t info{};
  if (::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT) != 0) {
    return "exited";  // already reaped
  }
  if (info.si_pid == 0) return std::nullopt;  // still running
  if (info.si_code == CLD_EXITED) return "exited with status " + std::to_string(info.si_status);
  const char* abbrev = ::sigabbrev_np(info.si_status);
  return std::string("was killed by signal ") + (abbrev != nullptr ? "SIG" : "") +
         (abbrev != nullptr ? abbrev : std::to_string(info.si_status)) + " (" +
         ::strsignal(info.si_status) + ")";
}

}  // namespace

std::optional<std::string> Runtime::exit_report(const std::string& proc_name) {
  State::Child c;
  {
    std::lock_guard lock(state_->children_mu);
    auto it = state_->children.find(proc_name);
    if (it == state_->children.end()) return std::nullopt;
    c = it->second;
  }
  if (c.stopping->load()) return std::nullopt;
  auto what = exit_of(c.pid);
  if (!what || c.stopping->load()) return std::nullopt;
  std::string report = "proc " + proc_name + " (rank " + std::to_string(c.rank) + " of " + c.mesh +
                       ", pid " + std::to_string(c.pid) + ") " + *what;
  state_->output->flush();  // its last words are in the pipe
  const auto last = state_->output->recent_stderr(c.mesh, c.rank);
  if (!last.empty()) {
    report += "; its last stderr lines:";
    for (const auto& l : last) report += "\n  " + l;
  }
  return report;
}

Runtime::~Runtime() {
  detail::set_exit_probe(nullptr);
  for (auto& w : state_->groups) {
    if (auto g = w.lock()) g->stop();
  }
  state_->proc.reset();
  state_->output.reset();  // the workers are gone: print what they left in the pipes
  std::error_code ignored;
  std::filesystem::remove_all(state_->dir, ignored);
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

HostMesh this_host() {
  return HostMesh{};
}

ProcMesh HostMesh::spawn_procs(const std::vector<std::pair<std::string, std::size_t>>& dims) const {
  Runtime& rt = Runtime::get();
  Runtime::State& st = *rt.state_;
  const Shape shape = Shape::of(dims);
  std::size_t mesh_index = 0;
  {
    std::lock_guard lock(st.mu);
    mesh_index = st.next_mesh++;
  }
  auto group = std::make_shared<LocalProcGroup>();
  {
    std::lock_guard lock(st.mu);
    st.groups.push_back(group);
  }
  std::vector<ProcId> names;
  std::vector<pid_t> pids;
  std::vector<char*> argv;
  for (auto& a : st.argv) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (std::size_t r = 0; r < shape.len(); ++r) {
    const Point p = shape.point(r);
    ProcId name{"procs" + std::to_string(mesh_index) + "." + std::to_string(r)};
    std::vector<std::string> env;
    for (char** e = environ; *e != nullptr; ++e) env.emplace_back(*e);
    env.push_back(std::string(kProcVar) + "=" + name.name);
    env.push_back(std::string(kControllerVar) + "=ctl");
    env.push_back(std::string(kControllerAddrVar) + "=" + st.address.to_string());
    env.push_back(std::string(kParentVar) + "=" + std::to_string(::getpid()));
    env.push_back(std::string(kDirVar) + "=" + st.dir.string());
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
    pid_t pid = -1;
    const int rc =
        ::posix_spawn(&pid, "/proc/self/exe", &actions, nullptr, argv.data(), envp.data());
    ::posix_spawn_file_actions_destroy(&actions);
    ::close(out[1]);
    ::close(err[1]);
    st.output->add(out[0], 1, "procs" + std::to_string(mesh_index), r);
    st.output->add(err[0], 2, "procs" + std::to_string(mesh_index), r);
    if (rc != 0) {
      throw std::runtime_error("cannot start worker process " + name.name + ": " +
                               std::strerror(rc));
    }
    group->add(pid, name.name);
    {
      std::lock_guard lock(st.children_mu);
      st.children[name.name] =
          Runtime::State::Child{pid, "procs" + std::to_string(mesh_index), r, group->stopping};
    }
    names.push_back(std::move(name));
    pids.push_back(pid);
  }
  // Each worker dials the controller; wait for every hello, and notice one that died.
  const auto deadline = std::chrono::steady_clock::now() + kStartTimeout;
  for (std::size_t r = 0; r < names.size(); ++r) {
    while (!rt.proc().wait_linked(names[r], 50ms)) {
      const std::string exited = LocalProcGroup::reap_if_exited(pids[r]);
      if (!exited.empty()) {
        group->stop();
        throw std::runtime_error("worker " + names[r].name + " " + exited +
                                 " during start-up (see its output above)");
      }
      if (std::chrono::steady_clock::now() > deadline) {
        group->stop();
        throw std::runtime_error("worker " + names[r].name + " did not connect within " +
                                 std::to_string(kStartTimeout.count()) + " s");
      }
    }
  }
  return ProcMesh(shape, std::move(names), group);
}

}  // namespace baton
