#pragma once

// ActorMesh<A>: one actor of type A per member of a shape, called all at once through the cast
// tree (baton/mesh/cast.hpp), a typed wrapper over detail::MeshCore; MeshStream, its replies as
// they arrive.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "baton/actor/errors.hpp"
#include "baton/actor/proc.hpp"
#include "baton/actor/task.hpp"
#include "baton/mesh/cast.hpp"
#include "baton/mesh/mesh_core.hpp"
#include "baton/mesh/value_mesh.hpp"
#include "baton/slice/slice.hpp"
#include "baton/slice/sliceable.hpp"

namespace baton {

namespace detail {

/// `f`, whose failure (an ActorError, SupervisionError or UndeliverableError) names the member
/// as `where` (its rank and point in the mesh it was called through), as a cast's reply does.
/// `f` is the only future of its state (a call's, just made).
template <class R>
Future<R> naming_member(Future<R> f, Point where) {
  f.state()->rename_failures([where = std::move(where)](std::exception_ptr e) {
    return name_member(std::move(e), where);
  });
  return f;
}

/// Turns the gathered items of a cast into a ValueMesh; the lowest-ranked failure wins.
template <class R>
void finish_gather(const Shape& shape, std::string_view endpoint, std::vector<CastItem> items,
                   const Promise<ValueMesh<mesh_value_t<R>>>& promise) {
  using V = mesh_value_t<R>;
  std::vector<std::optional<V>> values(shape.len());
  std::sort(items.begin(), items.end(),
            [](const CastItem& a, const CastItem& b) { return a.rank < b.rank; });
  try {
    for (const auto& item : items) {
      if (item.rank >= values.size() || values[item.rank]) {
        throw DecodeError("a cast reply names rank " + std::to_string(item.rank) + " twice or " +
                          "outside the mesh " + shape.to_string());
      }
      if constexpr (!std::is_void_v<R> && !local_only<R>::value) {
        // A value is decoded where it is; only a failure needs a state to name its member.
        if (reply_holds_value(item.reply)) {
          values[item.rank].emplace(reply_value<R>(item.reply));
          continue;
        }
      }
      State<R> state;
      complete_item(state, item, endpoint, &shape);
      if constexpr (std::is_void_v<R>) {
        state.value();
        values[item.rank].emplace();
      } else {
        values[item.rank].emplace(std::move(state.value()));
      }
    }
    std::vector<V> out;
    out.reserve(values.size());
    for (std::size_t r = 0; r < values.size(); ++r) {
      if (!values[r]) {
        throw UndeliverableError(
            UndeliverableError::Reason::link_lost,
            "no reply from rank " + std::to_string(r) + " of " + shape.to_string());
      }
      out.push_back(std::move(*values[r]));
    }
    promise.set_value(ValueMesh<V>(shape, std::move(out)));
  } catch (...) {
    promise.set_exception(std::current_exception());
  }
}

}  // namespace detail

/// Replies of ActorMesh::stream(), in the order they arrive: exactly one item per member, its
/// value or its failure.
///
/// A member's failure is thrown from next() and the stream goes on after it; the exception
/// names the member's rank and point, as a gather's does: an endpoint's throw is an ActorError
/// (see ActorError::where()); a member that was lost, its process dead (or stopped) or its
/// link gone, is a SupervisionError (or an UndeliverableError where how it was lost is not
/// known), whose where() names it. A lost member comes out as soon as it is found lost,
/// without waiting for the members still working (as a gather fails at once, CA-1). A member
/// reached through a forwarder whose process died is reported lost with it, and a reply it
/// sends afterwards is dropped: each member appears once.
template <class V>
class MeshStream {
 public:
  MeshStream(Shape shape, PortId port, std::shared_ptr<detail::StreamQueue> q,
             std::string_view endpoint)
      : shape_(std::move(shape)),
        port_(std::move(port)),
        q_(std::move(q)),
        endpoint_(endpoint),
        seen_ranks_(shape_.len(), false) {}
  MeshStream(MeshStream&&) noexcept = default;
  MeshStream& operator=(MeshStream&&) noexcept = default;
  ~MeshStream() {
    if (q_) detail::close_stream_port(port_);
  }

