#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string_view>

#include "actor/cell.hpp"
#include "runtime_impl.hpp"

extern char** environ;

namespace baton {
namespace internal {
namespace {

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

}  // namespace

void LocalProcGroup::stop(std::chrono::milliseconds grace) {
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

}  // namespace internal

using namespace internal;

void Runtime::State::stop_groups() {
  std::vector<std::shared_ptr<LocalProcGroup>> live;
  {
    std::lock_guard lock(mu);
    for (auto& w : groups) {
      if (auto g = w.lock()) live.push_back(std::move(g));
    }
  }
  for (auto& g : live) g->stop(stop_grace);
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
