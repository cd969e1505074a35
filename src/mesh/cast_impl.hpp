#pragma once

// Internal to the mesh layer: what the cast tree's files share (see baton/mesh/cast.hpp).

#include <algorithm>
#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "actor/failures.hpp"
#include "actor/proc_state.hpp"
#include "actor/replies.hpp"
#include "baton/mesh/cast.hpp"

namespace baton::detail::cast_impl {

using Done = std::function<void(std::vector<CastItem>)>;
/// Runs a piece of work somewhere (see run_off_reads).
using Defer = std::function<void(std::function<void()>)>;

/// Runs `f` where it holds up no link's reads: on `local`'s I/O thread, it runs after the
/// handler in progress, as that loop's own work (the watchdog takes the loop over if it runs
/// long, so heartbeats go on), or on the proc's background thread if the handler woke other
/// work already; elsewhere (a worker's reply, a caller's thread) it runs here, now.
void run_off_reads(ProcState& local, std::function<void()> f);

/// Which locations of a subtree a cast addresses, and their ranks in the view. It answers from
/// the view's Slice without listing the view's members, so a node's work is bounded by its own
/// subtree, not by the mesh: every node of a cast to N members builds one, and a list of the
/// whole view at each would cost N at every node.
class ViewIndex {
 public:
  explicit ViewIndex(const Slice& view) : view_(view), lo_(view.offset()) {
    // Strides are never negative, so the first and last ranks hold the lowest and highest
    // locations; n distinct locations spanning n places fill the whole run.
    const std::size_t n = view.len();
    hi_ = view.location_of_rank(n - 1) + 1;
    contiguous_ = hi_ - lo_ == n;
  }
  const Slice& slice() const { return view_; }
  /// Calls f(location, rank) for each location of the view in [b, e), in location order.
  template <class F>
  void each_in(std::size_t b, std::size_t e, F f) const {
    for (std::size_t loc = std::max(b, lo_); loc < std::min(e, hi_); ++loc) {
      if (auto rank = view_.rank_of_location(loc)) f(loc, *rank);
    }
  }
  /// Whether the member of rank `rank` in the view is at a location in [b, e): constant time,
  /// for each item of a result that may hold a whole subtree's.
  bool rank_in(std::size_t rank, std::size_t b, std::size_t e) const {
    if (rank >= view_.len()) return false;
    const std::size_t loc = view_.location_of_rank(rank);
    return loc >= b && loc < e;
  }
  /// Whether the view has a location in [b, e).
  bool any_in(std::size_t b, std::size_t e) const {
    const std::size_t first = std::max(b, lo_);
    const std::size_t last = std::min(e, hi_);
    if (first >= last) return false;
    if (contiguous_) return true;
    for (std::size_t loc = first; loc < last; ++loc) {
      if (view_.contains(loc)) return true;
    }
    return false;
  }

