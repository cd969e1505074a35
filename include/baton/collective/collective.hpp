#pragma once

// Collectives over the members of an actor mesh (or a slice of one): allreduce, broadcast,
// allgather, reduce_scatter and barrier on contiguous buffers: host memory through Gloo (small
// buffers and barriers through baton's own messages, one message's latency), device
// memory through NCCL (NVIDIA) or RCCL (AMD), loaded at run time as the gpu layer loads its
// runtime. Rendezvous goes through baton's own messages (no store, no port for the user to
// manage); a buffer on a device with no NCCL/RCCL present is refused, saying why.
//
//   controller:   collective::Group g = collective::make_group(trainers);
//                 trainers.call(&Trainer::join, g).get();
//   in an actor:  co_await comm_.join(g, *this);
//                 co_await comm_.allreduce(std::span<float>(grads), collective::ReduceOp::avg);
//
// A rank that dies, or whose host goes silent, fails every other rank's collective within the
// group's timeout (at once when its process dies), with an error naming the ranks that are gone;
// the group is then broken for good: make a new one from the live (or respawned) members.

#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "baton/actor/actor.hpp"
#include "baton/actor/future.hpp"
#include "baton/mesh/actor_mesh.hpp"
#include "baton/mesh/proc_mesh.hpp"

namespace baton::collective {

enum class ReduceOp : std::uint8_t { sum, avg, min, max };

/// IEEE half precision, as stored (convert through float).
struct float16 {
  std::uint16_t bits = 0;
  float16() = default;
  explicit float16(float f);
  explicit operator float() const;
};
/// bfloat16, as stored: the top half of a float (rounded to nearest even).
struct bfloat16 {
  std::uint16_t bits = 0;
  bfloat16() = default;
  explicit bfloat16(float f);
  explicit operator float() const;
};

/// The element types collectives move.
enum class DType : std::uint8_t { f32, f64, f16, bf16, i8, u8, i32, i64 };
template <class T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() {
  return DType::f32;
}
template <>
constexpr DType dtype_of<double>() {
  return DType::f64;
}
template <>
constexpr DType dtype_of<float16>() {
  return DType::f16;
}
template <>
constexpr DType dtype_of<bfloat16>() {
  return DType::bf16;
}
template <>
constexpr DType dtype_of<std::int8_t>() {
  return DType::i8;
}
template <>
constexpr DType dtype_of<std::uint8_t>() {
  return DType::u8;
}
template <>
constexpr DType dtype_of<std::int32_t>() {
  return DType::i32;
}
template <>
constexpr DType dtype_of<std::int64_t>() {
  return DType::i64;
}

/// The actor name a group of procs (make_group(ProcMesh)) gives its members: any actor there.
inline constexpr const char* kAnyActor = "collective-any-actor";

/// Who is in a group (by group rank) and where they meet. Made by make_group on the controller,
/// sent to every member, joined by each (join()).
struct Group {
  std::uint64_t key = 0;
  std::vector<ActorId> members;        // by group rank; a proc's: {proc, kAnyActor}
  std::vector<std::string> addresses;  // each member's proc, as references carry it
  std::vector<std::string> hosts;      // where each rank's transport listens
  ActorId store;                       // the rendezvous, in the controller
  std::int64_t timeout_ms = 30000;     // a collective that makes no progress this long fails

  template <class Ar>
  void serialize(Ar& ar) {
    ar(key, members, addresses, hosts, store, timeout_ms);
  }
};

struct GroupOptions {
  /// A collective that makes no progress this long fails (a rank whose host went silent).
  std::chrono::milliseconds timeout{30000};
};

/// A group of the members `refs`, in that order (their group ranks); from the controller.
Group make_group(const std::vector<ActorId>& members, const std::vector<std::string>& addresses,
                 GroupOptions options = {});
/// A group of every member of `mesh` (a slice too), ranked in the mesh's order.
template <class A>
Group make_group(const ActorMesh<A>& mesh, GroupOptions options = {}) {
  std::vector<ActorId> ids;
  std::vector<std::string> addresses;
  ids.reserve(mesh.size());
  addresses.reserve(mesh.size());
  for (std::size_t r = 0; r < mesh.size(); ++r) {
    ids.push_back(mesh.at(r).id());
    addresses.push_back(detail::address_text(mesh.at(r).id().proc));
  }
  return make_group(ids, addresses, options);
}

/// A group of the procs of `procs` (a slice too), ranked in the mesh's order: in each proc, one
/// actor (any) joins as that proc's rank.
Group make_group(const ProcMesh& procs, GroupOptions options = {});

/// One rank's end of a group: its collectives run in order on a thread of its own (a small one
/// with nothing before it starts on the calling thread, and a group of one runs there), and each
/// returns a future (co_await it inside an actor). The buffers must stay alive, untouched, until
/// the future completes. Copies share the one end.
/// Every rank calls the same collectives in the same order, with the same count, type,
/// reduction and root: on host memory, ranks that do not all fail at once, saying how they
/// differ, and the group is broken.
class Communicator {
 public:
  Communicator() = default;
  /// Joins `group` as `self` (a member of it, or an actor in a member proc): connects to every
  /// other rank, which join too; completes once connected. Throws UsageError if `self` is not a
  /// member. A Communicator that joined before leaves its old group.
  Future<void> join(const Group& group, Actor& self);
  int rank() const;
  int size() const;

  /// Every rank's `data` becomes the elementwise `op` of all ranks' `data`.
  template <class T>
  Future<void> allreduce(std::span<T> data, ReduceOp op = ReduceOp::sum) {
    return allreduce_bytes(data.data(), data.size(), dtype_of<T>(), op);
  }
  /// Every rank's `data` becomes rank `root`'s.
  template <class T>
  Future<void> broadcast(std::span<T> data, int root = 0) {
    return broadcast_bytes(data.data(), data.size_bytes(), root);
  }
  /// `out` (size() times `in`'s size) becomes every rank's `in`, in rank order.
  template <class T>
  Future<void> allgather(std::span<const T> in, std::span<T> out) {
    return allgather_bytes(in.data(), in.size_bytes(), out.data(), out.size_bytes());
  }
  /// `in` holds size() blocks of `out`'s size; `out` becomes the `op` of every rank's block
  /// number rank().
  template <class T>
  Future<void> reduce_scatter(std::span<const T> in, std::span<T> out,
                              ReduceOp op = ReduceOp::sum) {
    return reduce_scatter_bytes(in.data(), in.size(), out.data(), out.size(), dtype_of<T>(), op);
  }
  /// Completes once every rank has called it.
  Future<void> barrier();

  struct Impl;

 private:
  friend struct TensorAccess;  // collectives on tensors (tensor.hpp)
  // Each holds `keep` (what owns the buffers, or nothing) until the collective is over.
  using Keep = std::shared_ptr<const void>;
  Future<void> allreduce_bytes(void* data, std::size_t count, DType type, ReduceOp op,
                               Keep keep = nullptr);
  Future<void> broadcast_bytes(void* data, std::size_t bytes, int root, Keep keep = nullptr);
  Future<void> allgather_bytes(const void* in, std::size_t in_bytes, void* out,
                               std::size_t out_bytes, Keep keep = nullptr);
  Future<void> reduce_scatter_bytes(const void* in, std::size_t in_count, void* out,
                                    std::size_t out_count, DType type, ReduceOp op,
                                    Keep keep = nullptr);
  std::shared_ptr<Impl> impl_;
};

}  // namespace baton::collective
