// Collectives on a few bytes through baton's own messages (see exchange.hpp).

#include "collective/exchange.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <mutex>
#include <optional>
#include <stdexcept>

#include "actor/current.hpp"
#include "actor/failures.hpp"
#include "actor/proc_state.hpp"
#include "baton/actor/errors.hpp"
#include "baton/wire/archive.hpp"
#include "baton/wire/error.hpp"
#include "collective/reduce.hpp"

namespace baton::collective {

namespace {
// How often a wait with nothing coming looks whether a missing rank's link closed, and how
// long it waits with nothing coming before it asks every rank whether it is alive (a rank
// that died before this one linked to it closes no link here).
constexpr auto kLookEvery = std::chrono::milliseconds(20);
constexpr auto kAskEvery = std::chrono::seconds(1);
// The first ask comes sooner: a rank killed before this one sent it anything has no link here
// to close.
constexpr auto kFirstAskAfter = std::chrono::milliseconds(100);

template <std::size_t N>
std::string name_in(const std::array<const char*, N>& names, std::uint8_t v, const char* what) {
  return v < N ? names[v] : std::string(what) + " " + std::to_string(v);
}

std::string type_name(std::uint8_t type) {
  static constexpr std::array<const char*, 8> kNames{"f32", "f64", "f16", "bf16",
                                                     "i8",  "u8",  "i32", "i64"};
  return name_in(kNames, type, "element type");
}

std::string reduce_name(std::uint8_t reduce) {
  static constexpr std::array<const char*, 4> kNames{"sum", "avg", "min", "max"};
  return name_in(kNames, reduce, "reduction");
}

/// Whether `rank`'s part of a collective of `shape` carries bytes: every rank's of a small
/// allreduce, reduce_scatter or allgather, the root's of a small broadcast, none of a barrier's
/// or of a larger collective's (Gloo moves those).
bool carries(const Shape& shape, std::uint32_t rank) {
  if (shape.op == Shape::barrier || !SmallExchange::small(shape.bytes)) return false;
  return shape.op != Shape::broadcast || static_cast<std::int64_t>(rank) == shape.root;
}
}  // namespace

std::string op_name(std::uint8_t op) {
  static constexpr std::array<const char*, 5> kNames{"allreduce", "broadcast", "allgather",
                                                     "reduce_scatter", "barrier"};
  return name_in(kNames, op, "collective kind");
}

std::string mismatch(const Shape& theirs, std::uint32_t theirs_rank, const Shape& mine,
                     int my_rank) {
  const std::string them = "rank " + std::to_string(theirs_rank);
  const std::string me = "rank " + std::to_string(my_rank);
  if (theirs.op != mine.op) {
    return them + " entered " + op_name(theirs.op) + " where " + me + " entered " +
           op_name(mine.op) + ": every rank calls the same collectives in the same order";
  }
  const std::string what = " to this " + op_name(mine.op) + ", ";
  if (theirs.type != mine.type) {
    return them + " passed " + type_name(theirs.type) + what + me + " " + type_name(mine.type) +
           ": every rank passes the same count and type";
  }
  if (theirs.bytes != mine.bytes) {
    return them + " passed " + std::to_string(theirs.bytes) + " bytes" + what + me + " " +
           std::to_string(mine.bytes) + " bytes: every rank passes the same count and type";
  }
  if (theirs.reduce != mine.reduce) {
    return them + " passed " + reduce_name(theirs.reduce) + what + me + " " +
           reduce_name(mine.reduce) + ": every rank passes the same reduction";
  }
  return them + " passed root " + std::to_string(theirs.root) + what + me + " root " +
         std::to_string(mine.root) + ": every rank names the same root";
}

/// What the exchange's port and its users share: the collective under way, parts that came
/// early, and whether a collective's `done` runs.
struct SmallExchange::State {
  struct UnderWay {
    std::uint64_t index = 0;
    Shape shape;
    Parts parts;
    std::vector<bool> have;
    std::size_t missing = 0;
    Done done;
    std::chrono::steady_clock::time_point began;
  };

  State(int r, std::size_t n) : rank(r), ranks(n) {}

  /// Ends the collective under way with `error` (none: its parts are all here): runs its done
  /// with `lock` let go, and wakes the watchers once it ran.
  void end(std::unique_lock<std::mutex>& lock, const std::exception_ptr& error) {
    UnderWay w = std::move(*now);
    now.reset();
    ending = true;
    lock.unlock();
    w.done(error ? nullptr : &w.parts, error);
    w = UnderWay{};  // what done held goes before the lock is taken again
    lock.lock();
    ending = false;
    cv.notify_all();
  }