 private:
  Slice view_;
  std::size_t lo_ = 0;
  std::size_t hi_ = 0;  // one past the highest location
  bool contiguous_ = false;
};

/// [first, end) in at most `fanout` contiguous chunks; each chunk's first location is its head.
std::vector<std::pair<std::uint32_t, std::uint32_t>> split(std::size_t first, std::size_t end,
                                                           std::size_t fanout);

/// [first, end) in at most kCastFanOut contiguous chunks cut only where the host of the member
/// at a location (`address_at`) changes, when the range spans hosts: a cast then enters each
/// host once, however many hosts there are. Else split() into at most `host_fanout`. Every node
/// of the tree, the root and cast_tree agree on it.
std::vector<std::pair<std::uint32_t, std::uint32_t>> split_at_hosts(
    std::size_t first, std::size_t end, std::size_t host_fanout,
    const std::function<std::string_view(std::size_t)>& address_at);
/// The root's chunks of a mesh: split_at_hosts over the whole of it.
std::vector<std::pair<std::uint32_t, std::uint32_t>> root_split(
    const std::vector<CastMember>& base, std::size_t host_fanout = kCastHostFanOut);

/// A status-tagged reply saying the message was lost with a link.
Body undeliverable_reply(const std::string& why);

/// The members of `child`'s subtree in the view, lost: its head's proc died (`died` says how;
/// the head fails with that report, the members behind it are lost with it) or could not be
/// reached (`why`).
std::vector<CastItem> failures(const ViewIndex& view, const CastChild& child,
                               const std::string& why, std::optional<std::string> died = {});

/// Turns items lost with a forwarder's link into the SupervisionError of their member's proc,
/// where that proc is known (or seen, waiting a little from `since`, when the items came back
/// lost) to have died.
void attribute_lost(const std::vector<CastMember>& base, const Slice& view,
                    std::vector<CastItem>& items, const std::vector<std::size_t>& lost,
                    LostSince since);

/// Folds reduce-mode items: the lowest-ranked failure wins, else the values in rank order.
std::vector<CastItem> fold(std::uint64_t reducer, const std::string& state,
                           std::vector<CastItem> items);

/// What one node waits for: its own member's reply and one result per child.
///
/// CA-1: a gather or reduce that includes a member found failed or unreachable (its proc died,
/// its link was lost) reports at once, with what it has, instead of waiting for the slowest
/// live member: the result fails anyway, and it must fail within the detection bound. Later
/// results are dropped. An endpoint's own throw waits like a value, so the lowest-ranked throw
/// still wins.
///
/// A stream's node hands each lost member to `lost` as soon as it learns of it (the node sends
/// it straight to the stream's port, as its member sends its reply), so the stream yields it
/// without waiting for the members that are still busy; `done` then runs, with no items, once
/// every result is in.
class Gather : public std::enable_shared_from_this<Gather> {
 public:
  Gather(std::size_t expected, CastMode mode, std::uint64_t reducer, std::string reducer_state,
         Done done, Done lost = nullptr)
      : left_(expected),
        mode_(mode),
        reducer_(reducer),
        reducer_state_(std::move(reducer_state)),
        done_(std::move(done)),
        lost_(std::move(lost)) {
    if (mode_ == CastMode::gather) items_.reserve(expected);  // at least one item a result
  }

  /// Folds and hands the items on through `defer` rather than in the call that brought the
  /// last result: a forwarder's last result mostly comes in a link's read handler, and the
  /// fold (a user's reducer) and the encoding of a large gathered result could hold that link's
  /// reads, and with them its heartbeats, for longer than a peer waits before it calls the link
  /// dead. Set before any result comes.
  void finish_through(Defer defer) { defer_ = std::move(defer); }

  /// `n` more results to wait for: a dead child's children, reached around it (CA-4).
  void expect(std::size_t n) {
    std::lock_guard lock(mu_);
    if (left_ != 0) left_ += n;
  }

  /// One member's reply: a child that is a member alone, or this node's own member.
  void add(CastItem one) {
    std::unique_lock lock(mu_);
    if (left_ == 0) return;  // reported already (CA-1)
    if (mode_ == CastMode::stream) {
      lock.unlock();
      std::vector<CastItem> more;
      more.push_back(std::move(one));
      return add(std::move(more));
    }
    const bool lost = reply_is_member_lost(one.reply);
    items_.push_back(std::move(one));
    result_in(lock, lost);
  }

  void add(std::vector<CastItem> more) {
    std::unique_lock lock(mu_);
    if (left_ == 0) return;  // reported already (CA-1)
    if (mode_ == CastMode::stream) {
      const bool last = --left_ == 0;
      lock.unlock();
      if (!more.empty() && lost_) lost_(std::move(more));
      if (last && done_) done_({});
      return;
    }
    bool lost = false;
    for (auto& it : more) {
      lost = lost || reply_is_member_lost(it.reply);
      items_.push_back(std::move(it));
    }
    result_in(lock, lost);
  }

 private:
  /// One more result is in (its items added): once it was the last, or it holds a member lost
  /// (CA-1), hands the items on.
  void result_in(std::unique_lock<std::mutex>& lock, bool lost) {
    if (lost) {
      left_ = 0;
    } else if (--left_ != 0) {
      return;
    }
    finish(lock);
  }
  /// Every result is in (or a member was lost): hands the items on, unlocked.
  void finish(std::unique_lock<std::mutex>& lock) {
    auto items = std::move(items_);
    lock.unlock();
    if (!defer_) return hand_on(std::move(items));
    defer_([self = shared_from_this(), items = std::move(items)]() mutable {
      self->hand_on(std::move(items));
    });
  }
  void hand_on(std::vector<CastItem> items) {
    if (mode_ == CastMode::reduce) items = fold(reducer_, reducer_state_, std::move(items));
    if (done_) done_(std::move(items));
  }

