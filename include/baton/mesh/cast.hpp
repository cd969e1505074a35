#pragma once

// The cast tree: how one message reaches every member of a (sliced) actor mesh.
//
// CA-3: a cast names its destination compactly, by the mesh's key and the Slice of its view,
// so the bytes it puts on the wire, at the root and at every node, do not grow with the mesh.
// Each member's proc learns its node of the fixed tree (its subtree's range and its children's
// heads) once, at spawn, and derives the rest from it.
//
// The members of a mesh's base, in location order, form a fixed tree: the sender splits them into
// contiguous chunks and sends each chunk to its first member's proc; that proc delivers to its own
// member and splits the rest of its chunk the same way. A range spanning hosts is cut where the
// host changes, into at most kCastFanOut runs of whole hosts, so a cast enters each host once; a
// range on one host is split into at most the mesh's host fan-out chunks (kCastHostFanOut unless
// BATON_CAST_HOST_FANOUT said otherwise at spawn), so a cast to the procs of one host goes out
// flat up to that many members: they share the host's cores, and forwarding through one of them
// adds work and hand-offs that sending directly does not. A slice prunes the
// subtrees with none of its members but never changes the tree, so every message from one sender
// to one member (a cast, or a single-member call routed down the tree) takes the same path, and
// FIFO per (sender, receiver) holds across direct and broadcast sends. Forwarding runs on the
// I/O thread that received the cast, in link order. Replies climb the same tree: each node
// gathers (or folds, for reducers) its subtree's replies and sends one message to its parent, so
// the sender handles at most the fan-out's messages whatever the mesh size. A child whose subtree
// is its own member alone gets a plain call, as a unicast to it would.

#include <array>
#include <bit>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "baton/actor/future.hpp"
#include "baton/actor/port.hpp"
#include "baton/slice/slice.hpp"
#include "baton/wire/archive.hpp"
#include "baton/wire/ids.hpp"

namespace baton {

class Proc;

/// The most runs of hosts a node of the cast tree (the sender included) splits a range spanning
/// hosts into: the messages it sends across hosts for one cast.
inline constexpr std::size_t kCastFanOut = 8;
/// The most members of one host a node sends to directly, by default; also the most a mesh may
/// set (BATON_CAST_HOST_FANOUT, read where the mesh is spawned, from 2 up to this).
inline constexpr std::size_t kCastHostFanOut = 64;

namespace detail {

/// One member of a mesh's base: its actor and where its proc listens.
struct CastMember {
  ActorId actor;
  std::string address;

  template <class Ar>
  void serialize(Ar& ar) {
    ar(actor, address);
  }
};

/// A member's node of a mesh's fixed cast tree: what its proc learns at spawn (CA-3).
struct CastChild {
  std::uint32_t loc = 0;  // the child's head: its member's location
  std::uint32_t end = 0;  // one past the last location of its subtree
  CastMember head;

  template <class Ar>
  void serialize(Ar& ar) {
    ar(loc, end, head);
  }
};
struct CastNode {
  std::uint32_t loc = 0;  // this member's location; its subtree is [loc, end)
  std::uint32_t end = 0;
  CastMember self;
  /// The members of (loc, end): a node forwards to its children's heads among them and, if a
  /// head's proc is dead or unreachable, to that head's own children instead (CA-4).
  std::vector<CastMember> below;
  std::uint32_t host_fanout = kCastHostFanOut;  // the mesh's (see kCastHostFanOut)