  /// Takes one rank's part, under `lock`; may end the collective under way.
  void take(std::unique_lock<std::mutex>& lock, SmallPart c) {
    if (c.index == next + 1) {  // a rank done with this one is in the next already
      early.push_back(std::move(c));
      return;
    }
    if (!now || c.index != now->index) return;  // of a collective that ended in error
    UnderWay& w = *now;
    std::string bad;
    if (c.rank >= ranks || static_cast<int>(c.rank) == rank || w.have[c.rank]) {
      bad = "a malformed part of collective " + std::to_string(w.index) + " (from rank " +
            std::to_string(c.rank) + ")";
    } else if (c.shape != w.shape) {
      end(lock, std::make_exception_ptr(UsageError(mismatch(c.shape, c.rank, w.shape, rank))));
      return;
    } else if (c.data.size() != (carries(w.shape, c.rank) ? w.shape.bytes : 0)) {
      bad = "a malformed part of collective " + std::to_string(w.index) + " from rank " +
            std::to_string(c.rank) + ": " + std::to_string(c.data.size()) + " bytes for a " +
            op_name(w.shape.op) + " of " + std::to_string(w.shape.bytes);
    }
    if (!bad.empty()) return end(lock, std::make_exception_ptr(std::runtime_error(bad)));
    w.parts[c.rank] = std::move(c.data);
    w.have[c.rank] = true;
    if (--w.missing == 0) end(lock, nullptr);
  }

  const int rank;
  const std::size_t ranks;
  std::mutex mu;
  std::condition_variable cv;  // a collective ended
  std::uint64_t next = 0;      // the number of the last collective started
  std::optional<UnderWay> now;
  bool ending = false;           // a collective's done runs
  std::vector<SmallPart> early;  // parts of the next collective
};

namespace {

/// The exchange's port: each part taken on the thread that brings it.
class PartSink final : public detail::PortSink {
 public:
  explicit PartSink(std::weak_ptr<SmallExchange::State> state) : state_(std::move(state)) {}
  bool deliver(const Body& body) override {
    auto state = state_.lock();
    if (!state) return false;
    SmallPart c;
    try {
      c = decode<SmallPart>(body);
    } catch (const std::exception& e) {  // ends the collective under way; logged by the caller
      std::unique_lock lock(state->mu);
      if (state->now) {
        state->end(lock, std::make_exception_ptr(std::runtime_error(
                             std::string("a malformed part of a collective: ") + e.what())));
      }
      throw;
    }
    std::unique_lock lock(state->mu);
    state->take(lock, std::move(c));
    return true;
  }

