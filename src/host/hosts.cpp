// Hosts: this one, and the hosts of a job, each with an agent (see hosts.hpp). The controller's
// side: spawning proc meshes across hosts, stopping them, and hearing from the agents.
#include "host/hosts.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <filesystem>

#include "actor/failures.hpp"
#include "actor/proc_state.hpp"
#include "log/log.hpp"
#include "mesh/agent.hpp"
#include "runtime_impl.hpp"

extern char** environ;

namespace baton {
namespace internal {

class RemoteGroup;

/// The hosts of a job (HostMesh's state for them).
struct Hosts {
  Shape shape;
  std::vector<RemoteHost> hosts;
  std::mutex mu;
  std::vector<std::weak_ptr<RemoteGroup>> groups;  // under mu
};

struct HostsAccess {
  static HostMesh make(Runtime& rt, std::shared_ptr<Hosts> hosts) {
    HostMesh m;
    m.hosts_ = std::move(hosts);
    m.rt_ = RuntimeAccess::slot(rt);
    return m;
  }
  static const std::shared_ptr<Hosts>& hosts(const HostMesh& m) { return m.hosts_; }
  /// The state of the runtime whose hosts `m` are.
  static RuntimeState& state(const HostMesh& m) {
    return RuntimeAccess::state(m.rt_ ? RuntimeAccess::live(m.rt_, "HostMesh") : Runtime::get());
  }
};

namespace {

ActorRef<HostAgent> agent_ref(const RemoteHost& h) {
  return ActorRef<HostAgent>(ActorId{h.agent, "host", 0});
}

/// The controller's HostClient, spawned in its proc on first use.
ActorId host_client(RuntimeState& st) {
  static constexpr const char* kName = "hosts";
  const ActorId id{st.proc->id(), kName, 0};
  if (!detail::resolve_actor(id)) {
    try {
      (void)st.proc->spawn<HostClient>(kName);
    } catch (const std::exception&) {
      // Spawned meanwhile by another thread: the name is taken.
    }
  }
  return id;
}

/// What every worker on another host shares of the controller's environment.
std::vector<std::string> worker_environment() {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string_view entry(*e);
    // The runtime's own variables stay here; logging and the Python package's choices travel
    // (BATON_MONARCH: `python -m baton.monarch`; BATON_MONARCH_CONTROLLERS: the handle of the
    // job's Monarch controllers; BATON_READ_ONLY_BUFFERS).
    if (entry.starts_with("BATON_") && !entry.starts_with("BATON_LOG") &&
        !entry.starts_with("BATON_MONARCH=") && !entry.starts_with("BATON_MONARCH_CONTROLLERS=") &&
        !entry.starts_with("BATON_READ_ONLY_BUFFERS=")) {
      continue;
    }
    env.emplace_back(entry);
  }
  return env;
}

/// This program, as it ships to the hosts that lack it (hashed once).
RuntimeState::Program program_of(RuntimeState& st) {
  {
    std::lock_guard lock(st.mu);
    if (st.program) return *st.program;
  }
  char buf[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) throw std::runtime_error("cannot read /proc/self/exe");
  RuntimeState::Program p;
  p.path.assign(buf, static_cast<std::size_t>(n));
  // Hashed through /proc/self/exe: the bytes running, even if the file was replaced since.
  auto hash = sha256_file("/proc/self/exe");
  if (!hash) throw std::runtime_error("cannot read this program (" + p.path + ") to ship it");
  p.hash = *hash;
  p.size = std::filesystem::file_size("/proc/self/exe");
  std::lock_guard lock(st.mu);
  if (!st.program) st.program = p;
  return *st.program;
}

/// Whether `error` says the link a call went on was lost before its reply came.
bool link_lost(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const UndeliverableError& e) {
    return e.reason() == UndeliverableError::Reason::link_lost;
  } catch (...) {
    return false;
  }
}

}  // namespace