  std::mutex mu_;
  std::size_t left_;
  CastMode mode_;
  std::uint64_t reducer_;
  std::string reducer_state_;
  Done done_;
  Done lost_;  // stream mode: where lost members go at once
  Defer defer_;
  std::vector<CastItem> items_;
};

/// A child's result, arriving over a link (or its failure if the link goes first): the items
/// its node gathered or, for a child whose subtree is its own member alone (`member_rank`, the
/// member's rank in the view), that member's reply to a plain call.
class ChildResult final : public ReplySinkBase {
 public:
  ChildResult(std::shared_ptr<Gather> gather, std::shared_ptr<const ViewIndex> view,
              std::shared_ptr<const CastChild> child,
              std::optional<std::uint32_t> member_rank = std::nullopt)
      : gather_(std::move(gather)),
        view_(std::move(view)),
        child_(std::move(child)),
        member_rank_(member_rank) {}

  bool deliver(const Body& body) override {
    std::vector<CastItem> items;
    if (member_rank_) {
      if (!done_.exchange(true)) gather_->add(CastItem{*member_rank_, body});
      return true;
    }
    try {
      items = decode<std::vector<CastItem>>(body);
      for (const auto& it : items) {
        if (!view_->rank_in(it.rank, child_->loc, child_->end)) {
          throw DecodeError("a cast result names a rank outside its subtree");
        }
      }
    } catch (const std::exception& e) {
      items = failures(*view_, *child_, std::string("malformed result: ") + e.what());
    }
    finish(std::move(items));
    return true;
  }
  void link_lost(const std::string& why) override { finish(failures(*view_, *child_, why)); }
  void peer_failed(const std::exception_ptr& error) override {
    std::string report = "its proc failed";
    try {
      std::rethrow_exception(error);
    } catch (const std::exception& e) {
      report = e.what();
    }
    finish(failures(*view_, *child_, report, report));
  }

 private:
  void finish(std::vector<CastItem> items) {
    if (done_.exchange(true)) return;
    gather_->add(std::move(items));
  }
  std::shared_ptr<Gather> gather_;
  std::shared_ptr<const ViewIndex> view_;
  std::shared_ptr<const CastChild> child_;  // kept by what holds it (see send_child)
  std::optional<std::uint32_t> member_rank_;
  std::atomic<bool> done_{false};
};

/// A proc's node of one mesh's tree, with its children worked out once, at spawn: a cast
/// reads them in place rather than copy the node's members at every hop.
struct KnownNode {
  CastNode node;
  std::vector<CastChild> children;
};

/// The layouts a proc learned at spawn: its node of each mesh's tree, by key.
struct NodeTable {
  std::mutex mu;
  std::unordered_map<std::uint64_t, std::shared_ptr<const KnownNode>> by_key;
};

/// The proc a cast starts from: the calling actor's, else the one that links this process.
std::shared_ptr<ProcState> root_proc(const std::vector<CastMember>& base);

/// Serves a cast hop that came over `link`; a null `link` says it came over a simulated one
/// (simulate.hpp), and the node's result goes back the same way.
void on_cast(const std::shared_ptr<ProcState>& local, const std::shared_ptr<net::Link>& link,
             Envelope env);

/// Whether links between the procs of this process are simulated (simulate.hpp).
bool simulating();
/// Carries a framed hop from `from` to `to` over a simulated link (run here if the simulation
/// just stopped).
void simulate_hop(const ProcState& from, const std::shared_ptr<ProcState>& to, const Envelope& env);
/// Carries a node's result to reply port `to` over a simulated link, as simulate_hop does.
void simulate_result(const PortId& to, Body body, const ActorId& sender);

}  // namespace baton::detail::cast_impl
