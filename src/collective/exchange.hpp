#pragma once

// Internal: collectives on a few bytes of host memory through baton's own messages.
//
// Gloo's allreduce takes 2(N-1) steps one after another, each a message and a wake-up or two of
// its transport's threads: for a small model's gradients on a small machine, milliseconds of
// wake-ups for microseconds of arithmetic. Here every rank sends its buffer to every other
// rank's port at once (one message each, over the link baton already has to that proc: shared
// memory on a host) and folds what it receives in rank order, so that every rank computes the
// same bits. One message's latency in all. Used up to kMaxBytes; Gloo's ring above, where
// bandwidth is what counts.
//
// Every collective on host memory, small or not, goes through the exchange: a larger one sends
// only its Shape (what it is, how many bytes) before Gloo's ring runs. So every rank learns what
// every other rank entered, and ranks that disagree (a different count, type, operation or
// root, or a different collective altogether) all fail at once saying so, where Gloo would wait
// for its timeout or mix unrelated bytes.
//
// A collective is started (its part sent) from any thread and ends on whichever thread brings
// its last part, so that a small one needs no trip to the rank's own thread and back: watch()
// is what a thread that may block calls to see one through a rank that is gone or silent.

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "baton/actor/port.hpp"
#include "baton/actor/proc.hpp"
#include "baton/collective/collective.hpp"

namespace baton::detail {
class ProcState;
}  // namespace baton::detail

namespace baton::collective {

/// What one rank entered as one collective: every rank enters the same. Plain numbers on the
/// wire (a peer's are checked, never trusted to be in range).
struct Shape {
  enum Op : std::uint8_t { allreduce, broadcast, allgather, reduce_scatter, barrier };
  std::uint8_t op = barrier;
  std::uint8_t type = 0;    // a DType (allreduce, reduce_scatter)
  std::uint8_t reduce = 0;  // a ReduceOp (allreduce, reduce_scatter)
  std::int32_t root = -1;   // broadcast
  std::uint64_t bytes = 0;  // this rank's input
  bool operator==(const Shape&) const = default;
  template <class Ar>
  void serialize(Ar& ar) {
    ar(op, type, reduce, root, bytes);
  }
};

/// "allreduce", "broadcast", ...
std::string op_name(std::uint8_t op);

/// What differs between rank `theirs_rank`'s shape and this rank's, and what to do about it.
std::string mismatch(const Shape& theirs, std::uint32_t theirs_rank, const Shape& mine,
                     int my_rank);

/// One rank's part of one collective.
struct SmallPart {
  std::uint64_t index = 0;  // the collective's number in the group, from 1
  std::uint32_t rank = 0;
  Shape shape;
  std::string data;  // empty where the bytes go through Gloo, or the rank has none to give
  template <class Ar>
  void serialize(Ar& ar) {
    ar(index, rank, shape, data);
  }
};

class SmallExchange {
 public:
  /// The largest buffer (in bytes) that goes this way.
  static constexpr std::size_t kMaxBytes = std::size_t{64} << 10;
  /// Whether a collective of `bytes` goes this way (else only its shape, and then Gloo).
  static bool small(std::size_t bytes) { return bytes <= kMaxBytes; }

  using Parts = std::vector<std::string>;
  /// What ends a collective: every rank's part in rank order, or (`parts` null) the error that
  /// ended it. It must not throw.
  using Done = std::function<void(Parts* parts, const std::exception_ptr& error)>;
  /// What a watch checks when a missing rank's link closed, or after each second with nothing
  /// coming: throws, naming the ranks that are gone, or returns if every rank answers.
  using CheckGone = std::function<void()>;

  /// Opens this rank's port in `proc`, closed with the exchange.
  SmallExchange(Proc& proc, int rank, std::size_t ranks);
  ~SmallExchange();
  SmallExchange(const SmallExchange&) = delete;
  SmallExchange& operator=(const SmallExchange&) = delete;
  /// This rank's port, encoded for the other ranks (through the group's store).
  std::string port_text() const;
  /// Every rank's port_text, in rank order. Throws DecodeError on a malformed one.
  void connect(const std::vector<std::string>& ports);

  /// What this rank sends for `shape` from `in`: its bytes where they travel this way, else
  /// nothing.
  std::string part(const Shape& shape, const void* in) const;
  /// The result of `shape` from every rank's part, written to `out`: the fold in rank order
  /// (allreduce, reduce_scatter: sums of avg left undivided, as after Gloo's), the root's part
  /// (broadcast), every part in rank order (allgather); nothing for a shape alone.
  void finish(const Shape& shape, Parts& parts, void* out) const;

  /// Starts the next collective, `shape`, with this rank's part `mine` (part()): sends it to
  /// every other rank and returns; `done` runs once every rank's part came (here and now if all
  /// had, else on the thread that brings the last) or with the error that ends it: a rank that
  /// entered another shape, a malformed part, or what watch() finds. False, with nothing sent,
  /// while the collective before has not ended.
  bool start(const Shape& shape, std::string mine, Done done);
  /// Whether no collective is under way.
  bool idle() const;
  /// When the collective under way began, and its number; nothing if none is.
  std::optional<std::pair<std::chrono::steady_clock::time_point, std::uint64_t>> under_way() const;
  /// Waits until the collective under way (if one is) has ended, its `done` run. One that
  /// outlasts `timeout` from its start, or whose missing ranks `check_gone` finds gone, is ended
  /// with that error. Looks every 20 ms whether a missing rank's link closed, and asks every
  /// rank whether it is alive after 100 ms and then every second (a rank that died before this
  /// one linked to it closes no link here).
  void watch(std::chrono::milliseconds timeout, const CheckGone& check_gone);

  /// `shape` from `in` into `out` (part(), start(), watch(), finish()), on a thread that may
  /// block, after the collective under way: throws what ended it in error.
  void run(const Shape& shape, const void* in, void* out, std::chrono::milliseconds timeout,
           const CheckGone& check_gone);

  struct State;  // shared with the port's sink, which may outlive the exchange

 private:
  int rank() const;           // (held by state_, as the port's sink needs them)
  std::size_t ranks() const;  // the group's size

  std::weak_ptr<detail::ProcState> proc_;  // whose port table holds this rank's port
  std::shared_ptr<State> state_;
  Port<SmallPart> own_;                 // this rank's port
  std::vector<Port<SmallPart>> peers_;  // by rank (this rank's own unused)
};

}  // namespace baton::collective
