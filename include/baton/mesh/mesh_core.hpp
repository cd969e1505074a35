#pragma once

// Internal (detail): what an actor mesh is whatever its actors' type. ActorMesh<A> is a typed
// wrapper over it (baton/mesh/actor_mesh.hpp); its code lives in src/mesh/mesh_core.cpp.

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "baton/actor/future.hpp"
#include "baton/mesh/cast.hpp"
#include "baton/slice/slice.hpp"
#include "baton/wire/ids.hpp"

namespace baton::detail {

class MeshLife;

/// The members of an actor mesh by location, its name, its cast tree's key (CA-3) and which of
/// its members were stopped: shared by every view and copy of the mesh.
class MeshCore {
 public:
  /// Over members whose procs learned the mesh's tree under `key`, with `host_fanout`;
  /// `procs_stopped` is set once their proc mesh is told to stop (null: never).
  MeshCore(const std::vector<ActorId>& by_location, std::string name, std::uint64_t key,
           std::uint32_t host_fanout, std::shared_ptr<const std::atomic<bool>> procs_stopped);
  ~MeshCore();
  MeshCore(const MeshCore&) = delete;
  MeshCore& operator=(const MeshCore&) = delete;

  const std::string& name() const;
  std::uint64_t key() const { return key_; }
  std::uint32_t host_fanout() const { return host_fanout_; }
  /// Whether the sender sends to the member at `loc` directly, so that a plain call to it takes
  /// the same path as a cast.
  bool direct(std::size_t loc) const;
  std::size_t size() const { return members_->size(); }
  const ActorId& id(std::size_t loc) const { return (*members_)[loc].actor; }
  /// The members by location, with the addresses of their procs (what the cast tree is built of).
  const std::vector<CastMember>& members() const { return *members_; }

  /// Throws UsageError, saying what to do, if the member at `loc` or its procs were stopped.
  void check_live(std::size_t loc) const;
  /// A rank of `view` chosen at random (to spread load) among the members whose procs are not
  /// known to have died; any rank if every one has (its call then fails saying so).
  std::size_t choose(const Shape& view) const;
  /// A cast of `mode` to endpoint `endpoint` over the locations of `view`, every one of them
  /// checked live first.
  CastRequest request(const Shape& view, std::uint64_t endpoint, Body args, CastMode mode) const;
  /// The same to the single location `loc` (checked by the caller).
  CastRequest request_one(std::size_t loc, std::uint64_t endpoint, Body args) const;
  /// Stops the members at the locations of `view` (see ActorMesh::stop).
  Future<void> stop(const Shape& view) const;
  /// Notes the members of this newly spawned mesh, owned by `owner`, so that the owner hears
  /// of them when their proc dies (see ProcMesh::spawn).
  void note_hosted(const ActorId& owner, const Shape& shape) const;

 private:
  std::shared_ptr<const std::vector<CastMember>> members_;
  std::shared_ptr<const std::vector<CastChild>> root_children_;  // of every cast's root
  std::uint64_t key_ = 0;
  std::uint32_t host_fanout_ = kCastHostFanOut;
  std::shared_ptr<MeshLife> life_;
  std::shared_ptr<const std::atomic<bool>> procs_stopped_;
};

}  // namespace baton::detail
