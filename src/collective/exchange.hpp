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

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
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

  /// Opens this rank's port in `proc`, closed with the exchange.
  SmallExchange(Proc& proc, int rank, std::size_t ranks);
  ~SmallExchange();
  SmallExchange(const SmallExchange&) = delete;
  SmallExchange& operator=(const SmallExchange&) = delete;
  /// This rank's port, encoded for the other ranks (through the group's store).
  std::string port_text() const;
  /// Every rank's port_text, in rank order. Throws DecodeError on a malformed one.
  void connect(const std::vector<std::string>& ports);

  /// What a wait checks when a missing rank's link closed, or after each second with nothing
  /// coming: throws, naming the ranks that are gone, or returns if every rank answers.
  using CheckGone = std::function<void()>;
  /// Whether a collective of `bytes` goes this way (else `agree` and then Gloo).
  static bool small(std::size_t bytes) { return bytes <= kMaxBytes; }

  /// `data` (`count` elements) reduced over the ranks, in place; for avg, summed (the caller
  /// divides, as after Gloo's allreduce). `shape` says which collective it is.
  void allreduce(const Shape& shape, void* data, std::size_t count,
                 std::chrono::milliseconds timeout, const CheckGone& check_gone);
  /// `shape.bytes` at `data` from rank `shape.root` to every rank.
  void broadcast(const Shape& shape, void* data, std::chrono::milliseconds timeout,
                 const CheckGone& check_gone);
  /// Every rank's `shape.bytes` at `in`, in rank order, at `out`.
  void allgather(const Shape& shape, const void* in, void* out, std::chrono::milliseconds timeout,
                 const CheckGone& check_gone);
  /// Returns once every rank has entered the collective `shape`, each the same: the barrier,
  /// and what a larger collective does before Gloo's ring.
  void agree(const Shape& shape, std::chrono::milliseconds timeout, const CheckGone& check_gone);

 private:
  /// Sends `mine` (for `shape`) to every other rank and returns every rank's part of this
  /// collective, in rank order (`mine` at this rank's). Throws UsageError, saying how, when a
  /// rank entered another shape.
  std::vector<std::string> exchange(const Shape& shape, std::string mine,
                                    std::chrono::milliseconds timeout, const CheckGone& check_gone);

  std::weak_ptr<detail::ProcState> proc_;  // whose port table holds this rank's port
  int rank_;
  std::size_t ranks_;
  std::pair<Port<SmallPart>, PortReceiver<SmallPart>> own_;  // this rank's port
  std::vector<Port<SmallPart>> peers_;                       // by rank (this rank's own unused)
  std::uint64_t next_ = 0;                                   // the last collective's index
  // Parts of the next collective, from ranks already done with this one.
  std::vector<SmallPart> early_;
};

}  // namespace baton::collective
