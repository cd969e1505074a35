#pragma once

// Internal: procs on other hosts. Each host runs an agent (`baton-host`): a runtime of its own,
// serving TCP, whose HostAgent actor starts workers there for a controller. The controller
// talks to it through a HostClient actor of its own, to which the agent reports what its
// workers print and how they end.
//
//   controller                         agent (baton-host on host h)
//   HostMesh::spawn_procs  -- spawn_procs(HostSpawn) -->  HostAgent: starts the workers, which
//                                                         serve TCP and link to the controller
//                          <-- HostProcs (names, addresses)
//   HostClient             <-- exited(name, report), output(line)
//   RemoteGroup::stop      -- stop_procs(group, grace) -->

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "baton/host/runtime.hpp"
#include "baton/mesh/mesh.hpp"
#include "host/files.hpp"

namespace baton {
namespace internal {

/// What a controller asks an agent to start: one proc mesh's workers on that host.
struct HostSpawn {
  std::string mesh;  // the procs are named mesh.0, mesh.1, ...
  std::vector<std::pair<std::string, std::size_t>> dims;
  std::string executable;             // the controller's program: where it is there (for reports)
  std::string executable_hash;        // the SHA-256 of its bytes: the agent runs its own copy,
  std::uint64_t executable_size = 0;  // fetched from `client` if it has none that checks out
  std::vector<std::string> args;      // argv[1..]
  std::vector<std::string> env;       // the controller's environment, less its bootstrap
  ActorId client;                     // the controller's HostClient

  template <class Ar>
  void serialize(Ar& ar) {
    ar(mesh, dims, executable, executable_hash, executable_size, args, env, client);
  }
};

/// The procs an agent started, by rank, and where each serves.
struct HostProcs {
  std::vector<std::string> names;
  std::vector<std::string> addresses;
  std::uint64_t group = 0;  // for stop_procs

  template <class Ar>
  void serialize(Ar& ar) {
    ar(names, addresses, group);
  }
};

/// The agent's actor (named "host" in the agent's proc).
class HostAgent : public Actor {
 public:
  /// `serve_host`: the address its workers listen on, the one the agent advertises;
  /// `cache_dir`: where it keeps the programs controllers ship it, by hash; `once`: serve one
  /// controller, refuse any other, and exit once it is gone (an agent a job's launcher started
  /// for it). Without `once` it serves any controller holding the job's credentials, and a
  /// controller that goes takes only its own procs with it.
  HostAgent(std::string serve_host, std::string cache_dir, bool once = false);

  /// Who this agent is: its proc's name and its host's name.
  std::string hello();
  /// Starts the workers of `spec` on this host; completes once every one has linked.
  Task<HostProcs> spawn_procs(HostSpawn spec);
  /// Stops the procs of `group`, in order, as ProcMesh::stop does; completes once they are gone.
  Task<int> stop_procs(std::uint64_t group, std::int64_t grace_ms);
  /// The link to the proc `peer` closed for good: the procs it asked for are stopped.
  void controller_lost(std::string peer);
  /// Bytes of programs fetched from controllers so far (a cached program moves none).
  std::uint64_t bytes_fetched() { return bytes_fetched_; }

  static constexpr auto endpoints =
      baton::endpoints<&HostAgent::hello, &HostAgent::spawn_procs, &HostAgent::stop_procs,
                       &HostAgent::controller_lost, &HostAgent::bytes_fetched>();

 private:
  struct Group {
    ProcMesh procs;
    ActorId client;
    std::string mesh;
  };
  void forget_output(const std::string& mesh);

  /// The program `spec` names, from the cache, fetched from its client first if need be.
  Task<std::string> program(const HostSpawn& spec);

  std::string serve_host_;
  std::unique_ptr<FileCache> cache_;
  bool once_ = false;
  std::string first_controller_;  // the proc of the first controller that spawned here
  bool first_gone_ = false;       // with once_: that controller went, this agent is ending
  std::uint64_t bytes_fetched_ = 0;
  std::uint64_t next_group_ = 1;
  std::map<std::uint64_t, Group> groups_;
};

/// The controller's actor (named "hosts" in its proc) that hears from agents.
class HostClient : public Actor {
 public:
  /// A proc an agent started for this controller ended, not by a stop.
  void exited(const std::string& name, const std::string& report);
  /// A line (or the same line from several ranks) a worker on another host printed.
  void output(OutputLine line);
  /// Up to `size` bytes at `offset` of this controller's program, if `hash` is its hash (the
  /// only file it ships).
  Bytes read_chunk(const std::string& hash, std::uint64_t offset, std::uint64_t size);

  static constexpr auto endpoints =
      baton::endpoints<&HostClient::exited, &HostClient::output, &HostClient::read_chunk>();
};

/// The proc name of the agent that advertises `address` ("host-10.0.0.2-7000").
std::string agent_name(const Address& address);

/// The hosts whose agents serve at `addresses`, for `rt` (see job::attach).
HostMesh attach_hosts(Runtime& rt, const std::vector<std::string>& addresses);
/// This host's address on the route to the IPv4 address `peer` (no packet is sent); empty if
/// there is no route.
std::string route_address(const std::string& peer);
/// The first IPv4 address of interface `name` (or of any interface that is up and not loopback,
/// when `name` is empty); empty if there is none.
std::string interface_address(const std::string& name);
/// For procs at `addresses` (as references carry them), the host each listens on so that all
/// of them can reach it: a TCP proc's own host; a proc of this host (a unix socket) loopback
/// when all are here, else this host's address on the route to the others.
std::vector<std::string> reachable_hosts(const std::vector<std::string>& addresses);
/// The numeric address of `host` (itself if it is one already), IPv4 first; throws naming
/// `what` if it cannot be looked up.
std::string resolve_host(const std::string& host, const std::string& what);

/// Where the agents of `hosts` serve, in order (empty for this host).
std::vector<std::string> host_addresses(const HostMesh& hosts);

}  // namespace internal
}  // namespace baton

namespace baton {
template <class Ar>
void serialize(Ar& ar, OutputLine& line) {
  ar(line.stream, line.mesh, line.ranks, line.text);
}
}  // namespace baton