  /// The next reply and its member's Point; nullopt once every member has had its item. A
  /// member's failure is thrown (ActorError, SupervisionError, UndeliverableError, ...; see
  /// above) and the stream goes on after it. Blocks: inside an actor it is a UsageError (F-2).
  std::optional<std::pair<Point, V>> next() { return next_until(std::nullopt); }
  /// Like next(), but throws TimeoutError if no reply comes within `timeout`; the stream stays
  /// usable.
  std::optional<std::pair<Point, V>> next(std::chrono::milliseconds timeout) {
    return next_until(std::chrono::steady_clock::now() + timeout);
  }

 private:
  std::optional<std::pair<Point, V>> next_until(
      std::optional<std::chrono::steady_clock::time_point> deadline) {
    detail::check_may_block("MeshStream::next()");
    if (!q_) throw UsageError("use of an empty or moved-from baton::MeshStream");
    for (;;) {
      if (seen_ == shape_.len()) return std::nullopt;
      std::optional<detail::CastItem> popped = q_->pop(deadline);
      if (!popped) {
        throw TimeoutError("no reply within the timeout (" + std::to_string(shape_.len() - seen_) +
                           " of " + std::to_string(shape_.len()) +
                           " still to come); the stream is still usable: call next() again");
      }
      detail::CastItem item = std::move(*popped);
      if (item.rank >= shape_.len()) throw DecodeError("a streamed reply names a rank outside");
      if (seen_ranks_[item.rank]) continue;  // a second item for a member: the first one won
      seen_ranks_[item.rank] = true;
      ++seen_;
      detail::State<V> state;
      detail::complete_item(state, item, endpoint_, &shape_);
      return std::pair<Point, V>(shape_.point(item.rank), std::move(state.value()));
    }
  }

  Shape shape_;
  PortId port_;
  std::shared_ptr<detail::StreamQueue> q_;
  std::string_view endpoint_;
  std::size_t seen_ = 0;
  std::vector<bool> seen_ranks_;  // which members had their item
};

class ProcMesh;

/// One actor of type A per member of a shape. Copies and slices are views of the same actors.
/// Calls travel down the cast tree (see baton/mesh/cast.hpp); FIFO per (sender, actor) holds
/// for everything sent through meshes, whichever adverb sent it. What does not depend on A
/// lives in detail::MeshCore (baton/mesh/mesh_core.hpp).
template <class A>
class ActorMesh : public Sliceable<ActorMesh<A>> {
 public:
  ActorMesh() = default;
  /// Over members whose procs learned the mesh's tree under `key`, with `host_fanout` (see
  /// ProcMesh::spawn).
  ActorMesh(Shape shape, std::vector<ActorRef<A>> by_location, std::string name, std::uint64_t key,
            std::uint32_t host_fanout = kCastHostFanOut,
            std::shared_ptr<const std::atomic<bool>> procs_stopped = nullptr)
      : shape_(std::move(shape)) {
    std::vector<ActorId> ids;
    ids.reserve(by_location.size());
    for (const auto& ref : by_location) ids.push_back(ref.id());
    core_ = std::make_shared<const detail::MeshCore>(ids, std::move(name), key, host_fanout,
                                                     std::move(procs_stopped));
    refs_ = std::make_shared<const std::vector<ActorRef<A>>>(std::move(by_location));
  }

  const Shape& shape() const { return shape_; }
  std::size_t size() const { return shape_.len(); }
  /// The actor at `rank` of this (possibly sliced) mesh. Messages sent through the ref take
  /// their own path: FIFO with the mesh's adverbs holds only for members the sender reaches
  /// directly (see MeshCore::direct).
  const ActorRef<A>& at(std::size_t rank) const { return refs().at(shape_.location(rank)); }