 private:
  std::weak_ptr<SmallExchange::State> state_;
};

}  // namespace

SmallExchange::SmallExchange(Proc& proc, int rank, std::size_t ranks)
    : proc_(detail::state_of(proc).shared_from_this()),
      state_(std::make_shared<State>(rank, ranks)),
      peers_(ranks) {
  auto sink = std::make_shared<PartSink>(state_);
  detail::ProcState& st = detail::state_of(proc);
  std::lock_guard lock(st.mu);
  const std::uint64_t n = st.next_port++;
  st.ports.emplace(n, sink);
  own_ = detail::make_port<Port<SmallPart>>(PortId{st.client, n}, std::move(sink));
}

SmallExchange::~SmallExchange() {
  // What comes later (a rank still sending to a group this one left) is undeliverable.
  if (auto state = proc_.lock()) {
    std::lock_guard lock(state->mu);
    state->ports.erase(own_.id().port);
  }
}

int SmallExchange::rank() const {
  return state_->rank;
}

std::size_t SmallExchange::ranks() const {
  return state_->ranks;
}

std::string SmallExchange::port_text() const {
  return encode(own_).head;
}

void SmallExchange::connect(const std::vector<std::string>& ports) {
  if (ports.size() != ranks()) throw DecodeError("one port per rank");
  for (std::size_t r = 0; r < ranks(); ++r) {
    Body b;
    b.head = ports[r];
    peers_[r] = decode<Port<SmallPart>>(b);
  }
}

std::string SmallExchange::part(const Shape& shape, const void* in) const {
  if (!carries(shape, static_cast<std::uint32_t>(rank()))) return {};
  return {static_cast<const char*>(in), shape.bytes};
}

void SmallExchange::finish(const Shape& shape, Parts& parts, void* out) const {
  if (!small(shape.bytes) || shape.op == Shape::barrier) return;
  switch (shape.op) {
    case Shape::allreduce:
    case Shape::reduce_scatter: {
      // Rank order on every rank: every rank folds the same values in the same order.
      const auto type = static_cast<DType>(shape.type);
      const ReduceFn fn = reduce_fn(type, static_cast<ReduceOp>(shape.reduce));
      const std::size_t count = shape.bytes / size_of(type);
      std::string& acc = parts[0];
      for (std::size_t r = 1; r < ranks(); ++r) fn(acc.data(), acc.data(), parts[r].data(), count);
      std::memcpy(out, acc.data(), shape.bytes);
      return;
    }
    case Shape::broadcast:
      if (shape.root != rank()) {
        std::memcpy(out, parts[static_cast<std::size_t>(shape.root)].data(), shape.bytes);
      }
      return;
    case Shape::allgather:
      for (std::size_t r = 0; r < ranks(); ++r) {
        std::memcpy(static_cast<char*>(out) + r * shape.bytes, parts[r].data(), shape.bytes);
      }
      return;
    default:
      return;
  }
}

bool SmallExchange::start(const Shape& shape, std::string mine, Done done) {
  State& s = *state_;
  std::unique_lock lock(s.mu);
  if (s.now || s.ending) return false;
  const std::uint64_t index = ++s.next;
  const auto me = static_cast<std::size_t>(s.rank);
  // Encoded once for every peer; the bytes then move to this rank's own slot, which holds them
  // before the lock is let go (a peer's last part may come while the sends are under way).
  SmallPart out{index, static_cast<std::uint32_t>(me), shape, std::move(mine)};
  const Body body = encode(out);
  State::UnderWay w{index,
                    shape,
                    Parts(s.ranks),
                    std::vector<bool>(s.ranks, false),
                    s.ranks - 1,
                    std::move(done),
                    std::chrono::steady_clock::now()};
  w.parts[me] = std::move(out.data);
  w.have[me] = true;
  s.now = std::move(w);
  std::vector<SmallPart> came;  // only this collective's can have come early: a rank enters
  came.swap(s.early);           // the next only once every rank's part of this one reached it
  lock.unlock();
  {
    // Outside the lock: a rank in this process takes the part here and now. Sent for no actor,
    // as from the rank's own thread: a part for a rank that left the group (its port closed)
    // is undeliverable, which is logged, not a failure of the actor that called.
    const detail::ActingFor for_no_actor(nullptr);
    try {
      for (std::size_t r = 0; r < s.ranks; ++r) {
        if (r != me) detail::send_port(peers_[r].id(), nullptr, body);
      }
    } catch (...) {  // ends it: done says why
      const std::exception_ptr error = std::current_exception();
      lock.lock();
      if (s.now && s.now->index == index) s.end(lock, error);
      return true;
    }
  }
  lock.lock();
  for (auto& c : came) s.take(lock, std::move(c));
  if (s.now && s.now->index == index && s.now->missing == 0) s.end(lock, nullptr);
  return true;
}

bool SmallExchange::idle() const {
  std::lock_guard lock(state_->mu);
  return !state_->now && !state_->ending;
}

std::optional<std::pair<std::chrono::steady_clock::time_point, std::uint64_t>>
SmallExchange::under_way() const {
  std::lock_guard lock(state_->mu);
  if (!state_->now) return std::nullopt;
  return std::make_pair(state_->now->began, state_->now->index);
}

void SmallExchange::watch(std::chrono::milliseconds timeout, const CheckGone& check_gone) {
  State& s = *state_;
  std::unique_lock lock(s.mu);
  if (!s.now && !s.ending) return;
  const std::uint64_t index = s.next;  // the one under way
  const auto ended = [&] { return (!s.now || s.now->index != index) && !s.ending; };
  const auto deadline = (s.now ? s.now->began : std::chrono::steady_clock::now()) + timeout;
  // When each rank's link was last seen closed: a close is looked into once.
  std::vector<std::optional<detail::LostSince>> closed(s.ranks);
  auto asked = std::chrono::steady_clock::now() - kAskEvery + kFirstAskAfter;
  const auto end_with = [&](const std::exception_ptr& error) {
    if (s.now && s.now->index == index) s.end(lock, error);
  };
  while (!ended()) {
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) {
      std::string silent;
      for (std::size_t r = 0; r < s.ranks; ++r) {
        if (s.now && !s.now->have[r]) silent += (silent.empty() ? "" : ", ") + std::to_string(r);
      }
      end_with(std::make_exception_ptr(
          std::runtime_error("timed out after " + std::to_string(timeout.count()) +
                             " ms: nothing came from rank " + silent)));
      continue;
    }
    if (s.cv.wait_until(lock, std::min(now + kLookEvery, deadline), ended)) break;
    if (!s.now || s.now->index != index) continue;  // ending: its done runs
    const std::vector<bool> have = s.now->have;
    lock.unlock();
    bool ask = std::chrono::steady_clock::now() - asked >= kAskEvery;
    for (std::size_t r = 0; r < s.ranks; ++r) {
      if (have[r]) continue;
      const auto at = detail::link_closed_at(peers_[r].id().actor.proc);
      if (at && at != closed[r]) {
        closed[r] = at;
        ask = true;
      }
    }
    std::exception_ptr gone;
    if (ask) {
      try {
        check_gone();
      } catch (...) {
        gone = std::current_exception();
      }
      asked = std::chrono::steady_clock::now();
    }
    lock.lock();
    if (gone) end_with(gone);
  }
}

void SmallExchange::run(const Shape& shape, const void* in, void* out,
                        std::chrono::milliseconds timeout, const CheckGone& check_gone) {
  watch(timeout, check_gone);  // the one under way, started elsewhere
  Parts got;
  std::exception_ptr failed;
  const bool started =
      start(shape, part(shape, in), [&](Parts* parts, const std::exception_ptr& error) {
        if (parts != nullptr) got = std::move(*parts);
        failed = error;
      });
  if (!started) throw std::logic_error("a small collective started while another was under way");
  watch(timeout, check_gone);
  if (failed) std::rethrow_exception(failed);
  finish(shape, got, out);
}

}  // namespace baton::collective