/// The procs one spawn_procs call started on the hosts of a job.
class RemoteGroup final : public detail::ProcGroup,
                          public std::enable_shared_from_this<RemoteGroup> {
 public:
  struct Part {
    RemoteHost host;
    std::uint64_t group = 0;
    std::vector<ProcId> procs;
  };

  RemoteGroup(RuntimeState& st, std::vector<Part> parts)
      : st_(st), life_(st.life), grace_(st.stop_grace), parts_(std::move(parts)) {}
  ~RemoteGroup() override { (void)stop(grace_); }

  std::chrono::milliseconds default_grace() const override { return grace_; }
  std::shared_ptr<std::atomic<bool>> stopped_flag() const override { return stopping; }
  std::shared_ptr<std::atomic<bool>> stopping = std::make_shared<std::atomic<bool>>(false);

  Future<void> stop(std::chrono::milliseconds grace) override {
    std::lock_guard guard(mu_);
    if (stop_) return *stop_;
    std::vector<std::shared_ptr<detail::StateBase>> parts;
    {
      // A handle that outlived its runtime (dropped at a program's exit, after the runtime
      // closed) does nothing: the agents stop its procs once the controller's links are gone.
      std::lock_guard alive(life_->mu);
      if (!life_->alive) return make_ready_future();
      stopping->store(true);
      for (const auto& p : parts_) {
        if (p.host.lost->load()) continue;  // its procs went with their host
        auto asked =
            agent_ref(p.host)
                .call(&HostAgent::stop_procs, p.group, static_cast<std::int64_t>(grace.count()))
                .state();
        // A host lost while it was asked (its link given up on, after a cut) is as one lost
        // before: its agent stops the procs once it sees this controller's links gone.
        auto part = std::make_shared<detail::State<void>>();
        asked->on_ready([asked, part, host = p.host.address.to_string()] {
          const std::exception_ptr error = asked->error();
          if (error && !link_lost(error)) return part->set_exception(error);
          if (error) {
            detail::log_warn(
                "host {} was lost while its procs were being stopped; its agent "
                "stops them when it sees this controller gone",
                host);
          }
          part->set_value();
        });
        parts.push_back(std::move(part));
      }
    }
    std::vector<ProcId> procs;
    for (const auto& p : parts_) procs.insert(procs.end(), p.procs.begin(), p.procs.end());
    // Once the agents are done, this process forgets the procs; the stop's future completes
    // after that, as a local group's does.
    Promise<void> done;
    stop_ = done.get_future();
    auto all = all_of(parts);
    all.state()->on_ready(
        [done, state = all.state(), procs = std::move(procs), &st = st_, life = life_]() mutable {
          {
            std::lock_guard alive(life->mu);
            if (!life->alive) {
              done.set_value();
              return;
            }
            std::lock_guard lock(st.children_mu);
            for (const auto& p : procs) st.children.erase(p.name);
          }
          detail::forget_procs(procs);
          if (state->error()) {
            done.set_exception(state->error());
          } else {
            done.set_value();
          }
        });
    return *stop_;
  }

 private:
  RuntimeState& st_;  // used only under life_->mu while alive
  std::shared_ptr<RuntimeState::Life> life_;
  const std::chrono::milliseconds grace_;
  const std::vector<Part> parts_;
  std::mutex mu_;
  std::optional<Future<void>> stop_;
};

void HostClient::exited(const std::string& name, const std::string& report) {
  RuntimeState& st = RuntimeAccess::state(proc());
  RuntimeState::Child child;
  {
    std::lock_guard lock(st.children_mu);
    auto it = st.children.find(name);
    if (it == st.children.end()) return;  // not ours, or its mesh was stopped
    child = it->second;
  }
  if (child.stopping->load()) return;
  st.report_exit(name, child, report);
}

void HostClient::output(OutputLine line) {
  // "ctl-a-7.procs1.h2" is the part of this controller's proc mesh procs1 on host 2:
  // "[procs1 hosts=2 0-3] ..."
  RuntimeState& st = RuntimeAccess::state(proc());
  const std::string self = st.proc->id().name + ".";
  if (line.mesh.starts_with(self)) line.mesh.erase(0, self.size());
  const auto dot = line.mesh.rfind(".h");
  if (dot != std::string::npos && dot + 2 < line.mesh.size()) {
    line.mesh = line.mesh.substr(0, dot) + " hosts=" + line.mesh.substr(dot + 2);
  }
  st.output->emit(line);
}

