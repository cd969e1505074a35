// Collectives on a few bytes through baton's own messages (see exchange.hpp).

#include "collective/exchange.hpp"

#include <algorithm>
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
}  // namespace

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

void SmallExchange::allreduce(void* data, std::size_t count, DType type, ReduceOp op,
                              std::chrono::milliseconds timeout, const CheckGone& check_gone) {
  const std::size_t bytes = count * size_of(type);
  std::vector<std::string> parts =
      exchange(std::string(static_cast<const char*>(data), bytes), timeout, check_gone);
  // Rank order on every rank: every rank folds the same values in the same order.
  const ReduceFn fn = reduce_fn(type, op);
  std::string& acc = parts[0];
  for (std::size_t r = 1; r < ranks_; ++r) fn(acc.data(), acc.data(), parts[r].data(), count);
  std::memcpy(data, acc.data(), bytes);
}

void SmallExchange::barrier(std::chrono::milliseconds timeout, const CheckGone& check_gone) {
  (void)exchange(std::string(), timeout, check_gone);
}

std::vector<std::string> SmallExchange::exchange(std::string mine,
                                                 std::chrono::milliseconds timeout,
                                                 const CheckGone& check_gone) {
  const std::uint64_t index = ++next_;
  const std::size_t bytes = mine.size();
  std::vector<std::string> parts(ranks_);
  std::vector<bool> have(ranks_, false);
  std::size_t missing = ranks_ - 1;
  const auto take = [&](SmallPart c) {
    if (c.index == index + 1) {  // a rank done with this one is already in the next
      early_[c.index].push_back(std::move(c));
      return;
    }
    if (c.index != index || c.rank >= ranks_ || static_cast<int>(c.rank) == rank_ || have[c.rank]) {
      throw std::runtime_error("a malformed part of collective " + std::to_string(index) +
                               " (number " + std::to_string(c.index) + ", from rank " +
                               std::to_string(c.rank) + ")");
    }
    if (c.data.size() != bytes) {
      throw UsageError("rank " + std::to_string(c.rank) + " passed " +
                       std::to_string(c.data.size()) + " bytes to this collective, rank " +
                       std::to_string(rank_) + " " + std::to_string(bytes) +
                       " bytes: every rank passes the same count and type");
    }
    parts[c.rank] = std::move(c.data);
    have[c.rank] = true;
    --missing;
  };
  {
    SmallPart out{index, static_cast<std::uint32_t>(rank_), std::move(mine)};
    for (std::size_t r = 0; r < ranks_; ++r) {
      if (static_cast<int>(r) != rank_) peers_[r].send(out);
    }
    parts[static_cast<std::size_t>(rank_)] = std::move(out.data);
    have[static_cast<std::size_t>(rank_)] = true;
  }
  if (auto it = early_.find(index); it != early_.end()) {
    std::vector<SmallPart> came = std::move(it->second);
    early_.erase(it);
    for (auto& c : came) take(std::move(c));
  }
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
