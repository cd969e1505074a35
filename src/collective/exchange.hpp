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

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
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

/// One rank's part of one small collective.
struct SmallPart {
  std::uint64_t index = 0;  // the small collective's number in the group, from 1
  std::uint32_t rank = 0;
  std::string data;
  template <class Ar>
  void serialize(Ar& ar) {
    ar(index, rank, data);
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
  /// `data` (`count` elements) reduced over the ranks, in place; for avg, summed (the caller
  /// divides, as after Gloo's allreduce).
  void allreduce(void* data, std::size_t count, DType type, ReduceOp op,
                 std::chrono::milliseconds timeout, const CheckGone& check_gone);
  /// Returns once every rank has entered it.
  void barrier(std::chrono::milliseconds timeout, const CheckGone& check_gone);

 private:
  /// Sends `mine` to every other rank and returns every rank's part of this collective, in rank
  /// order (`mine` at this rank's).
  std::vector<std::string> exchange(std::string mine, std::chrono::milliseconds timeout,
                                    const CheckGone& check_gone);

  std::weak_ptr<detail::ProcState> proc_;  // whose port table holds this rank's port
  int rank_;
  std::size_t ranks_;
  std::pair<Port<SmallPart>, PortReceiver<SmallPart>> own_;  // this rank's port
  std::vector<Port<SmallPart>> peers_;                       // by rank (this rank's own unused)
  std::uint64_t next_ = 0;                                   // the last collective's index
  // Parts of later collectives, from ranks already done with this one.
  std::map<std::uint64_t, std::vector<SmallPart>> early_;
};

}  // namespace baton::collective
