// Starting worker processes: spawn_procs_async, the start of a proc group (ProcStart), its
// deadline, and the environment each worker boots from.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <string_view>

#include "actor/failures.hpp"
#include "actor/proc_state.hpp"
#include "log/log.hpp"
#include "runtime_impl.hpp"

extern char** environ;

namespace baton {
namespace internal {
namespace {

/// True for "NAME=value" entries that are a worker's bootstrap (set anew for every worker).
bool is_bootstrap(std::string_view entry) {
  for (std::string_view var :
       {kProcVar, kControllerVar, kControllerAddrVar, kParentVar, kDirVar, kReadyVar, kSecretVar,
        kTlsCertVar, kTlsKeyVar, kTlsCaVar, "BATON_RANK", "BATON_WORLD_SIZE", "BATON_LOG"}) {
    if (entry.size() > var.size() && entry.substr(0, var.size()) == var &&
        entry[var.size()] == '=') {
      return true;
    }
  }
  return false;
}

/// Forgets the port `n` of `proc`, if it is still there (a once-port whose value came, or will
/// never be wanted).
void close_port(const std::weak_ptr<detail::ProcState>& proc, std::uint64_t n) {
  if (auto state = proc.lock()) {
    std::lock_guard lock(state->mu);
    state->ports.erase(n);
  }
}

}  // namespace

/// One spawn_procs_async call until every worker it started has linked (the mesh is ready), or
/// it failed: a worker exited, one did not link in time, or the group was stopped first. The
/// runtime's `starting` table owns it until then; what completes it holds it weakly.
class ProcStart : public std::enable_shared_from_this<ProcStart> {
 public:
  ProcStart(RuntimeState& st, Shape shape, std::shared_ptr<LocalProcGroup> group)
      : st_(st),
        shape_(std::move(shape)),
        group_(std::move(group)),
        names_(shape_.len()),
        ports_(shape_.len()),
        pids_(shape_.len(), -1),
        ready_(shape_.len(), false),
        left_(shape_.len()) {}

  Future<ProcMesh> future() const { return Future<ProcMesh>(result_); }
  const std::shared_ptr<LocalProcGroup>& group() const { return group_; }

  /// False once the call has failed: start no more workers.
  bool going() const {
    std::lock_guard lock(st_.children_mu);
    return !done_;
  }
  /// Opens the port to which worker `r`, named `name`, says it is up; returns its number.
  std::uint64_t expect(std::size_t r, ProcId name) {
    auto [port, ready] = st_.proc->open_once_port<std::string>();
    names_[r] = std::move(name);
    ports_[r] = port.id().port;
    opened_ = r + 1;
    // The callback holds its state weakly: held strongly, the two would keep each other alive
    // when no value ever comes (a worker that never starts).
    ready.state()->on_ready(
        [weak = weak_from_this(), r,
         weak_state = std::weak_ptr<detail::State<std::string>>(ready.state())] {
          auto self = weak.lock();
          auto state = weak_state.lock();
          if (!self || !state) return;
          // The worker says where it serves: other procs (other hosts') dial it there.
          if (!state->error()) detail::remember_address(self->names_[r], state->value());
          self->linked(r);
        });
    return ports_[r];
  }
  /// The process of worker `r` started: under st.children_mu, before the watcher watches it.
  void started(std::size_t r, pid_t pid) {
    pids_[r] = pid;
    if (!done_) st_.starting[pid] = shared_from_this();  // else the group's stop takes it
  }
  /// The group began to stop before it took in `pid` (which its caller kills).
  void stopped_first(pid_t pid) {
    std::lock_guard lock(st_.children_mu);
    decide(stopped_error(pid, "was not started"));
  }
  /// Starting a worker threw.
  void launch_failed(std::exception_ptr e) {
    std::lock_guard lock(st_.children_mu);
    decide(std::move(e));
  }
  /// Every worker is started, or starting stopped: completes or fails the call if that was
  /// decided meanwhile.
  void launched() {
    bool up = false;
    bool failed = false;
    {
      std::lock_guard lock(st_.children_mu);
      launching_ = false;
      if (done_) {
        failed = true;
      } else if (left_ == 0) {
        finish();
        up = true;
      }
    }
    if (up) complete();
    if (failed) fail();
  }

  /// The watcher saw `pid`, one of ours, exit (`what`) before the mesh was up.
  void exited(pid_t pid, const std::string& what) {
    bool fail_now = false;
    {
      std::lock_guard lock(st_.children_mu);
      if (done_) return;
      fail_now = decide(group_->stopping->load() ? stopped_error(pid, what)
                                                 : std::make_exception_ptr(std::runtime_error(
                                                       "worker " + name_of(pid) + " " + what +
                                                       " during start-up (see its output above)")));
    }
    if (fail_now) fail();
  }
  /// The start-up deadline passed.
  void timed_out() {
    bool fail_now = false;
    {
      std::lock_guard lock(st_.children_mu);
      if (done_) return;
      std::size_t r = 0;
      while (r < ready_.size() && ready_[r]) ++r;
      const std::string who = r < names_.size() ? names_[r].name : "of the mesh";
      fail_now = decide(std::make_exception_ptr(
          std::runtime_error("worker " + who + " did not connect within " +
                             std::to_string(kStartTimeout.count()) + " s")));
    }
    if (fail_now) fail();
  }

