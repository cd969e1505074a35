// The cast tree (see baton/mesh/cast.hpp).
//
// A hop on the wire is an envelope to the kCastPort of a child's head's proc:
//   head = mode, reducer and its state, endpoint, fan-out, reply port, stream port, the mesh's
//          key, the view's Slice and the child's subtree [loc, end), then the call's arguments;
//   parts = theirs
// and a node's result (gather and reduce) is one envelope to the reply port holding its items.
// The head's proc knows its node of the mesh's tree by the key (CA-3): its own member and the
// members of its subtree, learned at spawn.

#include "baton/mesh/cast.hpp"

#include "actor/current.hpp"
#include "actor/directory.hpp"
#include "actor/failures.hpp"
#include "actor/replies.hpp"
#include "actor/routing.hpp"
#include "actor/trace.hpp"
#include "baton/actor/errors.hpp"
#include "mesh/cast_impl.hpp"
#include "mesh/stall.hpp"
#include "net/wake_ups.hpp"

namespace baton::detail {

namespace cast_impl {

/// The proc a cast starts from: the calling actor's, else the one that links this process.
std::shared_ptr<ProcState> root_proc(const std::vector<CastMember>& base) {
  if (auto p = current_proc()) return p;
  if (auto home = home_proc()) return home;
  for (const auto& m : base) {
    if (auto p = find_proc(m.actor.proc)) return p;
  }
  return nullptr;
}

}  // namespace cast_impl

namespace {

using namespace cast_impl;  // NOLINT(google-build-using-namespace): this layer's own internals

struct Hop {
  CastMode mode = CastMode::none;
  std::uint64_t reducer = 0;
  std::string reducer_state;  // CA-2
  std::uint64_t endpoint = 0;
  std::uint32_t fanout = kCastHostFanOut;  // the mesh's host fan-out
  std::optional<PortId> stream_to;         // stream mode: where each reply goes
  std::uint64_t key = 0;                   // the mesh's tree (CA-3)
  Slice view;                              // the locations cast to
  // What differs from child to child (the fields above are the same at every hop of a cast):
  std::uint32_t loc = 0;  // the node this hop is for, and its subtree's end
  std::uint32_t end = 0;
  std::optional<PortId> reply_to;  // the parent's port for this node's result

  template <class Ar>
  void serialize(Ar& ar) {
    ar(mode, reducer, reducer_state, endpoint, fanout, stream_to, key, view);
    ar(loc, end, reply_to);
  }
};

/// A node's hop as it goes to each of its children: the fields common to all of them are
/// encoded once, at the first child sent over a link, and each child's hop appends its own.
class HopBytes {
 public:
  HopBytes(const Hop& hop, bool root) : hop_(hop), root_(root) {}
  const Hop& hop() const { return hop_; }
  /// Whether the node is the cast's root (its caller's proc).
  bool root() const { return root_; }
  /// The hop's encoding up to its first per-child field (as Hop::serialize writes it).
  const std::string& common() {
    if (common_.empty()) {
      Body b;
      OutputArchive ar(b);
      ar(hop_.mode, hop_.reducer, hop_.reducer_state, hop_.endpoint, hop_.fanout, hop_.stream_to,
         hop_.key, hop_.view);
      common_ = std::move(b.head);
    }
    return common_;
  }

