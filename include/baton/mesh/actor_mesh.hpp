#pragma once

// ActorMesh<A>: one actor of type A per member of a shape, called all at once through the cast
// tree (baton/mesh/cast.hpp); MeshStream, its replies as they arrive; ProcAgent, the runtime's
// actor in every proc.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "baton/actor/errors.hpp"
#include "baton/actor/proc.hpp"
#include "baton/actor/task.hpp"
#include "baton/mesh/cast.hpp"
#include "baton/mesh/value_mesh.hpp"
#include "baton/slice/slice.hpp"
#include "baton/slice/sliceable.hpp"

namespace baton {

namespace detail {

/// `f`, whose failure (an ActorError, SupervisionError or UndeliverableError) names the member
/// as `where` (its rank and point in the mesh it was called through), as a cast's reply does.
template <class R>
Future<R> naming_member(Future<R> f, Point where) {
  auto next = std::make_shared<State<R>>();
  const auto& src = f.state();
  src->on_ready([src, next, where = std::move(where)] {
    try {
      if constexpr (std::is_void_v<R>) {
        src->value();
        next->set_value();
      } else {
        next->set_value(std::move(src->value()));  // the caller's future is gone: ours alone
      }
    } catch (...) {
      next->set_exception(name_member(std::current_exception(), where));
    }
  });
  return Future<R>(std::move(next));
}

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

namespace detail {
/// What a proc does, before its actors stop, to stop what it owns (its own proc meshes); set
/// by the host layer.
void set_shutdown_hook(std::function<void()> hook);
void run_shutdown_hook();
}  // namespace detail

namespace detail {

/// The runtime's agent in every proc: spawns and stops actors there for the controller.
class ProcAgent : public Actor {
 public:
  /// Spawns the member of the mesh `place.mesh` at `place.rank`; its failures go to
  /// `place.owner` (see Actor::supervise), wherever that owner lives.
  ActorId spawn(std::uint64_t factory, const std::string& head, const std::vector<Bytes>& parts,
                const detail::Supervisor& place) {
    Body args;
    args.head = head;
    args.parts = parts;
    return proc().spawn_from(place.mesh, factory, std::move(args), place);
  }
  /// Learns this proc's node of the tree of the mesh `key` (CA-3).
  int learn(std::uint64_t key, const detail::CastNode& node) {
    detail::learn_cast_node(proc(), key, node);
    return 0;
  }
  int ping() { return 1; }
  Task<int> stop_actor(ActorId id) {
    if (id.proc != proc().id()) throw UsageError("stop_actor: " + id.to_string() + " is not here");
    co_await detail::stop_actor(id, nullptr);
    co_return 0;
  }
  /// Drops this proc's node of the tree of the mesh `key`: every member of it stopped.
  int forget(std::uint64_t key) {
    detail::forget_cast_node(proc(), key);
    return 0;
  }
  /// Orderly stop of the whole proc: the proc meshes it owns stop first, then every actor
  /// after the messages already queued for it, running its on_stop hook.
  Task<int> shutdown() {
    detail::run_shutdown_hook();
    co_await detail::stop_all_but(proc(), id());
    co_return 0;
  }
  static constexpr auto endpoints =
      baton::endpoints<&ProcAgent::spawn, &ProcAgent::learn, &ProcAgent::ping,
                       &ProcAgent::stop_actor, &ProcAgent::forget, &ProcAgent::shutdown>();
};

}  // namespace detail

class ProcMesh;

/// One actor of type A per member of a shape. Copies and slices are views of the same actors.
/// Calls travel down the cast tree (see baton/mesh/cast.hpp); FIFO per (sender, actor) holds
/// for everything sent through meshes, whichever adverb sent it.
template <class A>
class ActorMesh : public Sliceable<ActorMesh<A>> {
 public:
  ActorMesh() = default;
  /// Over members whose procs learned the mesh's tree under `key` (see ProcMesh::spawn).
  ActorMesh(Shape shape, std::vector<ActorRef<A>> by_location, std::string name, std::uint64_t key,
            const std::shared_ptr<const std::atomic<bool>>& procs_stopped = nullptr)
      : shape_(std::move(shape)), base_(std::make_shared<Base>()) {
    base_->key = key;
    base_->life = std::make_shared<detail::MeshLife>(std::move(name), by_location.size());
    base_->procs_stopped = procs_stopped;
    auto members = std::make_shared<std::vector<detail::CastMember>>();
    for (const auto& ref : by_location) {
      members->push_back({ref.id(), detail::address_text(ref.id().proc)});
    }
    base_->members = std::move(members);
    base_->refs = std::move(by_location);
  }

