// Collectives on a few bytes through baton's own messages (see exchange.hpp).

#include "collective/exchange.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <optional>
#include <stdexcept>

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

SmallExchange::SmallExchange(Proc& proc, int rank, std::size_t ranks)
    : proc_(detail::state_of(proc).shared_from_this()),
      rank_(rank),
      ranks_(ranks),
      own_(proc.open_port<SmallPart>()),
      peers_(ranks) {}

SmallExchange::~SmallExchange() {
  // What comes later (a rank still sending to a group this one left) is undeliverable.
  if (auto state = proc_.lock()) {
    std::lock_guard lock(state->mu);
    state->ports.erase(own_.first.id().port);
  }
}

std::string SmallExchange::port_text() const {
  return encode(own_.first).head;
}

void SmallExchange::connect(const std::vector<std::string>& ports) {
  if (ports.size() != ranks_) throw DecodeError("one port per rank");
  for (std::size_t r = 0; r < ranks_; ++r) {
    Body b;
    b.head = ports[r];
    peers_[r] = decode<Port<SmallPart>>(b);
  }
}

void SmallExchange::allreduce(const Shape& shape, void* data, std::size_t count,
                              std::chrono::milliseconds timeout, const CheckGone& check_gone) {
  std::vector<std::string> parts = exchange(
      shape, std::string(static_cast<const char*>(data), shape.bytes), timeout, check_gone);
  // Rank order on every rank: every rank folds the same values in the same order.
  const ReduceFn fn =
      reduce_fn(static_cast<DType>(shape.type), static_cast<ReduceOp>(shape.reduce));
  std::string& acc = parts[0];
  for (std::size_t r = 1; r < ranks_; ++r) fn(acc.data(), acc.data(), parts[r].data(), count);
  std::memcpy(data, acc.data(), shape.bytes);
}

void SmallExchange::broadcast(const Shape& shape, void* data, std::chrono::milliseconds timeout,
                              const CheckGone& check_gone) {
  const bool root = shape.root == rank_;
  std::vector<std::string> parts = exchange(
      shape, root ? std::string(static_cast<const char*>(data), shape.bytes) : std::string(),
      timeout, check_gone);
  if (!root) std::memcpy(data, parts[static_cast<std::size_t>(shape.root)].data(), shape.bytes);
}

void SmallExchange::allgather(const Shape& shape, const void* in, void* out,
                              std::chrono::milliseconds timeout, const CheckGone& check_gone) {
  std::vector<std::string> parts =
      exchange(shape, std::string(static_cast<const char*>(in), shape.bytes), timeout, check_gone);
  for (std::size_t r = 0; r < ranks_; ++r) {
    std::memcpy(static_cast<char*>(out) + r * shape.bytes, parts[r].data(), shape.bytes);
  }
}

void SmallExchange::agree(const Shape& shape, std::chrono::milliseconds timeout,
                          const CheckGone& check_gone) {
  (void)exchange(shape, std::string(), timeout, check_gone);
}

std::vector<std::string> SmallExchange::exchange(const Shape& shape, std::string mine,
                                                 std::chrono::milliseconds timeout,
                                                 const CheckGone& check_gone) {
  const std::uint64_t index = ++next_;
  std::vector<std::string> parts(ranks_);
  std::vector<bool> have(ranks_, false);
  std::size_t missing = ranks_ - 1;
  const auto take = [&](SmallPart c) {
    if (c.index == index + 1) {  // a rank done with this one is already in the next
      early_.push_back(std::move(c));
      return;
    }
    if (c.index != index || c.rank >= ranks_ || static_cast<int>(c.rank) == rank_ || have[c.rank]) {
      throw std::runtime_error("a malformed part of collective " + std::to_string(index) +
                               " (number " + std::to_string(c.index) + ", from rank " +
                               std::to_string(c.rank) + ")");
    }
    if (c.shape != shape) throw UsageError(mismatch(c.shape, c.rank, shape, rank_));
    if (c.data.size() != (carries(shape, c.rank) ? shape.bytes : 0)) {
      throw std::runtime_error("a malformed part of collective " + std::to_string(index) +
                               " from rank " + std::to_string(c.rank) + ": " +
                               std::to_string(c.data.size()) + " bytes for a " + op_name(shape.op) +
                               " of " + std::to_string(shape.bytes));
    }
    parts[c.rank] = std::move(c.data);
    have[c.rank] = true;
    --missing;
  };
  {
    SmallPart out{index, static_cast<std::uint32_t>(rank_), shape, std::move(mine)};
    for (std::size_t r = 0; r < ranks_; ++r) {
      if (static_cast<int>(r) != rank_) peers_[r].send(out);
    }
    parts[static_cast<std::size_t>(rank_)] = std::move(out.data);
    have[static_cast<std::size_t>(rank_)] = true;
  }
  // Only this collective's parts can have come early: a rank enters the next one only once
  // every rank's part of this one reached it.
  std::vector<SmallPart> came;
  came.swap(early_);
  for (auto& c : came) take(std::move(c));
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  // When each rank's link was last seen closed: a close is looked into once.
  std::vector<std::optional<detail::LostSince>> closed(ranks_);
  auto asked = std::chrono::steady_clock::now();
  while (missing > 0) {
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) {
      std::string silent;
      for (std::size_t r = 0; r < ranks_; ++r) {
        if (!have[r]) silent += (silent.empty() ? "" : ", ") + std::to_string(r);
      }
      throw std::runtime_error("timed out after " + std::to_string(timeout.count()) +
                               " ms: nothing came from rank " + silent);
    }
    try {
      take(own_.second.recv(
          std::min<std::chrono::steady_clock::duration>(kLookEvery, deadline - now)));
      asked = std::chrono::steady_clock::now();
      continue;
    } catch (const TimeoutError&) {
    }
    bool ask = std::chrono::steady_clock::now() - asked >= kAskEvery;
    for (std::size_t r = 0; r < ranks_; ++r) {
      if (have[r]) continue;
      const auto at = detail::link_closed_at(peers_[r].id().actor.proc);
      if (at && at != closed[r]) {
        closed[r] = at;
        ask = true;
      }
    }
    if (ask) {
      check_gone();
      asked = std::chrono::steady_clock::now();
    }
  }
  return parts;
}

}  // namespace baton::collective