  template <class Ar>
  void serialize(Ar& ar) {
    ar(loc, end, self, below, host_fanout);
  }
};
/// The node at every location of a base of members (by location), for a mesh whose host
/// fan-out is `host_fanout`.
std::vector<CastNode> cast_tree(const std::vector<CastMember>& base,
                                std::size_t host_fanout = kCastHostFanOut);
/// A node's children: the chunks of (loc, end), each with its head.
std::vector<CastChild> children_of(const CastNode& node);
/// The sender's children over a base of members: the heads of its chunks. A mesh works them
/// out once, for all its casts (CastRequest::children).
std::shared_ptr<const std::vector<CastChild>> root_children(
    const std::vector<CastMember>& base, std::size_t host_fanout = kCastHostFanOut);
/// The host fan-out a mesh spawned here now gets: BATON_CAST_HOST_FANOUT, else kCastHostFanOut.
/// Throws UsageError, saying what it takes, for anything but a whole number from 2 to
/// kCastHostFanOut.
std::uint32_t cast_host_fanout_from_env();
/// Installs `node` of the mesh `key` in `proc`, the member's proc; forget_cast_node() drops
/// it once every member of the mesh stopped.
void learn_cast_node(Proc& proc, std::uint64_t key, CastNode node);
void forget_cast_node(Proc& proc, std::uint64_t key);
/// How many cast nodes `proc` knows (for tests: the table shrinks when meshes stop).
std::size_t cast_nodes_known(Proc& proc);
/// A fresh key for a mesh's tree.
std::uint64_t new_mesh_key();

/// One reply of a cast: the member's rank in the cast's slice and its status-tagged body.
struct CastItem {
  std::uint32_t rank = 0;
  Body reply;

