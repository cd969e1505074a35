#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <string_view>

#include "actor/cell.hpp"
#include "log/log.hpp"
#include "runtime_impl.hpp"

extern char** environ;

namespace baton {
namespace internal {
namespace {

/// True for "NAME=value" entries that are a worker's bootstrap (set anew for every worker).
bool is_bootstrap(std::string_view entry) {
  for (std::string_view var :
       {kProcVar, kControllerVar, kControllerAddrVar, kParentVar, kDirVar, kSecretVar, kTlsCertVar,
        kTlsKeyVar, kTlsCaVar, "BATON_RANK", "BATON_WORLD_SIZE", "BATON_LOG"}) {
    if (entry.size() > var.size() && entry.substr(0, var.size()) == var &&
        entry[var.size()] == '=') {
      return true;
    }
  }
  return false;
}

/// One future for several: completes once all have, failing with the first failure.
Future<void> all_of(const std::vector<Future<void>>& parts) {
  if (parts.empty()) return make_ready_future();
  struct Join {
    std::mutex mu;
    std::size_t left = 0;
    std::exception_ptr error;
    Promise<void> done;
  };
  auto join = std::make_shared<Join>();
  join->left = parts.size();
  for (const auto& part : parts) {
    const auto& state = part.state();
    state->on_ready([join, state] {
      bool last = false;
      {
        std::lock_guard lock(join->mu);
        if (!join->error) join->error = state->error();
        last = --join->left == 0;
      }
      if (!last) return;
      if (join->error) {
        join->done.set_exception(join->error);
      } else {
        join->done.set_value();
      }
    });
  }
  return join->done.get_future();
}

}  // namespace

StopWorker::StopWorker() : thread_([this] { run(); }) {}

StopWorker::~StopWorker() {
  {
    std::lock_guard lock(mu_);
    quit_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void StopWorker::post(std::function<void()> job) {
  {
    std::lock_guard lock(mu_);
    jobs_.push_back(std::move(job));
  }
  cv_.notify_all();
}

void StopWorker::run() {
  std::unique_lock lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return quit_ || !jobs_.empty(); });
    if (jobs_.empty()) return;  // quit, with nothing left to run
    auto job = std::move(jobs_.front());
    jobs_.pop_front();
    lock.unlock();
    job();
    job = nullptr;  // what it held (its group) goes here, not under the lock
    lock.lock();
  }
}

Future<void> LocalProcGroup::stop(std::chrono::milliseconds grace) {
  std::unique_lock lock(mu_);
  if (phase_ == Phase::idle && !stops_.on_this_thread()) {
    phase_ = Phase::queued;
    stopping->store(true);
    lock.unlock();
    stops_.post([self = shared_from_this(), grace] { self->run_queued(grace); });
    return done_.get_future();
  }
  // On the stop thread itself (a continuation of another stop's future), a stop not yet begun
  // runs here and now: queued behind the job that runs this, it could never be waited for.
  if ((phase_ != Phase::idle && phase_ != Phase::queued) || !stops_.on_this_thread()) {
    return done_.get_future();
  }
  phase_ = Phase::running;
  stopping->store(true);
  lock.unlock();
  run(grace);
  return done_.get_future();
}

void LocalProcGroup::stop_here(std::chrono::milliseconds grace) {
  bool mine = false;
  {
    std::lock_guard lock(mu_);
    if (phase_ == Phase::idle || phase_ == Phase::queued) {
      phase_ = Phase::running;
      stopping->store(true);
      mine = true;
    }
  }
  if (mine) run(grace);
  done_.get_future().state()->wait();
}

void LocalProcGroup::run_queued(std::chrono::milliseconds grace) {
  {
    std::lock_guard lock(mu_);
    if (phase_ != Phase::queued) return;  // someone ran it already
    phase_ = Phase::running;
  }
  run(grace);
}

void LocalProcGroup::run(std::chrono::milliseconds grace) {
  std::vector<Child> children;
  {
    std::lock_guard lock(mu_);
    children = children_;
  }
  std::string failed;  // the processes that outlived SIGKILL
  try {
    using Clock = std::chrono::steady_clock;
    // 1. Orderly: each proc stops the meshes it owns, then its actors, running on_stop.
    std::vector<Future<int>> acks;
    for (auto& c : children) {
      const ActorId agent{c.name, "agent", 0};
      acks.push_back(
          detail::make_ref<detail::ProcAgent>(agent, nullptr).call(&detail::ProcAgent::shutdown));
    }
    auto deadline = Clock::now() + grace;
    for (std::size_t i = 0; i < acks.size(); ++i) {
      if (!acks[i].state()->wait_until(deadline)) {
        detail::log_warn(
            "proc {} did not finish stopping its actors within {} ms (an on_stop hook still "
            "running?); it gets SIGTERM now",
            children[i].name.name, grace.count());
      }
    }
    // 2. SIGTERM, then SIGKILL for whatever is still running after the grace.
    for (auto& c : children) ::kill(c.pid, SIGTERM);
    deadline = Clock::now() + grace;
    for (auto& c : children) {
      if (!watcher_.wait(c.pid, deadline)) {
        detail::log_warn("proc {} ignored SIGTERM for {} ms; sending SIGKILL", c.name.name,
                         grace.count());
        ::kill(c.pid, SIGKILL);
        if (!watcher_.wait(c.pid, Clock::now() + kKillWait)) {
          failed +=
              (failed.empty() ? "" : ", ") + c.name.name + " (pid " + std::to_string(c.pid) + ")";
          continue;  // still ours: the watcher reaps it if it ever goes
        }
      }
      watcher_.forget(c.pid);
    }
    std::vector<ProcId> names;
    names.reserve(children.size());
    for (auto& c : children) names.push_back(c.name);
    if (gone_) gone_(names);
  } catch (...) {
    {
      std::lock_guard lock(mu_);
      phase_ = Phase::done;
    }
    done_.set_exception(std::current_exception());
    return;
  }
  {
    std::lock_guard lock(mu_);
    phase_ = Phase::done;
  }
  if (failed.empty()) {
    done_.set_value();
  } else {
    done_.set_exception(std::make_exception_ptr(std::runtime_error(
        "stop: " + failed + " still running " + std::to_string(kKillWait.count()) +
        " s after SIGKILL (stuck in the kernel: see its state with `ps -o pid,stat,wchan`); "
        "the rest of the mesh is gone")));
  }
}

}  // namespace internal