Bytes HostClient::read_chunk(const std::string& hash, std::uint64_t offset, std::uint64_t size) {
  const RuntimeState::Program program = program_of(RuntimeAccess::state(proc()));
  if (hash != program.hash) {
    throw std::runtime_error("this controller ships only its own program (" + program.hash +
                             "), not " + hash.substr(0, 80));
  }
  if (offset > program.size) throw std::runtime_error("read past the end of the program");
  size = std::min<std::uint64_t>(size, program.size - offset);
  std::string bytes(size, '\0');
  const int fd = ::open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error("cannot read this program to ship it");
  std::size_t done = 0;
  while (done < size) {
    const ssize_t n =
        ::pread(fd, bytes.data() + done, size - done, static_cast<off_t>(offset + done));
    if (n <= 0) break;
    done += static_cast<std::size_t>(n);
  }
  ::close(fd);
  bytes.resize(done);
  return Bytes::adopt(std::move(bytes));
}

/// A host's agent is gone or cannot be reached: each proc of ours there is lost with it.
void host_lost(RuntimeState& st, const RemoteHost& host, const std::string& why) {
  host.lost->store(true);
  std::vector<std::pair<std::string, RuntimeState::Child>> lost;
  {
    std::lock_guard lock(st.children_mu);
    for (auto& [name, c] : st.children) {
      if (c.host == host.agent.name && !c.stopping->load() && !c.report) {
        lost.emplace_back(name, c);
      }
    }
  }
  for (auto& [name, c] : lost) {
    st.report_exit(name, c,
                   "proc " + name + " (rank " + std::to_string(c.rank) + " of " + c.mesh +
                       ") lost with its host " + host.address.to_string() + " (agent " +
                       host.agent.name + "): " + why);
  }
}

/// Why an agent refused this controller's proof of the job's secret, and what to do.
std::string credentials_differ(const RuntimeState& st, const std::string& address,
                               const std::string& error) {
  std::string text = "attach: the agent at " + address +
                     " refused this controller: their secrets do not match (" + error +
                     "). This controller's credentials were " + st.credentials_from +
                     "; the agent's are those it was started with (its --credentials or " +
                     kCredentialsVar + "). ";
  const char* now = std::getenv(kCredentialsVar);
  const std::string loaded = std::string(kCredentialsVar) + "=" + (now ? now : "");
  if (now != nullptr && *now != '\0' && st.credentials_from != loaded) {
    text += std::string(kCredentialsVar) + " is " + now +
            " now, but was set after this program's runtime started: set it before the first "
            "baton call (in the environment that starts the program). ";
  }
  return text + "Give the controller and its agents the same credentials directory.";
}

