// The cast tree (see baton/mesh/cast.hpp).
//
// A hop on the wire is an envelope to the kCastPort of the chunk head's proc:
//   head = mode, reducer, endpoint, fan-out, reply port, stream port, the chunk's members (the
//          head first) each with its rank or -1, then the call's arguments; parts = theirs
// and a node's result (gather and reduce) is one envelope to the reply port holding its items.

#include "baton/mesh/cast.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <mutex>
#include <random>
#include <unordered_map>
#include <utility>

#include "actor/cell.hpp"
#include "baton/actor/errors.hpp"

namespace baton::detail {
namespace {

struct Hop {
  CastMode mode = CastMode::none;
  std::uint64_t reducer = 0;
  std::string reducer_state;  // CA-2
  std::uint64_t endpoint = 0;
  std::uint32_t fanout = kCastFanOut;
  std::optional<PortId> reply_to;   // the parent's port for this node's result
  std::optional<PortId> stream_to;  // stream mode: where each reply goes
  std::uint64_t key = 0;            // the mesh's tree (CA-3)
  Slice view;                       // the locations cast to
  std::uint32_t loc = 0;            // the node this hop is for, and its subtree's end
  std::uint32_t end = 0;

  template <class Ar>
  void serialize(Ar& ar) {
    ar(mode, reducer, reducer_state, endpoint, fanout, reply_to, stream_to, key, view, loc, end);
  }
};

using Done = std::function<void(std::vector<CastItem>)>;

struct Reducers {
  std::mutex mu;
  std::unordered_map<std::uint64_t, ReduceFn> by_id;
};
Reducers& reducers() {
  static Reducers r;
  return r;
}

/// The view's locations in order, and their ranks, shared by a hop's children.
struct ViewIndex {
  explicit ViewIndex(const Slice& view) {
    const std::size_t n = view.len();
    by_loc.reserve(n);
    for (std::size_t r = 0; r < n; ++r) by_loc.emplace_back(view.location_of_rank(r), r);
    std::sort(by_loc.begin(), by_loc.end());
  }
  /// The (location, rank) pairs with location in [b, e).
  template <class F>
  void each_in(std::size_t b, std::size_t e, F f) const {
    auto it = std::lower_bound(by_loc.begin(), by_loc.end(), std::make_pair(b, std::size_t{0}));
    for (; it != by_loc.end() && it->first < e; ++it) f(it->first, it->second);
  }
  bool any_in(std::size_t b, std::size_t e) const {
    auto it = std::lower_bound(by_loc.begin(), by_loc.end(), std::make_pair(b, std::size_t{0}));
    return it != by_loc.end() && it->first < e;
  }
  std::vector<std::pair<std::size_t, std::size_t>> by_loc;
};

/// [first, end) in at most `fanout` contiguous chunks; each chunk's first location is its head.
std::vector<std::pair<std::uint32_t, std::uint32_t>> split(std::size_t first, std::size_t end,
                                                           std::size_t fanout) {
  std::vector<std::pair<std::uint32_t, std::uint32_t>> out;
  const std::size_t rest = end - first;
  const std::size_t k = std::min(fanout, rest);
  for (std::size_t i = 0; i < k; ++i) {
    out.emplace_back(static_cast<std::uint32_t>(first + i * rest / k),
                     static_cast<std::uint32_t>(first + (i + 1) * rest / k));
  }
  return out;
}

Body undeliverable_reply(const std::string& why) {
  return failure_reply(
      std::make_exception_ptr(UndeliverableError(UndeliverableError::Reason::link_lost, why)));
}

/// The members of `child`'s subtree in the view, lost: its head's proc died (`died` says how;
/// the head fails with that report, the members behind it are lost with it) or could not be
/// reached (`why`).
std::vector<CastItem> failures(const ViewIndex& view, const CastChild& child,
                               const std::string& why, std::optional<std::string> died = {}) {
  if (!died) died = proc_failure(child.head.actor.proc);
  std::vector<CastItem> out;
  view.each_in(child.loc, child.end, [&](std::size_t loc, std::size_t rank) {
    Body reply;
    if (died && loc == child.loc) {
      reply = failure_reply(std::make_exception_ptr(SupervisionError(*died)));
    } else if (died) {
      reply = undeliverable_reply("cast lost with its forwarder " + child.head.actor.to_string() +
                                  ": " + *died);
    } else {
      reply = undeliverable_reply("cast to the member at location " + std::to_string(loc) +
                                  " lost: " + why);
    }
    out.push_back({static_cast<std::uint32_t>(rank), std::move(reply)});
  });
  return out;
}

/// Turns items lost with a forwarder's link into the SupervisionError of their member's proc,
/// where that proc is known (or seen, waiting a little) to have died.
void attribute_lost(const std::vector<CastMember>& base, const Slice& view,
                    std::vector<CastItem>& items, const std::vector<std::size_t>& lost) {
  for (std::size_t i : lost) {
    if (items[i].rank >= view.len()) continue;
    const std::size_t loc = view.location_of_rank(items[i].rank);
    if (loc >= base.size()) continue;
    if (auto died = await_proc_failure(base[loc].actor.proc)) {
      items[i].reply = failure_reply(std::make_exception_ptr(SupervisionError(*died)));
    }
  }
}

/// Folds reduce-mode items: the lowest-ranked failure wins, else the values in rank order.
std::vector<CastItem> fold(std::uint64_t reducer, const std::string& state,
                           std::vector<CastItem> items) {
  if (items.size() <= 1) return items;
  std::sort(items.begin(), items.end(),
            [](const CastItem& a, const CastItem& b) { return a.rank < b.rank; });
  for (auto& it : items) {
    if (it.reply.head.empty() || it.reply.head[0] != 0) return {std::move(it)};
  }
  ReduceFn fn = nullptr;
  {
    auto& r = reducers();
    std::lock_guard lock(r.mu);
    auto f = r.by_id.find(reducer);
    if (f != r.by_id.end()) fn = f->second;
  }
  if (fn == nullptr) {
    return {{items[0].rank, failure_reply(std::make_exception_ptr(std::runtime_error(
                                "the reducer of this cast is not registered in this binary")))}};
  }
  try {
    auto value_of = [](const CastItem& it) {
      Body b;
      b.head = it.reply.head.substr(1);
      b.parts = it.reply.parts;
      return b;
    };
    std::vector<Body> values;
    values.reserve(items.size());
    for (const auto& it : items) values.push_back(value_of(it));
    Body acc = fn(state, values);
    Body out;
    out.head.push_back(0);
    out.head += acc.head;
    out.parts = std::move(acc.parts);
    return {{items[0].rank, std::move(out)}};
  } catch (...) {
    return {{items[0].rank, failure_reply(std::current_exception())}};
  }
}

/// What one node waits for: its own member's reply and one result per child.
///
/// CA-1: a gather or reduce that includes a member found failed or unreachable (its proc died,
/// its link was lost) reports at once, with what it has, instead of waiting for the slowest
/// live member: the result fails anyway, and it must fail within the detection bound. Later
/// results are dropped. An endpoint's own throw waits like a value, so the lowest-ranked throw
/// still wins.
class Gather {
 public:
  Gather(std::size_t expected, CastMode mode, std::uint64_t reducer, std::string reducer_state,
         Done done)
      : left_(expected),
        mode_(mode),
        reducer_(reducer),
        reducer_state_(std::move(reducer_state)),
        done_(std::move(done)) {}