using namespace internal;

std::vector<std::shared_ptr<LocalProcGroup>> Runtime::State::live_groups() {
  std::vector<std::shared_ptr<LocalProcGroup>> live;
  std::lock_guard lock(mu);
  for (auto& w : groups) {
    if (auto g = w.lock()) live.push_back(std::move(g));
  }
  return live;
}

void Runtime::State::stop_groups() {
  for (auto& g : live_groups()) g->stop_here(stop_grace);
}

Future<void> Runtime::State::stop_groups_async() {
  std::vector<Future<void>> stopped;
  for (auto& g : live_groups()) stopped.push_back(g->stop(stop_grace));
  return all_of(stopped);
}

Future<void> HostMesh::stop() const {
  return Runtime::get().state_->stop_groups_async();
}

HostMesh this_host() {
  return HostMesh{};
}

ProcMesh HostMesh::spawn_procs(const std::vector<std::pair<std::string, std::size_t>>& dims) const {
  Runtime& rt = Runtime::get();
  Runtime::State& st = *rt.state_;
  const Shape shape = Shape::of(dims);
  std::size_t mesh_index = 0;
  // Once its processes are gone, stop()'s future completes only after their links and pipes
  // are closed.
  auto group = std::make_shared<LocalProcGroup>(
      *st.watcher, *st.stops, st.stop_grace, [&st](const std::vector<ProcId>& gone) {
        for (const auto& name : gone) {
          if (!st.proc->wait_unlinked(name, kUnlinkWait)) {
            detail::log_warn("the link to stopped proc {} is still open", name.name);
          }
        }
        detail::forget_procs(gone);  // what this process knew of them
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
    // The controller's level, so a BATON_LOG value it warned about is not warned about again.
    env.push_back("BATON_LOG=" + std::string(detail::log_level_name(detail::log_level())));
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
        group->stop_here(0ms);
        throw std::runtime_error("worker " + names[r].name + " " + *exited +
                                 " during start-up (see its output above)");
      }
      if (std::chrono::steady_clock::now() > deadline) {
        group->stop_here(0ms);
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