  /// Calls every member; the future holds each reply at its rank (its Point via shape()).
  template <class F, class... Args>
  Future<ValueMesh<mesh_value_t<detail::reply_t<F>>>> call(F f, Args&&... args) const {
    using R = detail::reply_t<F>;
    const auto& ep = detail::endpoint_for<A>(f);
    Promise<ValueMesh<mesh_value_t<R>>> promise;
    auto result = promise.get_future();
    auto req =
        core().request(shape_, ep.id, detail::encode_call_args<F>(std::forward<Args>(args)...),
                       detail::CastMode::gather);
    req.endpoint_name = ep.name;
    req.done = [shape = shape_, name = ep.name, promise](std::vector<detail::CastItem> items) {
      detail::finish_gather<R>(shape, name, std::move(items), promise);
    };
    detail::cast(std::move(req));
    return result;
  }
  /// Calls the single member of a mesh of size 1.
  template <class F, class... Args>
  Future<detail::reply_t<F>> call_one(F f, Args&&... args) const {
    if (size() != 1) {
      throw UsageError("call_one() needs a mesh of exactly one actor; this mesh " +
                       shape_.to_string() + " has " + std::to_string(size()) +
                       " (slice it, or use call() or choose())");
    }
    return call_rank(0, f, std::forward<Args>(args)...);
  }
  /// Calls one member, chosen at random (to spread load) among those whose procs are not known
  /// to have died.
  template <class F, class... Args>
  Future<detail::reply_t<F>> choose(F f, Args&&... args) const {
    if (size() == 0) throw UsageError("choose() on an empty mesh " + shape_.to_string());
    return call_rank(core().choose(shape_), f, std::forward<Args>(args)...);
  }
  /// Sends to every member without waiting for replies.
  template <class F, class... Args>
  void broadcast(F f, Args&&... args) const {
    const auto& ep = detail::endpoint_for<A>(f);
    detail::cast(core().request(shape_, ep.id,
                                detail::encode_call_args<F>(std::forward<Args>(args)...),
                                detail::CastMode::none));
  }
  /// Calls every member and folds the replies with `reducer` along the tree, in rank order:
  /// reduce(baton::sum, &A::f, ...). Every node folds with a copy of `reducer`, members and all
  /// (CA-2). The lowest-ranked failure fails the future.
  template <class Red, class F, class... Args>
  Future<detail::reply_t<F>> reduce(Red reducer, F f, Args&&... args) const {
    using R = detail::reply_t<F>;
    static_assert(!std::is_void_v<R>, "reduce() needs an endpoint that returns a value");
    const auto& ep = detail::endpoint_for<A>(f);
    if (size() == 0) throw UsageError("reduce() on an empty mesh " + shape_.to_string());
    auto state = std::make_shared<detail::State<R>>();
    auto req =
        core().request(shape_, ep.id, detail::encode_call_args<F>(std::forward<Args>(args)...),
                       detail::CastMode::reduce);
    req.endpoint_name = ep.name;
    req.reducer = detail::ReducerRegistration<std::decay_t<Red>, R>::id;
    req.reducer_state = detail::save_reducer(reducer);
    req.done = [state, name = ep.name, shape = shape_](std::vector<detail::CastItem> items) {
      complete_one(*state, name, items, &shape);
    };
    detail::cast(std::move(req));
    return Future<R>(state);
  }
  /// Calls every member; replies come out of the stream as they arrive.
  template <class F, class... Args>
  MeshStream<mesh_value_t<detail::reply_t<F>>> stream(F f, Args&&... args) const {
    const auto& ep = detail::endpoint_for<A>(f);
    auto q = std::make_shared<detail::StreamQueue>();
    auto req =
        core().request(shape_, ep.id, detail::encode_call_args<F>(std::forward<Args>(args)...),
                       detail::CastMode::stream);
    // Every item goes to the port, a member the tree found lost too, as soon as it is found.
    const PortId port = detail::open_stream_port(req.base, req.view, q);
    req.stream_to = port;
    detail::cast(std::move(req));
    return MeshStream<mesh_value_t<detail::reply_t<F>>>(shape_, port, std::move(q), ep.name);
  }