  template <class Ar>
  void serialize(Ar& ar) {
    ar(rank, reply.head, reply.parts);
  }
};

enum class CastMode : std::uint8_t {
  none = 0,    // broadcast: no replies
  gather = 1,  // every reply, by rank
  reduce = 2,  // replies folded by a registered reducer on the way up
  stream = 3,  // each reply straight to a port as it comes, a lost member's failure too
};

/// A cast as the sender describes it.
struct CastRequest {
  std::uint64_t key = 0;                                // the mesh's tree (CA-3)
  std::shared_ptr<const std::vector<CastMember>> base;  // by location
  std::uint32_t host_fanout = kCastHostFanOut;          // the mesh's, as its procs learned it
  /// root_children(*base, host_fanout), if the caller kept them (else the cast works them out).
  std::shared_ptr<const std::vector<CastChild>> children;
  Slice view;  // the locations cast to; a member's rank is its rank in the view
  std::uint64_t endpoint = 0;
  /// Its name, for a gather or reduce whose round trip the root proc's metrics count (empty:
  /// not counted).
  std::string_view endpoint_name;
  Body args;
  CastMode mode = CastMode::none;
  std::uint64_t reducer = 0;
  std::string reducer_state;  // the reducer object's members, for every node that folds
  std::optional<PortId> stream_to;
  /// For gather and reduce: called once with the replies (reduce: at most one item), on
  /// whichever thread completes the cast. For stream: called once, with no items, when the
  /// tree is done (every item, a failure included, goes to `stream_to`).
  std::function<void(std::vector<CastItem>)> done;
};

/// Sends a cast down the tree rooted at the calling proc.
void cast(CastRequest request);
/// The bytes of the hop a cast sends to the member at `child_loc` (a child of the root or of
/// any node) whose parent takes its result at `reply_to`, arguments left out: they do not
/// depend on the mesh's size (CA-3).
std::size_t cast_hop_bytes(const CastRequest& request, std::size_t child_loc,
                           const PortId& reply_to);
/// Installs the forwarder for casts arriving from other processes (idempotent).
void install_cast();

/// Completes `state` from a cast reply (the value, or the member's failure).
/// `shape`, if given, is the cast's: a failure (ActorError, SupervisionError,
/// UndeliverableError) then names the member's rank and point (see name_member).
void complete_item(StateBase& state, const CastItem& item, std::string_view endpoint,
                   const Shape* shape = nullptr);
/// Whether a cast reply holds the member's value (its status ok) rather than a failure.
inline bool reply_holds_value(const Body& reply) {
  return !reply.head.empty() && reply.head[0] == 0;
}
/// The value a reply that holds one carries (reply_holds_value): DecodeError if it is not an R.
template <class R>
R reply_value(const Body& reply) {
  Body rest;
  rest.head.assign(reply.head, 1);
  rest.parts = reply.parts;
  return decode<R>(rest);
}
/// The same, naming the member at `point` in its failure.
void complete_item(StateBase& state, const CastItem& item, std::string_view endpoint,
                   const Point& point);
/// `e`, naming the member that failed at `point` (as "rank 2 {gpus: 2}", and an ActorError's
/// point()) if it is an ActorError, a SupervisionError or an UndeliverableError that names none
/// yet; otherwise `e` itself.
std::exception_ptr name_member(std::exception_ptr e, const Point& point);

/// Folds encoded values of one type, in order, into one, with a reducer rebuilt from `state`;
/// registered by id in every process.
using ReduceFn = Body (*)(const std::string& state, const std::vector<Body>& values);
std::uint64_t register_reducer(std::string_view key, ReduceFn fn);

/// A reducer's members as bytes (CA-2: every node folds with the sender's reducer, members and
/// all): nothing for an empty one, its serialize() if it has one, else its bytes if it is
/// trivially copyable (a lambda capturing numbers, say; every proc runs the same binary).
template <class Red>
std::string save_reducer(const Red& red) {
  if constexpr (std::is_empty_v<Red>) {
    (void)red;
    return {};
  } else if constexpr (cereal::traits::is_output_serializable<Red, OutputArchive>::value) {
    return encode(red).head;
  } else {
    static_assert(std::is_trivially_copyable_v<Red>,
                  "a reducer with members needs a serialize(Ar&) member, or must be trivially "
                  "copyable, so that every proc can fold with them");
    std::string s(sizeof(Red), '\0');
    std::memcpy(s.data(), &red, sizeof(Red));
    return s;
  }
}
template <class Red>
Red load_reducer(const std::string& state) {
  if constexpr (std::is_empty_v<Red>) {
    (void)state;
    return Red{};
  } else if constexpr (cereal::traits::is_output_serializable<Red, OutputArchive>::value) {
    Body b;
    b.head = state;
    return decode<Red>(b);
  } else {
    if (state.size() != sizeof(Red)) throw DecodeError("a reducer's state has the wrong size");
    std::array<std::byte, sizeof(Red)> raw;
    std::memcpy(raw.data(), state.data(), sizeof(Red));
    return std::bit_cast<Red>(raw);
  }
}

template <class Red, class R>
struct ReducerRegistration {
  static Body fold(const std::string& state, const std::vector<Body>& values) {
    Red red = load_reducer<Red>(state);
    R acc = decode<R>(values.at(0));
    for (std::size_t i = 1; i < values.size(); ++i) {
      acc = static_cast<R>(red(std::move(acc), decode<R>(values[i])));
    }
    return encode(acc);
  }
  static std::string_view key() { return __PRETTY_FUNCTION__; }
  static inline const std::uint64_t id = register_reducer(key(), &fold);
};

/// Replies of a streamed cast, queued as they arrive.
class StreamQueue {
 public:
  void push(CastItem item);
  /// The next item; waits for it until `deadline` (nullopt once it passed), outside actors
  /// running the event loop the items come in on (wait_for_value).
  std::optional<CastItem> pop(std::optional<std::chrono::steady_clock::time_point> deadline);
  /// The proc whose links bring the items (its state).
  void set_route(std::weak_ptr<void> route);

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<CastItem> q_;
  std::size_t head_ = 0;
  std::weak_ptr<void> route_;
  std::function<void()> wake_;  // a waiter running the event loop
};
/// Opens a port for a stream to the members of `base` at `view` on the proc that sends the
/// cast; what arrives there goes to `q`. An item saying that its member was lost with a link
/// (all a forwarder can tell) becomes its proc's SupervisionError first, where that proc is
/// known (or seen, waiting a little) to have died, as in a gather; that runs on the proc's
/// background thread.
PortId open_stream_port(std::shared_ptr<const std::vector<CastMember>> base, const Slice& view,
                        std::shared_ptr<StreamQueue> q);
/// Closes a port opened by open_stream_port.
void close_stream_port(const PortId& id);

}  // namespace detail

/// Reducers for ActorMesh::reduce. Any callable (a, b) -> value works: an empty one, one with a
/// serialize(Ar&) member, or a trivially copyable one (a lambda capturing numbers); every node
/// of the cast tree folds with a copy of the caller's object (CA-2).
struct Sum {
  template <class T>
  T operator()(const T& a, const T& b) const {
    return a + b;
  }
};
struct Min {
  template <class T>
  T operator()(const T& a, const T& b) const {
    return b < a ? b : a;
  }
};
struct Max {
  template <class T>
  T operator()(const T& a, const T& b) const {
    return a < b ? b : a;
  }
};
inline constexpr Sum sum{};
inline constexpr Min min{};
inline constexpr Max max{};

}  // namespace baton