 private:
  const Hop& hop_;
  bool root_;
  std::string common_;  // never empty once made: the mode alone takes a byte
};

using Done = std::function<void(std::vector<CastItem>)>;

/// A member's reply that could not be sent on, as that failure.
CastItem unsent(const CastItem& item, const std::string& why) {
  return {item.rank, failure_reply(std::make_exception_ptr(
                         std::runtime_error("its reply could not be sent on: " + why)))};
}

/// Sends gathered replies on to `to`. If they cannot go (too big for one message, say), each
/// becomes that failure instead, so that the caller fails saying why rather than waits for ever.
void send_items(const PortId& to, const std::vector<CastItem>& items, const ActorId& from) {
  const auto lost = route_remote_port_or_local(to, encode(items), from);
  if (!lost) return;
  std::vector<CastItem> failed;
  failed.reserve(items.size());
  for (const auto& item : items) failed.push_back(unsent(item, *lost));
  (void)route_remote_port_or_local(to, encode(failed), from);
}

/// The same for one reply of a stream.
void send_item(const PortId& to, const CastItem& item, const ActorId& from) {
  const auto lost = route_remote_port_or_local(to, encode(item), from);
  if (lost) (void)route_remote_port_or_local(to, encode(unsent(item, *lost)), from);
}

void run_node(const std::shared_ptr<ProcState>& local, const ActorId& sender, const Hop& hop,
              const std::shared_ptr<const ViewIndex>& view, Body args, Done done,
              const std::shared_ptr<net::Link>& from = nullptr);

/// What the root sends, before it names a child: the request's fields that travel.
Hop root_hop(const CastRequest& request) {
  Hop hop;
  hop.mode = request.mode;
  hop.reducer = request.reducer;
  hop.reducer_state = request.reducer_state;
  hop.endpoint = request.endpoint;
  hop.fanout = request.host_fanout;
  hop.stream_to = request.stream_to;
  hop.key = request.key;
  hop.view = request.view;
  return hop;
}

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

/// A forwarding node sends on the I/O thread, which must not wait for room on a full link: the
/// link the cast came in on stops reading instead, until the full one is down to half, so the
/// sender upstream waits in its turn (as for a full mailbox). Nothing is dropped.
void backpressure(const std::shared_ptr<net::Link>& from, net::Link& to) {
  if (!to.full()) return;
  from->pause_reading();
  const bool full = to.when_room([weak = std::weak_ptr<net::Link>(from)] {
    if (auto f = weak.lock()) f->resume_reading();
  });
  if (!full) from->resume_reading();
}

/// The envelope that carries the hop for `child` and the call's arguments to its head's proc.
Envelope hop_envelope(const ActorId& sender, HopBytes& parent, const CastChild& child,
                      const std::optional<PortId>& reply_to, const Body& args) {
  const std::string& common = parent.common();
  Envelope env;
  env.sender = sender;
  env.dest = PortId{ActorId{child.head.actor.proc, "proc", 0}, kCastPort};
  constexpr std::size_t kTail = 160;  // loc, end and a reply port, for most names
  env.body.head.reserve(common.size() + kTail + args.head.size());
  env.body.head = common;
  encode_into(env.body, child.loc, child.end, reply_to);
  env.body.head += args.head;
  env.body.parts = args.parts;
  return env;
}

/// The member at a location of the subtree a node forwards to.
using MemberAt = std::function<const CastMember&(std::size_t loc)>;
/// A node's children, kept alive by what holds them (the mesh's root children, the proc's node
/// of the tree); a ChildResult keeps one by an aliasing pointer instead of copying it.
using Children = std::shared_ptr<const std::vector<CastChild>>;
using ChildPtr = std::shared_ptr<const CastChild>;

void send_child(const std::shared_ptr<ProcState>& local, const ActorId& sender, HopBytes& parent,
                const ChildPtr& child, const std::shared_ptr<const ViewIndex>& view,
                const Body& args, const std::shared_ptr<Gather>& gather, const MemberAt& member_at,
                const std::shared_ptr<net::Link>& from);

/// CA-4: `child`'s head cannot be reached (its proc died, or nothing answers there): its own
/// member is reported lost, and the members behind it are reached through its children, as if
/// it were not in the tree. So a dead forwarder never cuts off live members behind it.
void route_around(const std::shared_ptr<ProcState>& local, const ActorId& sender, HopBytes& parent,
                  const CastChild& child, const std::shared_ptr<const ViewIndex>& view,
                  const Body& args, const std::shared_ptr<Gather>& gather,
                  const MemberAt& member_at, const std::string& why,
                  const std::shared_ptr<net::Link>& from) {
  auto grandchildren = std::make_shared<std::vector<CastChild>>();
  const auto address_at = [&](std::size_t loc) -> std::string_view {
    return member_at(loc).address;
  };
  const Hop& hop = parent.hop();
  for (auto [b, e] : cast_impl::split_at_hosts(child.loc + 1, child.end, hop.fanout, address_at)) {
    if (view->any_in(b, e)) grandchildren->push_back({b, e, member_at(b)});
  }
  if (gather) {
    gather->expect(grandchildren->size());  // before the head's slot completes
    gather->add(failures(*view, CastChild{child.loc, child.loc + 1, child.head}, why));
  }
  for (const auto& g : *grandchildren) {
    send_child(local, sender, parent, ChildPtr(grandchildren, &g), view, args, gather, member_at,
               from);
  }
}

/// Sends the hop for `child` to its head's proc: inline if it lives in this process.
void send_child(const std::shared_ptr<ProcState>& local, const ActorId& sender, HopBytes& parent,
                const ChildPtr& child_ptr, const std::shared_ptr<const ViewIndex>& view,
                const Body& args, const std::shared_ptr<Gather>& gather, const MemberAt& member_at,
                const std::shared_ptr<net::Link>& from) {
  const CastChild& child = *child_ptr;
  const ProcId& head = child.head.actor.proc;
  std::optional<PortId> reply_to;
  if (auto there = local ? local->node->find_proc(head.name) : find_proc(head)) {
    if (local && simulating()) {  // baton-bench scale: as if `there` were in another process
      if (gather) {
        reply_to =
            open_reply_port(*local, head, std::make_shared<ChildResult>(gather, view, child_ptr));
      }
      simulate_hop(*local, there, hop_envelope(sender, parent, child, reply_to, args));
      return;
    }
    Done child_done;
    if (gather) {
      child_done = [gather](std::vector<CastItem> items) { gather->add(std::move(items)); };
    }
    // Its members may run here and now, and wait for the peers sent to so far: wake them first.
    net::internal::ring_held_wake_ups();
    run_node(there, sender, child_hop(parent.hop(), child), view, args, std::move(child_done));
    return;
  }
  const auto lost = [&](const std::string& why) {
    if (gather) gather->add(failures(*view, child, why));
  };
  if (!local) return lost("no proc in this process can link to " + head.name);
  auto [link, owner, failed_proc] = route_for_cast(*local, head, child.head.address);
  if (failed_proc) {
    return route_around(local, sender, parent, child, view, args, gather, member_at,
                        "its proc failed", from);
  }
  if (!link || !owner) {
    return route_around(local, sender, parent, child, view, args, gather, member_at,
                        "proc " + head.name + " cannot be reached", from);
  }
  // A child whose subtree is its own member alone gets a plain call, as a unicast to it would
  // (the same link, so the same order): nothing of the tree is left for its proc to do. Its
  // reply comes back to this node, which for a stream is the stream's port's proc only at the
  // root: below it, a stream's member gets the hop, which sends its reply to the port itself.
  const Hop& hop = parent.hop();
  const bool plain = child.end == child.loc + 1 && (hop.mode != CastMode::stream || parent.root());
  if (gather) {
    std::optional<std::uint32_t> rank;
    if (plain) rank = static_cast<std::uint32_t>(hop.view.rank_of_location(child.loc).value());
    reply_to =
        open_reply_port(*owner, head, std::make_shared<ChildResult>(gather, view, child_ptr, rank));
  }
  Envelope env = plain ? call_envelope(sender, child.head.actor, hop.endpoint, reply_to, args)
                       : hop_envelope(sender, parent, child, reply_to, args);
  owner->envelopes_sent.fetch_add(1, std::memory_order_relaxed);
  const TracedSend traced(env, "cast");
  std::string failed;
  try {
    if (!link->send(std::move(env))) failed = "link to " + head.name + " closed";
  } catch (const net::LinkFullError& e) {
    failed = e.what();  // backpressure ran out of patience: this subtree is not reached
  }
  if (failed.empty() && from && from != link) backpressure(from, *link);
  if (!failed.empty() && gather && reply_to) {
    if (auto sink = resolve_port(*reply_to)) sink->link_lost(failed);
  }
}

/// Forwards to `children` (those with members in the view) and, if `self` is addressed,
/// delivers to this node's own member first (moving `args` to it when no child is addressed).
void fan_out(const std::shared_ptr<ProcState>& local, const ActorId& sender, const Hop& hop,
             const std::shared_ptr<const ViewIndex>& view, Body& args, const CastMember* self,
             const Children& children, const MemberAt& member_at, Done done,
             const std::shared_ptr<net::Link>& from) {
  std::size_t addressed = 0;
  for (const auto& c : *children) addressed += view->any_in(c.loc, c.end) ? 1 : 0;
  const std::optional<std::size_t> my_rank =
      self != nullptr ? hop.view.rank_of_location(hop.loc) : std::nullopt;
  std::shared_ptr<Gather> gather;
  // A leaf's result is its own member's reply alone: it goes up as it comes, with no Gather
  // (folding one item leaves it as it is).
  const bool lone = my_rank && addressed == 0 && hop.mode != CastMode::stream;
  Done lone_done;
  if (lone) {
    lone_done = std::move(done);
  } else if (hop.mode != CastMode::none) {
    Done lost;
    if (hop.mode == CastMode::stream) {
      // Lost members go to the stream's port at once, like replies, not up the tree behind
      // the members still busy (the port's end attributes them: see open_stream_port).
      lost = [to = *hop.stream_to,
              from = local ? local->client : sender](const std::vector<CastItem>& items) {
        for (const auto& item : items) send_item(to, item, from);
      };
    }
    gather = std::make_shared<Gather>(addressed + (my_rank ? 1 : 0), hop.mode, hop.reducer,
                                      hop.reducer_state, std::move(done), std::move(lost));
    // A forwarder's fold and result, and the root's fold (the caller's reducer), leave the read
    // handler that brought the last result. The root's plain gather sends nothing: it sets the
    // caller's future where it is, at no cost in latency.
    if ((self != nullptr || hop.mode == CastMode::reduce) && local) {
      gather->finish_through([proc = std::weak_ptr<ProcState>(local)](std::function<void()> f) {
        if (auto p = proc.lock()) return run_off_reads(*p, std::move(f));
        f();
      });
    }
  }
  // Our own member first: what the sender sent earlier to it is already queued in this order.
  if (my_rank) {
    const auto rank = static_cast<std::uint32_t>(*my_rank);
    std::shared_ptr<StateBase> reply;
    if (hop.mode == CastMode::stream) {
      reply = make_status_reply([to = *hop.stream_to, rank, gather, from = self->actor](Body b) {
        send_item(to, CastItem{rank, std::move(b)}, from);
        gather->add(std::vector<CastItem>{});
      });
    } else if (gather) {
      reply = make_status_reply([rank, gather](Body b) {
        gather->add(CastItem{rank, std::move(b)});
      });
    } else if (hop.mode != CastMode::none && lone_done) {
      reply = make_status_reply([rank, done = std::move(lone_done)](Body b) {
        std::vector<CastItem> items;
        items.push_back(CastItem{rank, std::move(b)});
        done(std::move(items));
      });
    }
    if (addressed == 0) {  // nothing to forward: the member takes the arguments
      deliver_local_call(*local, self->actor, hop.endpoint, sender, std::move(args),
                         std::move(reply), from);
      return;
    }
    Body mine;
    mine.head = args.head;
    mine.parts = args.parts;
    deliver_local_call(*local, self->actor, hop.endpoint, sender, std::move(mine), std::move(reply),
                       from);
  }
  HopBytes bytes(hop, self == nullptr);
  for (const auto& c : *children) {
    if (view->any_in(c.loc, c.end)) {
      send_child(local, sender, bytes, ChildPtr(children, &c), view, args, gather, member_at, from);
    }
  }
  if (gather && addressed == 0 && !my_rank)
    gather->add(std::vector<CastItem>{});  // nothing addressed below
}

/// One node: deliver to its own member (if addressed), then forward to its children.
void run_node(const std::shared_ptr<ProcState>& local, const ActorId& sender, const Hop& hop,
              const std::shared_ptr<const ViewIndex>& view, Body args, Done done,
              const std::shared_ptr<net::Link>& from) {
  std::shared_ptr<const KnownNode> known;
  {
    auto table = local->extension<NodeTable>();
    std::lock_guard lock(table->mu);
    auto it = table->by_key.find(hop.key);
    if (it != table->by_key.end()) known = it->second;
  }
  if (!known || known->node.loc != hop.loc || known->node.end != hop.end) {
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
  const CastNode& node = known->node;
  const MemberAt below = [&node](std::size_t loc) -> const CastMember& {
    return node.below.at(loc - node.loc - 1);
  };
  fan_out(local, sender, hop, view, args, &node.self, Children(known, &known->children), below,
          std::move(done), from);
}

}  // namespace

void cast_impl::on_cast(const std::shared_ptr<ProcState>& local,
                        const std::shared_ptr<net::Link>& link, Envelope env) {
  Hop hop;
  Body args;
  try {
    InputArchive ar(env.body);
    ar(hop);
    if (hop.mode > CastMode::stream) throw DecodeError("bad cast mode");
    if (hop.fanout < 2 || hop.fanout > kCastHostFanOut) {
      throw DecodeError("cast fan-out out of range");
    }
    if (hop.loc >= hop.end) throw DecodeError("a cast with an empty subtree");
    if (hop.mode == CastMode::stream && !hop.stream_to) throw DecodeError("stream with no port");
    args.head = env.body.head.substr(ar.position());
    args.parts = std::move(env.body.parts);
  } catch (const std::exception& e) {
    if (link) refuse_link(*link, std::string("malformed cast: ") + e.what());
    return;  // (a simulated link carries only what this process encoded)
  }
  Done done;
  if (hop.mode != CastMode::none && hop.reply_to && link) {
    done = [to = *hop.reply_to, from = local->client](const std::vector<CastItem>& items) {
      send_items(to, items, from);
    };
  } else if (hop.mode != CastMode::none && hop.reply_to) {
    done = [to = *hop.reply_to, from = local->client](const std::vector<CastItem>& items) {
      simulate_result(to, encode(items), from);
    };
  }
  auto view = std::make_shared<const ViewIndex>(hop.view);
  run_node(local, env.sender, hop, view, std::move(args), std::move(done), link);
}

std::shared_ptr<const std::vector<CastChild>> root_children(const std::vector<CastMember>& base,
                                                            std::size_t host_fanout) {
  auto out = std::make_shared<std::vector<CastChild>>();
  for (auto [b, e] : root_split(base, host_fanout)) out->push_back({b, e, base[b]});
  return out;
}

void install_cast() {
  set_cast_handler(&on_cast);
}

std::size_t cast_hop_bytes(const CastRequest& request, std::size_t child_loc,
                           const PortId& reply_to) {
  const auto nodes = cast_tree(*request.base, request.host_fanout);
  const auto& node = nodes.at(child_loc);
  Hop hop = child_hop(root_hop(request), CastChild{node.loc, node.end, node.self});
  hop.reply_to = reply_to;
  return encode(hop).head.size();
}

void cast(CastRequest request) {
  const auto& base = *request.base;
  auto local = root_proc(base);
  if (local) {
    set_cast_handler(*local->node, &on_cast);
  } else {
    install_cast();
  }
  auto view = std::make_shared<const ViewIndex>(request.view);
  Hop hop = root_hop(request);
  const ActorId sender = current_sender(local.get());
  Done done = std::move(request.done);
  std::shared_ptr<Waiting> waiting;
  if (done) {
    waiting = start_waiting(
        *local, [base = request.base, view, endpoint = request.endpoint_name](double waited_s) {
          return gather_stall_report(*base, view->slice(), endpoint, waited_s);
        });
  }
  if (done) {
    // A forwarder can only say that a member behind it was lost with its link; the process
    // that started the member's proc knows whether it died, and how.
    done = [done = std::move(done), base = request.base, view,
            root = std::weak_ptr<ProcState>(local),
            endpoint = observing() ? request.endpoint_name : std::string_view(),
            sent = std::chrono::steady_clock::now(), waiting](std::vector<CastItem> items) {
      if (waiting) waiting->done.store(true);
      // The call's round trip, in the root proc's metrics.
      if (auto proc = root.lock(); proc && !endpoint.empty()) {
        proc->call_times.of_static(endpoint).observe(
            std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() -
                                                                 sent)
                .count());
      }
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
      auto work = [done, base, view, items = std::move(items), lost = std::move(lost),
                   since = std::chrono::steady_clock::now()]() mutable {
        attribute_lost(*base, view->slice(), items, lost, since);
        done(std::move(items));
      };
      if (auto proc = root.lock()) {
        proc->post_background(std::move(work));
      } else {
        work();
      }
    };
  }
  const MemberAt at = [&base](std::size_t loc) -> const CastMember& { return base.at(loc); };
  const Children children =
      request.children ? request.children : root_children(base, request.host_fanout);
  // Members asleep on this core are woken once all are sent to, those on other cores at once.
  const net::HeldWakeUps held;
  fan_out(local, sender, hop, view, request.args, nullptr, children, at, std::move(done), nullptr);
}

std::exception_ptr name_member(std::exception_ptr e, const Point& point) {
  if (!e) return e;
  const std::string where = "rank " + std::to_string(point.rank) + " " + point.to_string();
  try {
    std::rethrow_exception(e);
  } catch (const ActorError& a) {
    if (a.where().empty()) {
      return std::make_exception_ptr(
          ActorError(a.actor(), a.endpoint(), a.remote_message(), point));
    }
  } catch (const SupervisionError& s) {
    if (s.where().empty()) return std::make_exception_ptr(SupervisionError(s.what(), where));
  } catch (const UndeliverableError& u) {
    if (u.where().empty()) {
      return std::make_exception_ptr(UndeliverableError(u.reason(), u.what(), where));
    }
  } catch (...) {
  }
  return e;
}

void complete_item(StateBase& state, const CastItem& item, std::string_view endpoint,
                   const Point& point) {
  if (!reply_is_member_lost(item.reply)) {
    complete_from_reply(state, item.reply, endpoint, &point);  // an ActorError names it here
    return;
  }
  // A member found failed or unreachable: its error names it too, as an endpoint's throw does.
  State<void> lost;
  complete_from_reply(lost, item.reply, endpoint, &point);
  state.set_exception(name_member(lost.error(), point));
}

void complete_item(StateBase& state, const CastItem& item, std::string_view endpoint,
                   const Shape* shape) {
  if (shape != nullptr && item.rank < shape->len()) {
    complete_item(state, item, endpoint, shape->point(item.rank));
  } else {
    complete_from_reply(state, item.reply, endpoint);
  }
}

}  // namespace baton::detail