HostMesh attach_hosts(Runtime& rt, const std::vector<std::string>& addresses) {
  if (addresses.empty()) throw UsageError("attach: no host addresses given");
  RuntimeState& st = RuntimeAccess::state(rt);
  auto hosts = std::make_shared<Hosts>();
  hosts->shape = Shape::of({{"hosts", addresses.size()}});
  for (const auto& text : addresses) {
    Address a = Address::parse(text.find("://") == std::string::npos ? "tcp://" + text : text);
    if (a.transport != Address::Transport::tcp) {
      throw UsageError("attach: host address " + text + " is not TCP (host:port)");
    }
    // A host name (a pod's in a headless service, say) is looked up here: the agent is named
    // after the address it advertises, which is what the name resolves to.
    a.host = resolve_host(a.host, text);
    const ProcId agent{agent_name(a)};
    RemoteHost h;
    {
      // One record a host, whichever HostMeshes name it: linked once, lost once.
      std::lock_guard lock(st.mu);
      auto [it, fresh] = st.remote_hosts.try_emplace(agent.name, RemoteHost{a, agent});
      h = it->second;
      if (!st.peer_lost) {
        st.peer_lost = [&st](const std::string& peer) {
          std::optional<RemoteHost> lost;
          {
            std::lock_guard l(st.mu);
            auto found = st.remote_hosts.find(peer);
            if (found != st.remote_hosts.end()) lost = found->second;
          }
          if (lost) host_lost(st, *lost, "the link to its agent closed");
        };
      }
    }
    detail::remember_address(h.agent, a.to_string());  // to dial it again after a cut
    if (!st.proc->linked(h.agent)) {
      h.lost->store(false);
      st.proc->connect(h.agent, a, nullptr);
    }
    hosts->hosts.push_back(std::move(h));
  }
  // Each agent answers as the proc named after the address it advertises: one dialled at
  // another of its addresses would not, and is refused here with what to do.
  std::vector<Future<std::string>> hellos;
  for (const auto& h : hosts->hosts) hellos.push_back(agent_ref(h).call(&HostAgent::hello));
  for (std::size_t i = 0; i < hellos.size(); ++i) {
    try {
      (void)hellos[i].get(std::chrono::seconds(30));
    } catch (const std::exception& e) {
      if (std::string_view(e.what()).find("authentication") != std::string_view::npos) {
        throw std::runtime_error(credentials_differ(st, addresses[i], e.what()));
      }
      throw std::runtime_error("attach: the agent at " + addresses[i] + " did not answer as " +
                               hosts->hosts[i].agent.name +
                               " (attach with the address it advertises, which it prints when it "
                               "starts): " +
                               e.what());
    }
  }
  return HostsAccess::make(rt, std::move(hosts));
}

std::vector<std::string> host_addresses(const HostMesh& hosts) {
  std::vector<std::string> out;
  if (const auto& h = HostsAccess::hosts(hosts)) {
    for (const auto& host : h->hosts) out.push_back(host.address.to_string());
  }
  return out;
}

}  // namespace internal

using namespace internal;

const Shape& HostMesh::shape() const {
  static const Shape kThisHost;  // immutable: no dimensions, one member
  return hosts_ ? hosts_->shape : kThisHost;
}

ProcMesh HostMesh::spawn_procs(const std::vector<std::pair<std::string, std::size_t>>& dims) const {
  detail::check_may_block("HostMesh::spawn_procs() (co_await spawn_procs_async() instead)");
  return spawn_procs_async(dims).get();
}

Future<ProcMesh> HostMesh::spawn_procs_async(
    const std::vector<std::pair<std::string, std::size_t>>& dims,
    const ProcProgram& program) const {
  if (program.executable.empty()) return spawn_procs_async(dims);
  if (hosts_) {
    throw UsageError("spawn_procs: another program (" + program.executable +
                     ") runs on this host only; the hosts of a job run the controller's program");
  }
  if (::access(program.executable.c_str(), X_OK) != 0) {
    throw UsageError("spawn_procs: cannot run " + program.executable + ": " + std::strerror(errno));
  }
  LaunchSpec spec;
  spec.executable = program.executable;
  spec.args = program.args;
  return HostsAccess::state(*this).spawn(Shape::of(dims), spec);
}