  /// Stops the members of this view after the messages already sent to them; calls to them
  /// fail at once afterwards with a UsageError. Members whose procs are being stopped go with
  /// them: a proc already gone counts as its members stopped.
  Future<void> stop() const { return core().stop(shape_); }

  template <class Ar>
  void save(Ar& ar) const {
    ar(shape_, core().name(), core().key(), core().host_fanout(), refs());
  }
  template <class Ar>
  void load(Ar& ar) {
    Shape shape;
    std::string name;
    std::uint64_t key = 0;
    std::uint32_t host_fanout = 0;
    std::vector<ActorRef<A>> refs;
    ar(shape, name, key, host_fanout, refs);
    if (host_fanout < 2 || host_fanout > kCastHostFanOut) {
      throw DecodeError("an actor mesh whose cast fan-out is out of range");
    }
    if (shape.len() > 0 && refs.size() <= shape.location(shape.len() - 1)) {
      throw DecodeError("an actor mesh whose shape reaches past its members");
    }
    *this = ActorMesh(Shape{}, std::move(refs), std::move(name), key, host_fanout);
    shape_ = std::move(shape);
  }

 private:
  friend class ProcMesh;  // makes it from what a spawn placed
  ActorMesh(Shape shape, std::shared_ptr<const detail::MeshCore> core)
      : shape_(std::move(shape)), core_(std::move(core)) {
    auto refs = std::make_shared<std::vector<ActorRef<A>>>();
    refs->reserve(core_->size());
    for (std::size_t loc = 0; loc < core_->size(); ++loc) {
      const ActorId& id = core_->id(loc);
      refs->push_back(detail::make_ref<A>(id, detail::resolve_actor(id)));
    }
    refs_ = std::move(refs);
  }

  friend class Sliceable<ActorMesh>;  // view()
  ActorMesh view(const Shape& shape) const {
    ActorMesh m = *this;
    m.shape_ = shape;
    return m;
  }
  const detail::MeshCore& core() const {
    if (!core_) {
      throw UsageError(
          "this ActorMesh is empty (default-constructed): assign it the mesh that spawn() "
          "returns before using it");
    }
    return *core_;
  }
  const std::vector<ActorRef<A>>& refs() const {
    (void)core();
    return *refs_;
  }

  /// Completes `state` from the one item of a reduce (its rank in `shape`) or of a cast to one
  /// member (named by `where`).
  template <class R>
  static void complete_one(detail::State<R>& state, std::string_view endpoint,
                           const std::vector<detail::CastItem>& items, const Shape* shape,
                           const Point* where = nullptr) {
    if (items.size() != 1) {
      state.set_exception(std::make_exception_ptr(UndeliverableError(
          UndeliverableError::Reason::link_lost,
          "a cast to one member came back with " + std::to_string(items.size()) + " replies")));
      return;
    }
    if (shape != nullptr || where == nullptr) {
      detail::complete_item(state, items[0], endpoint, shape);
    } else {
      detail::complete_item(state, items[0], endpoint, *where);
    }
  }

  /// One member: a plain call if the sender reaches it directly, else down its tree path.
  template <class F, class... Args>
  Future<detail::reply_t<F>> call_rank(std::size_t rank, F f, Args&&... args) const {
    using R = detail::reply_t<F>;
    const std::size_t loc = shape_.location(rank);
    core().check_live(loc);
    if (core().direct(loc)) {
      return detail::naming_member(refs()[loc].call(f, std::forward<Args>(args)...),
                                   shape_.point(rank));
    }
    const auto& ep = detail::endpoint_for<A>(f);
    auto state = std::make_shared<detail::State<R>>();
    auto req =
        core().request_one(loc, ep.id, detail::encode_call_args<F>(std::forward<Args>(args)...));
    req.done = [state, name = ep.name,
                where = shape_.point(rank)](std::vector<detail::CastItem> items) {
      complete_one(*state, name, items, nullptr, &where);
    };
    detail::cast(std::move(req));
    return Future<R>(state);
  }

  Shape shape_;
  std::shared_ptr<const detail::MeshCore> core_;
  std::shared_ptr<const std::vector<ActorRef<A>>> refs_;
};

}  // namespace baton