  const Shape& shape() const { return shape_; }
  std::size_t size() const { return shape_.len(); }
  /// The actor at `rank` of this (possibly sliced) mesh. Messages sent through the ref take
  /// their own path: FIFO with the mesh's adverbs holds only for members the sender reaches
  /// directly (see cast_direct).
  const ActorRef<A>& at(std::size_t rank) const { return base().refs.at(shape_.location(rank)); }

  /// Calls every member; the future holds each reply at its rank (its Point via shape()).
  template <class F, class... Args>
  Future<ValueMesh<mesh_value_t<detail::reply_t<F>>>> call(F f, Args&&... args) const {
    using R = detail::reply_t<F>;
    const auto& ep = detail::endpoint_for<A>(f);
    Promise<ValueMesh<mesh_value_t<R>>> promise;
    auto result = promise.get_future();
    auto req = request(ep, detail::encode_call_args<F>(std::forward<Args>(args)...),
                       detail::CastMode::gather, cast_view());
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
  /// Calls one member, chosen at random (to spread load).
  template <class F, class... Args>
  Future<detail::reply_t<F>> choose(F f, Args&&... args) const {
    if (size() == 0) throw UsageError("choose() on an empty mesh " + shape_.to_string());
    thread_local std::uint64_t x = reinterpret_cast<std::uintptr_t>(&x) | 1;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return call_rank(static_cast<std::size_t>(x % size()), f, std::forward<Args>(args)...);
  }
  /// Sends to every member without waiting for replies.
  template <class F, class... Args>
  void broadcast(F f, Args&&... args) const {
    const auto& ep = detail::endpoint_for<A>(f);
    detail::cast(request(ep, detail::encode_call_args<F>(std::forward<Args>(args)...),
                         detail::CastMode::none, cast_view()));
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
    auto req = request(ep, detail::encode_call_args<F>(std::forward<Args>(args)...),
                       detail::CastMode::reduce, cast_view());
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
    Slice view = cast_view();
    const PortId port = detail::open_stream_port(base().members, view, q);
    // Every item goes to the port, a member the tree found lost too, as soon as it is found.
    auto req = request(ep, detail::encode_call_args<F>(std::forward<Args>(args)...),
                       detail::CastMode::stream, std::move(view));
    req.stream_to = port;
    detail::cast(std::move(req));
    return MeshStream<mesh_value_t<detail::reply_t<F>>>(shape_, port, std::move(q), ep.name);
  }

  /// Stops the members of this view after the messages already sent to them; calls to them
  /// fail at once afterwards with a UsageError. Members whose procs are being stopped go with
  /// them: a proc already gone counts as its members stopped.
  Future<void> stop() const {
    const bool procs_going =
        base().procs_stopped && base().procs_stopped->load(std::memory_order_acquire);
    auto to_agent = [procs_going](Future<int> call) {
      return procs_going ? gone_is_stopped(call) : std::move(call);
    };
    std::vector<Future<int>> parts;
    for (std::size_t r = 0; r < size(); ++r) {
      const std::size_t loc = shape_.location(r);
      if (base().life->stopped(loc)) continue;
      base().life->stop(loc);
      const ActorId& id = base().refs[loc].id();
      ActorId agent{id.proc, "agent", 0};
      parts.push_back(
          to_agent(detail::make_ref<detail::ProcAgent>(agent, detail::resolve_actor(agent))
                       .call(&detail::ProcAgent::stop_actor, id)));
    }
    if (!parts.empty() && base().life->all_stopped()) {
      // The last members went: every proc of the mesh drops its node of the tree. (A node
      // whose own member stopped still forwards to live members behind it until then.)
      for (const auto& ref : base().refs) {
        ActorId agent{ref.id().proc, "agent", 0};
        parts.push_back(
            to_agent(detail::make_ref<detail::ProcAgent>(agent, detail::resolve_actor(agent))
                         .call(&detail::ProcAgent::forget, base().key)));
      }
    }
    return when_all(std::move(parts));
  }

  template <class Ar>
  void save(Ar& ar) const {
    ar(shape_, base().life->name(), base().key, base().refs);
  }
  template <class Ar>
  void load(Ar& ar) {
    Shape shape;
    std::string name;
    std::uint64_t key = 0;
    std::vector<ActorRef<A>> refs;
    ar(shape, name, key, refs);
    if (shape.len() > 0 && refs.size() <= shape.location(shape.len() - 1)) {
      throw DecodeError("an actor mesh whose shape reaches past its members");
    }
    *this = ActorMesh(Shape{}, std::move(refs), std::move(name), key);
    shape_ = std::move(shape);
  }

 private:
  friend class ProcMesh;  // notes the members it spawned (detail::note_hosted)

  struct Base {
    std::vector<ActorRef<A>> refs;  // by location
    std::uint64_t key = 0;          // its tree's, in every member's proc (CA-3)
    std::shared_ptr<const std::vector<detail::CastMember>> members;
    std::shared_ptr<detail::MeshLife> life;
    std::shared_ptr<const std::atomic<bool>> procs_stopped;
  };

  friend class Sliceable<ActorMesh>;  // view()
  ActorMesh view(const Shape& shape) const {
    ActorMesh m = *this;
    m.shape_ = shape;
    return m;
  }
  const Base& base() const {
    if (!base_) {
      throw UsageError(
          "this ActorMesh is empty (default-constructed): assign it the mesh that spawn() "
          "returns before using it");
    }
    return *base_;
  }

  /// A call to the agent of a proc that is being stopped: that agent gone before it came
  /// (undeliverable) means the proc's actors are gone too, which is what was asked.
  static Future<int> gone_is_stopped(const Future<int>& call) {
    auto done = std::make_shared<Promise<int>>();
    Future<int> out = done->get_future();
    const auto& in = call.state();  // the callback keeps a copy
    in->on_ready([in, done] {
      try {
        if (const std::exception_ptr e = in->error()) std::rethrow_exception(e);
        done->set_value(0);
      } catch (const UndeliverableError&) {
        done->set_value(0);
      } catch (...) {
        done->set_exception(std::current_exception());
      }
    });
    return out;
  }
  static Future<void> when_all(std::vector<Future<int>> parts) {
    if (parts.empty()) return make_ready_future();
    const Shape shape = Shape::of({{"n", parts.size()}});
    auto all = detail::gather<int>(shape, std::move(parts));
    return std::move(all).then([](const ValueMesh<int>&) {});
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
  /// How an ActorError names a member of this view, whichever verb called it.
  Point where_of(std::size_t rank) const { return shape_.point(rank); }

  /// The locations this view casts to; throws if any of its members was stopped.
  Slice cast_view() const {
    for (std::size_t r = 0; r < size(); ++r) check_live(shape_.location(r));
    return shape_.slice();
  }
  void check_live(std::size_t loc) const {
    if (base().procs_stopped && base().procs_stopped->load(std::memory_order_acquire)) {
      throw UsageError("actor mesh '" + base().life->name() +
                       "': its procs were stopped; spawn new procs and actors to go on");
    }
    if (base().life->stopped(loc)) {
      throw UsageError("actor mesh '" + base().life->name() + "' was stopped (member " +
                       base().refs[loc].id().to_string() + "); spawn a new one to go on");
    }
  }
  detail::CastRequest request(const detail::EndpointInfo& ep, Body body, detail::CastMode mode,
                              Slice view) const {
    detail::CastRequest req;
    req.key = base().key;
    req.base = base().members;
    req.view = std::move(view);
    req.endpoint = ep.id;
    req.args = std::move(body);
    req.mode = mode;
    return req;
  }
  /// One member: a plain call if the sender reaches it directly, else down its tree path.
  template <class F, class... Args>
  Future<detail::reply_t<F>> call_rank(std::size_t rank, F f, Args&&... args) const {
    using R = detail::reply_t<F>;
    const std::size_t loc = shape_.location(rank);
    check_live(loc);
    if (detail::cast_direct(loc, base().refs.size())) {
      return detail::naming_member(base().refs[loc].call(f, std::forward<Args>(args)...),
                                   where_of(rank));
    }
    const auto& ep = detail::endpoint_for<A>(f);
    auto state = std::make_shared<detail::State<R>>();
    auto req = request(ep, detail::encode_call_args<F>(std::forward<Args>(args)...),
                       detail::CastMode::gather, Slice(loc, {1}, {1}));
    req.done = [state, name = ep.name,
                where = where_of(rank)](std::vector<detail::CastItem> items) {
      complete_one(*state, name, items, nullptr, &where);
    };
    detail::cast(std::move(req));
    return Future<R>(state);
  }

  Shape shape_;
  std::shared_ptr<Base> base_;
};

}  // namespace baton