  /// `n` more results to wait for: a dead child's children, reached around it (CA-4).
  void expect(std::size_t n) {
    std::lock_guard lock(mu_);
    if (left_ != 0) left_ += n;
  }

  void add(std::vector<CastItem> more) {
    std::unique_lock lock(mu_);
    if (left_ == 0) return;  // reported already (CA-1)
    bool lost = false;
    for (auto& it : more) {
      lost = lost || reply_is_member_lost(it.reply);
      items_.push_back(std::move(it));
    }
    const bool early = lost && mode_ != CastMode::stream;
    if (early) {
      left_ = 0;
    } else if (--left_ != 0) {
      return;
    }
    auto items = std::move(items_);
    lock.unlock();
    if (mode_ == CastMode::reduce) items = fold(reducer_, reducer_state_, std::move(items));
    if (done_) done_(std::move(items));
  }

 private:
  std::mutex mu_;
  std::size_t left_;
  CastMode mode_;
  std::uint64_t reducer_;
  std::string reducer_state_;
  Done done_;
  std::vector<CastItem> items_;
};

/// A child's result, arriving over a link (or its failure if the link goes first).
class ChildResult final : public ReplySinkBase {
 public:
  ChildResult(std::shared_ptr<Gather> gather, std::shared_ptr<const ViewIndex> view,
              CastChild child)
      : gather_(std::move(gather)), view_(std::move(view)), child_(std::move(child)) {}

