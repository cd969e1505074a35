#pragma once

// Internal: which members of an actor mesh were stopped (MeshLife), and the members of actor
// meshes this process spawned, by proc, so that the owner of each hears of them if their proc
// dies (see ProcMesh::spawn).

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "baton/slice/slice.hpp"
#include "baton/wire/ids.hpp"

namespace baton::detail {

/// Where every location of a mesh's base has been stopped (shared by all its views).
class MeshLife {
 public:
  MeshLife(std::string name, std::size_t n)
      : name_(std::move(name)), n_(n), stopped_(new std::atomic<bool>[n]()) {}
  const std::string& name() const { return name_; }
  void stop(std::size_t loc) { stopped_[loc].store(true, std::memory_order_release); }
  bool stopped(std::size_t loc) const { return stopped_[loc].load(std::memory_order_acquire); }
  bool all_stopped() const {
    for (std::size_t i = 0; i < n_; ++i) {
      if (!stopped(i)) return false;
    }
    return true;
  }

 private:
  std::string name_;
  std::size_t n_;
  std::unique_ptr<std::atomic<bool>[]> stopped_;
};

/// A member of an actor mesh as the process that spawned it remembers it, so that if its proc
/// dies the owner of its mesh hears of that member: its actor, its mesh's name, its rank and
/// point (not of the proc's agent).
struct HostedMember {
  ActorId actor;
  ActorId owner;  // the mesh's (see ProcMesh::spawn)
  std::string mesh;
  std::int64_t rank = 0;
  Point point;
  std::shared_ptr<const MeshLife> life;  // whether it was stopped since
  std::size_t loc = 0;                   // its location in the mesh
};

/// Remembers the members a spawn placed, each under its actor's proc; forgets, by the way,
/// those stopped since they were noted.
void note_hosted(std::vector<HostedMember> members);
/// The members noted under the proc `proc` and not stopped since, forgotten as they are
/// returned (its process is gone). A member stopped through a handle that came from another
/// process is not seen as stopped here.
std::vector<HostedMember> take_hosted(const std::string& proc);

}  // namespace baton::detail