 private:
  std::string name_of(pid_t pid) const {
    for (std::size_t r = 0; r < pids_.size(); ++r) {
      if (pids_[r] == pid) return names_[r].name;
    }
    return "pid " + std::to_string(pid);
  }
  std::exception_ptr stopped_error(pid_t pid, const std::string& what) const {
    return std::make_exception_ptr(std::runtime_error(
        "spawn_procs: its procs were stopped (HostMesh::stop(), or the runtime's end) before "
        "every worker was up (worker " +
        name_of(pid) + " " + what + ")"));
  }
  /// Worker `r` linked: its value came to its ready port (on the link's I/O thread).
  void linked(std::size_t r) {
    close_port(proc_, ports_[r]);
    {
      std::lock_guard lock(st_.children_mu);
      if (done_ || ready_[r]) return;
      ready_[r] = true;
      if (--left_ != 0 || launching_) return;
      finish();
    }
    complete();
  }
  /// Under children_mu: every worker is up.
  void finish() {
    done_ = true;
    for (const auto& n : names_) st_.children.at(n.name).started = true;
    forget_pids();
  }
  void forget_pids() {
    for (pid_t pid : pids_) {
      if (pid >= 0) st_.starting.erase(pid);
    }
  }
  /// Under children_mu: the call fails with `e` unless it is already decided. True if the
  /// caller is to run fail() now; while workers are still being started launched() runs it.
  bool decide(std::exception_ptr e) {
    if (done_) return false;
    done_ = true;
    error_ = std::move(e);
    forget_pids();
    return !launching_;
  }
  /// Outside the lock, after finish(): hands the mesh over, or stops it if nobody can take it.
  void complete() {
    auto group = std::exchange(group_, nullptr);
    if (result_->readers.load(std::memory_order_acquire) == 0) {
      // Every future of this call was dropped: stop the procs on the stop thread, as dropping
      // the mesh would on this one (a link's I/O thread, which must not wait).
      (void)group->stop(group->default_grace());
      return;
    }
    result_->set_value(ProcMesh(shape_, names_, std::move(group)));
  }
  /// Outside the lock, after decide(): stops whatever was started, then fails the call.
  void fail() {
    auto stopped = group_->stop(std::chrono::milliseconds(0));
    // The processes, their links and pipes are gone once the stop is over: no value can come
    // to a ready port any more.
    stopped.state()->on_ready([self = shared_from_this()] {
      for (std::size_t r = 0; r < self->opened_; ++r) close_port(self->proc_, self->ports_[r]);
      self->group_.reset();
      self->result_->set_exception(self->error_);
    });
  }