Future<ProcMesh> HostMesh::spawn_procs_async(
    const std::vector<std::pair<std::string, std::size_t>>& dims) const {
  try {
    RuntimeState& st = HostsAccess::state(*this);
    Shape per_host = Shape::of(dims);
    if (!hosts_) return st.spawn(per_host, LaunchSpec{});
    std::vector<std::pair<std::string, std::size_t>> all{{"hosts", hosts_->hosts.size()}};
    all.insert(all.end(), dims.begin(), dims.end());
    Shape shape = Shape::of(all);  // checks the names
    std::string mesh;
    {
      std::lock_guard lock(st.mu);
      mesh = st.prefix + "procs" + std::to_string(st.next_mesh++);
    }
    const ActorId client = host_client(st);
    const ActorId owner = detail::current_owner();
    const RuntimeState::Program program = program_of(st);
    const std::vector<std::string> args(st.argv.begin() + (st.argv.empty() ? 0 : 1), st.argv.end());
    const auto env = worker_environment();
    using Started = std::shared_ptr<detail::State<HostProcs>>;
    std::vector<Started> started;
    std::vector<std::shared_ptr<detail::StateBase>> waits;
    for (std::size_t h = 0; h < hosts_->hosts.size(); ++h) {
      // Named after this controller too: other controllers may use the same hosts.
      HostSpawn spec{st.proc->id().name + "." + mesh + ".h" + std::to_string(h),
                     dims,
                     program.path,
                     program.hash,
                     program.size,
                     args,
                     env,
                     client};
      started.push_back(agent_ref(hosts_->hosts[h]).call(&HostAgent::spawn_procs, spec).state());
      waits.push_back(started.back());
    }
    auto result = std::make_shared<detail::State<ProcMesh>>();
    auto settled = all_of(waits);
    settled.state()->on_ready([result, started = std::move(started), hosts = hosts_, shape, mesh,
                               owner, per_host_len = per_host.len(), &st] {
      // What each host started; a host that failed fails the call (the lowest such host's
      // words), and what the others started is stopped, by the end of the group holding it.
      std::vector<RemoteGroup::Part> parts;
      std::vector<ProcId> procs;
      std::exception_ptr failed;
      for (std::size_t h = 0; h < started.size(); ++h) {
        if (auto e = started[h]->error()) {
          if (!failed) failed = e;
          continue;
        }
        const HostProcs& got = started[h]->value();
        hosts->hosts[h].lost->store(false);  // it answered: back, if it was cut off
        RemoteGroup::Part part{hosts->hosts[h], got.group, {}};
        for (std::size_t k = 0; k < got.names.size(); ++k) {
          part.procs.push_back(ProcId{got.names[k]});
          detail::remember_address(part.procs.back(), got.addresses.at(k));
        }
        procs.insert(procs.end(), part.procs.begin(), part.procs.end());
        parts.push_back(std::move(part));
      }
      auto group = std::make_shared<RemoteGroup>(st, std::move(parts));
      if (failed) {
        result->set_exception(failed);
        return;
      }
      {
        std::lock_guard lock(st.children_mu);
        for (std::size_t r = 0; r < procs.size(); ++r) {
          RuntimeState::Child c{-1, mesh, r, group->stopping, owner, std::nullopt, true, {}};
          c.host = hosts->hosts[r / per_host_len].agent.name;
          st.children[procs[r].name] = std::move(c);
        }
      }
      {
        std::lock_guard lock(hosts->mu);
        std::erase_if(hosts->groups, [](const auto& w) { return w.expired(); });
        hosts->groups.push_back(group);
      }
      result->set_value(ProcMesh(shape, std::move(procs), std::move(group)));
    });
    return Future<ProcMesh>(std::move(result));
  } catch (...) {
    Promise<ProcMesh> failed;
    failed.set_exception(std::current_exception());
    return failed.get_future();
  }
}

Future<void> HostMesh::stop() const {
  RuntimeState& st = HostsAccess::state(*this);
  if (!hosts_) return st.stop_groups_async();
  std::vector<std::shared_ptr<RemoteGroup>> live;
  {
    std::lock_guard lock(hosts_->mu);
    for (auto& w : hosts_->groups) {
      if (auto g = w.lock()) live.push_back(std::move(g));
    }
  }
  std::vector<Future<void>> stopped;
  stopped.reserve(live.size());
  for (auto& g : live) stopped.push_back(g->stop(st.stop_grace));
  return all_of(stopped);
}

// this_host(), this_proc() and job::attach() are how a program names the runtime of the
// context it runs in, as Monarch's are; the library below them takes the runtime it needs.
HostMesh this_host() {
  return internal::HostsAccess::make(Runtime::get(), nullptr);
}

ProcMesh this_proc() {
  Runtime& rt = Runtime::get();
  Proc& proc = rt.proc();
  // A worker's proc has its agent from the start; the controller's gets one when first asked.
  std::call_once(internal::RuntimeAccess::state(rt).own_agent, [&] {
    if (!detail::resolve_actor(ActorId{proc.id(), "agent", 0})) {
      (void)proc.spawn<detail::ProcAgent>("agent");
    }
  });
  return ProcMesh(Shape({}, Slice(0, {}, {})), {proc.id()}, nullptr);
}

}  // namespace baton