  bool deliver(const Body& body) override {
    std::vector<CastItem> items;
    try {
      items = decode<std::vector<CastItem>>(body);
      for (const auto& it : items) {
        bool ours = false;
        view_->each_in(child_.loc, child_.end,
                       [&](std::size_t, std::size_t rank) { ours = ours || rank == it.rank; });
        if (!ours) throw DecodeError("a cast result names a rank outside its subtree");
      }
    } catch (const std::exception& e) {
      items = failures(*view_, child_, std::string("malformed result: ") + e.what());
    }
    finish(std::move(items));
    return true;
  }
  void link_lost(const std::string& why) override { finish(failures(*view_, child_, why)); }
  void peer_failed(const std::exception_ptr& error) override {
    std::string report = "its proc failed";
    try {
      std::rethrow_exception(error);
    } catch (const std::exception& e) {
      report = e.what();
    }
    finish(failures(*view_, child_, report, report));
  }

 private:
  void finish(std::vector<CastItem> items) {
    if (done_.exchange(true)) return;
    gather_->add(std::move(items));
  }
  std::shared_ptr<Gather> gather_;
  std::shared_ptr<const ViewIndex> view_;
  CastChild child_;
  std::atomic<bool> done_{false};
};

void run_node(const std::shared_ptr<ProcState>& local, const ActorId& sender, const Hop& hop,
              const std::shared_ptr<const ViewIndex>& view, const Body& args, Done done,
              const std::shared_ptr<net::Link>& from = nullptr);

/// The hop for `child`, as `parent` forwards it.
Hop child_hop(const Hop& parent, const CastChild& child) {
  Hop hop;
  hop.mode = parent.mode;
  hop.reducer = parent.reducer;
  hop.reducer_state = parent.reducer_state;
  hop.endpoint = parent.endpoint;
  hop.fanout = parent.fanout;
  hop.stream_to = parent.stream_to;
  hop.key = parent.key;
  hop.view = parent.view;
  hop.loc = child.loc;
  hop.end = child.end;
  return hop;
}

/// The member at a location of the subtree a node forwards to.
using MemberAt = std::function<const CastMember&(std::size_t loc)>;

void send_child(const std::shared_ptr<ProcState>& local, const ActorId& sender, const Hop& parent,
                const CastChild& child, const std::shared_ptr<const ViewIndex>& view,
                const Body& args, const std::shared_ptr<Gather>& gather, const MemberAt& member_at);

/// CA-4: `child`'s head cannot be reached (its proc died, or nothing answers there): its own
/// member is reported lost, and the members behind it are reached through its children, as if
/// it were not in the tree. So a dead forwarder never cuts off live members behind it.
void route_around(const std::shared_ptr<ProcState>& local, const ActorId& sender, const Hop& parent,
                  const CastChild& child, const std::shared_ptr<const ViewIndex>& view,
                  const Body& args, const std::shared_ptr<Gather>& gather,
                  const MemberAt& member_at, const std::string& why) {
  std::vector<CastChild> grandchildren;
  for (auto [b, e] : split(child.loc + 1, child.end, kCastFanOut)) {
    if (view->any_in(b, e)) grandchildren.push_back({b, e, member_at(b)});
  }
  if (gather) {
    gather->expect(grandchildren.size());  // before the head's slot completes
    gather->add(failures(*view, CastChild{child.loc, child.loc + 1, child.head}, why));
  }
  for (const auto& g : grandchildren) {
    send_child(local, sender, parent, g, view, args, gather, member_at);
  }
}

/// Sends the hop for `child` to its head's proc: inline if it lives in this process.
void send_child(const std::shared_ptr<ProcState>& local, const ActorId& sender, const Hop& parent,
                const CastChild& child, const std::shared_ptr<const ViewIndex>& view,
                const Body& args, const std::shared_ptr<Gather>& gather,
                const MemberAt& member_at) {
  Hop hop = child_hop(parent, child);
  const ProcId& head = child.head.actor.proc;
  Done child_done;
  if (gather) child_done = [gather](std::vector<CastItem> items) { gather->add(std::move(items)); };
  if (auto there = find_proc(head)) {
    run_node(there, sender, hop, view, args, std::move(child_done));
    return;
  }
  const auto lost = [&](const std::string& why) {
    if (gather) gather->add(failures(*view, child, why));
  };
  if (!local) return lost("no proc in this process can link to " + head.name);
  if (proc_failure(head)) {
    return route_around(local, sender, parent, child, view, args, gather, member_at,
                        "its proc failed");
  }
  remember_address(head, child.head.address);
  auto [link, owner] = route_to(head);
  if (!link || !owner) {
    return route_around(local, sender, parent, child, view, args, gather, member_at,
                        "proc " + head.name + " cannot be reached");
  }
  if (gather) {
    hop.reply_to =
        open_reply_port(*owner, head, std::make_shared<ChildResult>(gather, view, child));
  }
  Envelope env;
  env.sender = sender;
  env.dest = PortId{ActorId{head, "proc", 0}, kCastPort};
  env.body = encode(hop);
  env.body.head += args.head;
  env.body.parts = args.parts;
  owner->envelopes_sent.fetch_add(1, std::memory_order_relaxed);
  std::string failed;
  try {
    if (!link->send(std::move(env))) failed = "link to " + head.name + " closed";
  } catch (const net::LinkFullError& e) {
    failed = e.what();  // backpressure ran out of patience: this subtree is not reached
  }
  if (!failed.empty() && gather && hop.reply_to) {
    if (auto sink = resolve_port(*hop.reply_to)) sink->link_lost(failed);
  }
}

/// Forwards to `children` (those with members in the view) and, if `self` is addressed,
/// delivers to this node's own member first.
void fan_out(const std::shared_ptr<ProcState>& local, const ActorId& sender, const Hop& hop,
             const std::shared_ptr<const ViewIndex>& view, const Body& args, const CastMember* self,
             const std::vector<CastChild>& children, const MemberAt& member_at, Done done,
             const std::shared_ptr<net::Link>& from) {
  std::vector<const CastChild*> addressed;
  for (const auto& c : children) {
    if (view->any_in(c.loc, c.end)) addressed.push_back(&c);
  }
  const std::optional<std::size_t> my_rank =
      self != nullptr ? hop.view.rank_of_location(hop.loc) : std::nullopt;
  std::shared_ptr<Gather> gather;
  if (hop.mode != CastMode::none) {
    gather = std::make_shared<Gather>(addressed.size() + (my_rank ? 1 : 0), hop.mode, hop.reducer,
                                      hop.reducer_state, std::move(done));
  }
  // Our own member first: what the sender sent earlier to it is already queued in this order.
  if (my_rank) {
    const auto rank = static_cast<std::uint32_t>(*my_rank);
    std::shared_ptr<StateBase> reply;
    if (hop.mode == CastMode::stream) {
      reply = make_status_reply([to = *hop.stream_to, rank, gather, from = self->actor](Body b) {
        route_remote_port_or_local(to, encode(CastItem{rank, std::move(b)}), from);
        gather->add({});
      });
    } else if (gather) {
      reply = make_status_reply([rank, gather](Body b) {
        gather->add({CastItem{rank, std::move(b)}});
      });
    }
    Body mine;
    mine.head = args.head;
    mine.parts = args.parts;
    deliver_local_call(*local, self->actor, hop.endpoint, sender, std::move(mine), std::move(reply),
                       from);
  }
  for (const CastChild* c : addressed) {
    send_child(local, sender, hop, *c, view, args, gather, member_at);
  }
  if (gather && addressed.empty() && !my_rank) gather->add({});  // nothing addressed below
}

/// The layouts a proc learned at spawn: its node of each mesh's tree, by key.
struct NodeTable {
  std::mutex mu;
  std::unordered_map<std::uint64_t, CastNode> by_key;
};

/// One node: deliver to its own member (if addressed), then forward to its children.
void run_node(const std::shared_ptr<ProcState>& local, const ActorId& sender, const Hop& hop,
              const std::shared_ptr<const ViewIndex>& view, const Body& args, Done done,
              const std::shared_ptr<net::Link>& from) {
  std::optional<CastNode> node;
  {
    auto table = local->extension<NodeTable>();
    std::lock_guard lock(table->mu);
    auto it = table->by_key.find(hop.key);
    if (it != table->by_key.end()) node = it->second;
  }
  if (!node || node->loc != hop.loc || node->end != hop.end) {
    // Every member of the mesh stopped (the nodes went with them), or the cast is not for
    // this proc.
    const std::string why = "proc " + local->id.name + " has no member of this mesh at location " +
                            std::to_string(hop.loc) + " (the mesh was stopped)";
    if (done) {
      done(failures(*view, CastChild{hop.loc, hop.end, CastMember{}}, why));
    } else {
      deliver_undeliverable(sender, Undeliverable{PortId{ActorId{local->id, "cast", hop.loc}, 0},
                                                  UndeliverableError::Reason::actor_stopped, why});
    }
    return;
  }
  const MemberAt below = [&n = *node](std::size_t loc) -> const CastMember& {
    return n.below.at(loc - n.loc - 1);
  };
  fan_out(local, sender, hop, view, args, &node->self, children_of(*node), below, std::move(done),
          from);
}

void on_cast(const std::shared_ptr<ProcState>& local, const std::shared_ptr<net::Link>& link,
             Envelope env) {
  Hop hop;
  Body args;
  try {
    InputArchive ar(env.body);
    ar(hop);
    if (hop.mode > CastMode::stream) throw DecodeError("bad cast mode");
    if (hop.fanout < 2 || hop.fanout > 64) throw DecodeError("cast fan-out out of range");
    if (hop.loc >= hop.end) throw DecodeError("a cast with an empty subtree");
    if (hop.mode == CastMode::stream && !hop.stream_to) throw DecodeError("stream with no port");
    args.head = env.body.head.substr(ar.position());
    args.parts = std::move(env.body.parts);
  } catch (const std::exception& e) {
    link->close(std::string("malformed cast: ") + e.what());
    return;
  }
  Done done;
  if (hop.mode != CastMode::none && hop.reply_to) {
    done = [to = *hop.reply_to, from = local->client](const std::vector<CastItem>& items) {
      route_remote_port_or_local(to, encode(items), from);
    };
  }
  auto view = std::make_shared<const ViewIndex>(hop.view);
  run_node(local, env.sender, hop, view, args, std::move(done), link);
}

/// The proc a cast starts from: the calling actor's, else the one that links this process.
std::shared_ptr<ProcState> root_proc(const std::vector<CastMember>& base) {
  if (Cell* c = current_cell()) return c->proc().shared_from_this();
  if (auto home = home_proc()) return home;
  for (const auto& m : base) {
    if (auto p = find_proc(m.actor.proc)) return p;
  }
  return nullptr;
}

/// The root's children: the heads of the chunks of the whole base.
std::vector<CastChild> root_children(const std::vector<CastMember>& base) {
  std::vector<CastChild> out;
  for (auto [b, e] : split(0, base.size(), kCastFanOut)) out.push_back({b, e, base[b]});
  return out;
}

}  // namespace

std::vector<CastNode> cast_tree(const std::vector<CastMember>& base) {
  std::vector<CastNode> nodes(base.size());
  std::vector<std::pair<std::uint32_t, std::uint32_t>> todo = split(0, base.size(), kCastFanOut);
  while (!todo.empty()) {
    auto [loc, end] = todo.back();
    todo.pop_back();
    CastNode& n = nodes[loc];
    n.loc = loc;
    n.end = end;
    n.self = base[loc];
    n.below.assign(base.begin() + loc + 1, base.begin() + end);
    for (auto c : split(loc + 1, end, kCastFanOut)) todo.push_back(c);
  }
  return nodes;
}

std::vector<CastChild> children_of(const CastNode& node) {
  std::vector<CastChild> out;
  for (auto [b, e] : split(node.loc + 1, node.end, kCastFanOut)) {
    out.push_back({b, e, node.below.at(b - node.loc - 1)});
  }
  return out;
}

void learn_cast_node(Proc& proc, std::uint64_t key, CastNode node) {
  auto table = proc.state().extension<NodeTable>();
  std::lock_guard lock(table->mu);
  table->by_key[key] = std::move(node);
}

void forget_cast_node(Proc& proc, std::uint64_t key) {
  auto table = proc.state().extension<NodeTable>();
  std::lock_guard lock(table->mu);
  table->by_key.erase(key);
}

std::size_t cast_nodes_known(Proc& proc) {
  auto table = proc.state().extension<NodeTable>();
  std::lock_guard lock(table->mu);
  return table->by_key.size();
}

std::uint64_t new_mesh_key() {
  static std::atomic<std::uint64_t> next{0};
  // Unique in this process; the process id and a random seed keep keys from different
  // spawners (the controller, actors in workers) apart.
  static const std::uint64_t seed = std::random_device{}() ^ (std::uint64_t(::getpid()) << 32);
  return (seed * 0x9E3779B97F4A7C15ULL) ^ next.fetch_add(1, std::memory_order_relaxed);
}

void install_cast() {
  set_cast_handler(&on_cast);
}

bool cast_direct(std::size_t loc, std::size_t n) {
  for (auto [b, e] : split(0, n, kCastFanOut)) {
    if (b == loc) return true;
  }
  return false;
}

std::size_t cast_hop_bytes(const CastRequest& request, std::size_t child_loc,
                           const PortId& reply_to) {
  Hop root;
  root.mode = request.mode;
  root.reducer = request.reducer;
  root.reducer_state = request.reducer_state;
  root.endpoint = request.endpoint;
  root.stream_to = request.stream_to;
  root.key = request.key;
  root.view = request.view;
  const auto nodes = cast_tree(*request.base);
  const auto& node = nodes.at(child_loc);
  Hop hop = child_hop(root, CastChild{node.loc, node.end, node.self});
  hop.reply_to = reply_to;
  return encode(hop).head.size();
}

void cast(CastRequest request) {
  install_cast();
  const auto& base = *request.base;
  auto local = root_proc(base);
  Hop hop;
  hop.mode = request.mode;
  hop.reducer = request.reducer;
  hop.reducer_state = std::move(request.reducer_state);
  hop.endpoint = request.endpoint;
  hop.fanout = kCastFanOut;
  hop.stream_to = request.stream_to;
  hop.key = request.key;
  hop.view = request.view;
  const ActorId sender = current_sender(local.get());
  Done done = std::move(request.done);
  if (done) {
    // A forwarder can only say that a member behind it was lost with its link; the process
    // that started the member's proc knows whether it died, and how.
    done = [done = std::move(done), base = request.base, view = request.view,
            root = std::weak_ptr<ProcState>(local)](std::vector<CastItem> items) {
      std::vector<std::size_t> lost;
      for (std::size_t i = 0; i < items.size(); ++i) {
        if (reply_is_link_lost(items[i].reply)) lost.push_back(i);
      }
      if (lost.empty()) {
        done(std::move(items));
        return;
      }
      // Waiting for an exit may take a moment: not on the I/O thread that brought the result,
      // but on the root proc's one background thread.
      auto work = [done, base, view, items = std::move(items), lost = std::move(lost)]() mutable {
        attribute_lost(*base, view, items, lost);
        done(std::move(items));
      };
      if (auto proc = root.lock()) {
        proc->post_background(std::move(work));
      } else {
        work();
      }
    };
  }
  auto view = std::make_shared<const ViewIndex>(hop.view);
  const MemberAt at = [&base](std::size_t loc) -> const CastMember& { return base.at(loc); };
  fan_out(local, sender, hop, view, request.args, nullptr, root_children(base), at, std::move(done),
          nullptr);
}

void complete_item(StateBase& state, const CastItem& item, std::string_view endpoint,
                   const Shape* shape) {
  std::string where;
  if (shape != nullptr && item.rank < shape->len()) {
    where = "rank " + std::to_string(item.rank) + " " + shape->point(item.rank).to_string();
  }
  complete_from_reply(state, item.reply, endpoint, where);
}

std::uint64_t register_reducer(std::string_view key, ReduceFn fn) {
  const std::uint64_t id = fnv1a(key);
  auto& r = reducers();
  std::lock_guard lock(r.mu);
  r.by_id.emplace(id, fn);
  return id;
}

bool StreamQueue::deliver(const Body& body) {
  auto item = decode<CastItem>(body);
  {
    std::lock_guard lock(mu_);
    q_.push_back(std::move(item));
  }
  cv_.notify_one();
  return true;
}

std::optional<CastItem> StreamQueue::pop(
    std::optional<std::chrono::steady_clock::time_point> deadline) {
  std::unique_lock lock(mu_);
  const auto have = [&] { return head_ < q_.size(); };
  if (!deadline) {
    cv_.wait(lock, have);
  } else if (!cv_.wait_until(lock, *deadline, have)) {
    return std::nullopt;
  }
  return std::move(q_[head_++]);
}

PortId open_stream_port(const std::vector<CastMember>& base, std::shared_ptr<StreamQueue> q) {
  auto local = root_proc(base);
  if (!local) throw UsageError("stream(): no proc in this process to receive the replies");
  std::lock_guard lock(local->mu);
  const std::uint64_t n = local->next_port++;
  local->ports.emplace(n, std::move(q));
  return PortId{local->client, n};
}

namespace {
struct ShutdownHook {
  std::mutex mu;
  std::function<void()> hook;
};
ShutdownHook& shutdown_hook() {
  static auto* h = new ShutdownHook;  // never destroyed: agents may run during exit
  return *h;
}
}  // namespace

void set_shutdown_hook(std::function<void()> hook) {
  auto& h = shutdown_hook();
  std::lock_guard lock(h.mu);
  h.hook = std::move(hook);
}

void run_shutdown_hook() {
  std::function<void()> hook;
  {
    auto& h = shutdown_hook();
    std::lock_guard lock(h.mu);
    hook = h.hook;
  }
  if (hook) hook();
}

void close_stream_port(const PortId& id) {
  if (auto p = find_proc(id.actor.proc)) {
    std::lock_guard lock(p->mu);
    p->ports.erase(id.port);
  }
}

}  // namespace baton::detail