  RuntimeState& st_;
  // The proc the ready ports are on; the runtime may end (and with it the proc) before a stop
  // of a failed call completes.
  const std::weak_ptr<detail::ProcState> proc_ = detail::state_of(*st_.proc).weak_from_this();
  const Shape shape_;
  std::shared_ptr<LocalProcGroup> group_;
  std::shared_ptr<detail::State<ProcMesh>> result_ = std::make_shared<detail::State<ProcMesh>>();
  // By rank, written by the starting thread before anything that reads the entry can run (its
  // port's callback, its pid's exit); pids_ under st_.children_mu too.
  std::vector<ProcId> names_;
  std::vector<std::uint64_t> ports_;
  std::vector<pid_t> pids_;
  std::size_t opened_ = 0;  // ports_ opened so far
  // Under st_.children_mu.
  std::vector<bool> ready_;
  std::size_t left_;
  bool launching_ = true;
  bool done_ = false;
  std::exception_ptr error_;
};

/// Starts the workers of `start`'s mesh, named `mesh`.<rank>, each with its bootstrap in its
/// environment; stops early once the call has failed. Throws if one cannot be started.
void launch_workers(RuntimeState& st, const Shape& shape, const std::string& mesh,
                    const LaunchSpec& spec, ProcStart& start) {
  LocalProcGroup& group = *start.group();
  // The caller owns the mesh: the running actor, or code outside actors (the controller).
  const ActorId owner = spec.owner ? *spec.owner : detail::current_owner();
  // What every worker shares of its environment: the caller's, less any bootstrap of its own.
  std::vector<std::string> common;
  if (spec.env) {
    for (const auto& e : *spec.env) {
      if (!is_bootstrap(e)) common.push_back(e);
    }
  } else {
    for (char** e = environ; *e != nullptr; ++e) {
      if (!is_bootstrap(*e)) common.emplace_back(*e);
    }
  }
  if (!spec.serve_host.empty())
    common.push_back(std::string(kServeHostVar) + "=" + spec.serve_host);
  common.push_back(std::string(kControllerVar) + "=" + st.proc->id().name);
  common.push_back(std::string(kControllerAddrVar) + "=" + st.address.to_string());
  common.push_back(std::string(kParentVar) + "=" + std::to_string(::getpid()));
  common.push_back(std::string(kDirVar) + "=" + st.dir.string());
  common.push_back(std::string(kSecretVar) + "=" + st.secret);
  if (st.link.tls.enabled()) {
    common.push_back(std::string(kTlsCertVar) + "=" + st.link.tls.cert_file);
    common.push_back(std::string(kTlsKeyVar) + "=" + st.link.tls.key_file);
    common.push_back(std::string(kTlsCaVar) + "=" + st.link.tls.ca_file);
  }
  common.push_back("BATON_WORLD_SIZE=" + std::to_string(shape.len()));
  // The controller's level, so a BATON_LOG value it warned about is not warned about again.
  common.push_back("BATON_LOG=" + std::string(detail::log_level_name(detail::log_level())));
  for (std::size_t r = 0; r < shape.len() && start.going(); ++r) {
    const Point p = shape.point(r);
    ProcId name{mesh + "." + std::to_string(r)};
    // `ps` says which proc this is: "baton procs0.3", then the program's own arguments.
    std::string argv0 = "baton " + name.name;
    std::vector<char*> argv{argv0.data()};
    if (spec.args) {
      for (const auto& a : *spec.args) argv.push_back(const_cast<char*>(a.c_str()));
    } else {
      for (std::size_t i = 1; i < st.argv.size(); ++i) argv.push_back(st.argv[i].data());
    }
    argv.push_back(nullptr);
    std::vector<std::string> env = common;
    env.push_back(std::string(kProcVar) + "=" + name.name);
    env.push_back(std::string(kReadyVar) + "=" + std::to_string(start.expect(r, name)));
    if (spec.serve_host.empty()) {
      detail::remember_address(name, "unix://" + (st.dir / (name.name + ".sock")).string());
    }
    env.push_back("BATON_RANK=" + std::to_string(r));
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
    if (::pipe2(out, O_CLOEXEC) != 0) {
      throw std::runtime_error(std::string("cannot create pipes for a worker: ") +
                               std::strerror(errno));
    }
    if (::pipe2(err, O_CLOEXEC) != 0) {
      const int e = errno;
      ::close(out[0]);
      ::close(out[1]);
      throw std::runtime_error(std::string("cannot create pipes for a worker: ") +
                               std::strerror(e));
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
    const int rc =
        st.spawner->spawn(&pid, spec.executable.c_str(), &actions, argv.data(), envp.data());
    ::posix_spawn_file_actions_destroy(&actions);
    ::close(out[1]);
    ::close(err[1]);
    st.output->add(out[0], 1, mesh, r);
    st.output->add(err[0], 2, mesh, r);
    if (rc != 0) {
      throw std::runtime_error("cannot start worker process " + name.name + " (" + spec.executable +
                               "): " + std::strerror(rc));
    }
    {
      std::lock_guard lock(st.children_mu);
      st.children[name.name] = RuntimeState::Child{pid,   mesh,         r,     group.stopping,
                                                   owner, std::nullopt, false, spec.report_to};
      st.names[pid] = name.name;
      start.started(r, pid);
    }
    if (!group.add(pid, name)) {
      ::kill(pid, SIGKILL);  // the group's stop began without it: nobody else will stop it
      start.stopped_first(pid);
    }
    st.watcher->add(pid);
  }
}

}  // namespace internal

using namespace internal;

void Runtime::State::start_exited(pid_t pid, const std::string& what) {
  std::shared_ptr<ProcStart> start;
  {
    std::lock_guard lock(children_mu);
    auto it = starting.find(pid);
    if (it == starting.end()) return;
    start = it->second;
  }
  start->exited(pid, what);
}

Future<ProcMesh> Runtime::State::spawn(const Shape& shape, const LaunchSpec& spec) {
  // Once its processes are gone, stop()'s future completes only after their links and pipes
  // are closed.
  auto group = std::make_shared<LocalProcGroup>(
      *watcher, *stops, stop_grace, [this](const std::vector<ProcId>& gone) {
        for (const auto& name : gone) {
          if (!proc->wait_unlinked(name, kUnlinkWait)) {
            detail::log_warn("the link to stopped proc {} is still open", name.name);
          }
        }
        detail::forget_procs(gone);  // what this process knew of them
        output->flush();
      });
  std::string mesh = spec.mesh;
  {
    std::lock_guard lock(mu);
    if (mesh.empty()) mesh = prefix + "procs" + std::to_string(next_mesh++);
    std::erase_if(groups, [](const auto& w) { return w.expired(); });
    groups.push_back(group);
  }
  auto start = std::make_shared<ProcStart>(*this, shape, group);
  Future<ProcMesh> result = start->future();  // before any worker can link
  try {
    launch_workers(*this, shape, mesh, spec, *start);
    // Each worker dials us and says so on its ready port; one that exits first fails the
    // call (Runtime::State::start_exited), and so does one still silent at the deadline.
    timers->at(std::chrono::steady_clock::now() + kStartTimeout,
               [weak = std::weak_ptr<ProcStart>(start)] {
                 if (auto s = weak.lock()) s->timed_out();
               });
  } catch (...) {
    start->launch_failed(std::current_exception());
  }
  start->launched();
  return result;
}

}  // namespace baton
