// The cast tree (see baton/mesh/cast.hpp).
//
// A hop on the wire is an envelope to the kCastPort of the chunk head's proc:
//   head = mode, reducer, endpoint, fan-out, reply port, stream port, the chunk's members (the
//          head first) each with its rank or -1, then the call's arguments; parts = theirs
// and a node's result (gather and reduce) is one envelope to the reply port holding its items.

#include "baton/mesh/cast.hpp"

#include <algorithm>
#include <cstdio>
#include <mutex>
#include <unordered_map>
#include <utility>

#include "actor/cell.hpp"
#include "baton/actor/errors.hpp"

namespace baton::detail {
namespace {

struct HopMember {
  CastMember member;
  std::int64_t rank = -1;

  template <class Ar>
  void serialize(Ar& ar) {
    ar(member, rank);
  }
};

struct Hop {
  CastMode mode = CastMode::none;
  std::uint64_t reducer = 0;
  std::string reducer_state;  // CA-2
  std::uint64_t endpoint = 0;
  std::uint32_t fanout = kCastFanOut;
  std::optional<PortId> reply_to;   // the parent's port for this node's result
  std::optional<PortId> stream_to;  // stream mode: where each reply goes
  std::vector<HopMember> members;   // members[0] is this node

  template <class Ar>
  void serialize(Ar& ar) {
    ar(mode, reducer, reducer_state, endpoint, fanout, reply_to, stream_to, members);
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

Body undeliverable_reply(const std::string& why) {
  return failure_reply(
      std::make_exception_ptr(UndeliverableError(UndeliverableError::Reason::link_lost, why)));
}

/// The members of a chunk whose head's proc died: the head failed with its report, and the
/// members behind it were lost with it.
std::vector<CastItem> head_died(const std::vector<HopMember>& members, const std::string& report) {
  std::vector<CastItem> out;
  for (std::size_t i = 0; i < members.size(); ++i) {
    const auto& m = members[i];
    if (m.rank < 0) continue;
    out.push_back({static_cast<std::uint32_t>(m.rank),
                   i == 0 ? failure_reply(std::make_exception_ptr(SupervisionError(report)))
                          : undeliverable_reply("cast to " + m.member.actor.to_string() +
                                                " lost with its forwarder: " + report)});
  }
  return out;
}

/// Every addressed member of `members` as lost: the head's proc died (see head_died) or could
/// not be reached.
std::vector<CastItem> failures(const std::vector<HopMember>& members, const std::string& why) {
  if (!members.empty()) {
    if (auto died = proc_failure(members.front().member.actor.proc)) {
      return head_died(members, *died);
    }
  }
  std::vector<CastItem> out;
  for (const auto& m : members) {
    if (m.rank >= 0) {
      out.push_back(
          {static_cast<std::uint32_t>(m.rank),
           undeliverable_reply("cast to " + m.member.actor.to_string() + " lost: " + why)});
    }
  }
  return out;
}

/// Turns items lost with a forwarder's link into the SupervisionError of their member's proc,
/// where that proc is known (or seen, waiting a little) to have died. `base` is by location;
/// an item's rank is matched to its member through the cast's rank_of, kept by the caller.
void attribute_lost(const std::vector<CastMember>& base, std::vector<CastItem>& items,
                    const std::vector<std::size_t>& lost,
                    const std::vector<std::int64_t>& rank_of) {
  for (std::size_t i : lost) {
    for (std::size_t loc = 0; loc < base.size(); ++loc) {
      if (rank_of[loc] != static_cast<std::int64_t>(items[i].rank)) continue;
      if (auto died = await_proc_failure(base[loc].actor.proc)) {
        items[i].reply = failure_reply(std::make_exception_ptr(SupervisionError(*died)));
      }
      break;
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
  ChildResult(std::shared_ptr<Gather> gather, std::vector<HopMember> members)
      : gather_(std::move(gather)), members_(std::move(members)) {}

  bool deliver(const Body& body) override {
    std::vector<CastItem> items;
    try {
      items = decode<std::vector<CastItem>>(body);
      for (const auto& it : items) {
        const bool ours = std::any_of(members_.begin(), members_.end(), [&](const HopMember& m) {
          return m.rank == static_cast<std::int64_t>(it.rank);
        });
        if (!ours) throw DecodeError("a cast result names a rank outside its subtree");
      }
    } catch (const std::exception& e) {
      items = failures(members_, std::string("malformed result: ") + e.what());
    }
    finish(std::move(items));
    return true;
  }
  void link_lost(const std::string& why) override { finish(failures(members_, why)); }
  void peer_failed(const std::exception_ptr& error) override {
    std::string report = "its proc failed";
    try {
      std::rethrow_exception(error);
    } catch (const std::exception& e) {
      report = e.what();
    }
    finish(head_died(members_, report));
  }

 private:
  void finish(std::vector<CastItem> items) {
    if (done_.exchange(true)) return;
    gather_->add(std::move(items));
  }
  std::shared_ptr<Gather> gather_;
  std::vector<HopMember> members_;
  std::atomic<bool> done_{false};
};

void run_hop(const std::shared_ptr<ProcState>& local, const ActorId& sender, Hop hop,
             const Body& args, bool has_self, Done done,
             const std::shared_ptr<net::Link>& from = nullptr);

/// Sends `chunk` (its head first) to the head's proc: inline if it lives in this process.
void send_chunk(const std::shared_ptr<ProcState>& local, const ActorId& sender, const Hop& parent,
                std::vector<HopMember> chunk, const Body& args,
                const std::shared_ptr<Gather>& gather) {
  Hop hop;
  hop.mode = parent.mode;
  hop.reducer = parent.reducer;
  hop.reducer_state = parent.reducer_state;
  hop.endpoint = parent.endpoint;
  hop.fanout = parent.fanout;
  hop.stream_to = parent.stream_to;
  const ProcId head = chunk.front().member.actor.proc;
  Done child_done;
  if (gather) child_done = [gather](std::vector<CastItem> items) { gather->add(std::move(items)); };
  if (auto there = find_proc(head)) {
    hop.members = std::move(chunk);
    run_hop(there, sender, std::move(hop), args, true, std::move(child_done));
    return;
  }
  if (!local) {
    if (gather) gather->add(failures(chunk, "no proc in this process can link to " + head.name));
    return;
  }
  if (proc_failure(head)) {
    if (gather) gather->add(failures(chunk, "its proc failed"));
    return;
  }
  remember_address(head, chunk.front().member.address);
  auto [link, owner] = route_to(head);
  if (!link || !owner) {
    if (gather) gather->add(failures(chunk, "proc " + head.name + " cannot be reached"));
    return;
  }
  if (gather) {
    hop.reply_to = open_reply_port(*owner, head, std::make_shared<ChildResult>(gather, chunk));
  }
  hop.members = std::move(chunk);
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

/// One node: deliver to its own member (if it has one), then forward the rest in chunks.
void run_hop(const std::shared_ptr<ProcState>& local, const ActorId& sender, Hop hop,
             const Body& args, bool has_self, Done done, const std::shared_ptr<net::Link>& from) {
  const std::size_t first = has_self ? 1 : 0;
  const std::size_t rest = hop.members.size() - first;
  const std::size_t k = std::min<std::size_t>(hop.fanout, rest);
  std::vector<std::vector<HopMember>> chunks;
  for (std::size_t i = 0; i < k; ++i) {
    const std::size_t b = first + i * rest / k;
    const std::size_t e = first + (i + 1) * rest / k;
    const bool addressed = std::any_of(hop.members.begin() + static_cast<std::ptrdiff_t>(b),
                                       hop.members.begin() + static_cast<std::ptrdiff_t>(e),
                                       [](const HopMember& m) { return m.rank >= 0; });
    if (addressed) {
      chunks.emplace_back(hop.members.begin() + static_cast<std::ptrdiff_t>(b),
                          hop.members.begin() + static_cast<std::ptrdiff_t>(e));
    }
  }
  const bool self = has_self && hop.members[0].rank >= 0;
  std::shared_ptr<Gather> gather;
  if (hop.mode != CastMode::none) {
    gather = std::make_shared<Gather>(chunks.size() + (self ? 1 : 0), hop.mode, hop.reducer,
                                      hop.reducer_state, std::move(done));
  }
  // Our own member first: what the sender sent earlier to it is already queued in this order.
  if (self) {
    const HopMember& me = hop.members[0];
    const auto rank = static_cast<std::uint32_t>(me.rank);
    std::shared_ptr<StateBase> reply;
    if (hop.mode == CastMode::stream) {
      reply =
          make_status_reply([to = *hop.stream_to, rank, gather, from = me.member.actor](Body b) {
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
    deliver_local_call(*local, me.member.actor, hop.endpoint, sender, std::move(mine),
                       std::move(reply), from);
  }
  for (auto& chunk : chunks) send_chunk(local, sender, hop, std::move(chunk), args, gather);
  if (gather && chunks.empty() && !self) gather->add({});  // nothing addressed below
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
    if (hop.members.empty()) throw DecodeError("a cast with no members");
    if (hop.members[0].member.actor.proc != local->id) {
      throw DecodeError("a cast for proc " + hop.members[0].member.actor.proc.name +
                        " arrived at " + local->id.name);
    }
    if (hop.mode == CastMode::stream && !hop.stream_to) throw DecodeError("stream with no port");
    for (const auto& m : hop.members) {
      if (m.rank < -1) throw DecodeError("bad rank in a cast");
      remember_address(m.member.actor.proc, m.member.address);
    }
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
  run_hop(local, env.sender, std::move(hop), args, true, std::move(done), link);
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

}  // namespace

void install_cast() {
  set_cast_handler(&on_cast);
}

bool cast_direct(std::size_t loc, std::size_t n) {
  const std::size_t k = std::min<std::size_t>(kCastFanOut, n);
  for (std::size_t i = 0; i < k; ++i) {
    if (i * n / k == loc) return true;
  }
  return false;
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
  hop.members.reserve(base.size());
  for (std::size_t loc = 0; loc < base.size(); ++loc) {
    hop.members.push_back({base[loc], request.rank_of[loc]});
  }
  const ActorId sender = current_sender(local.get());
  Done done = std::move(request.done);
  if (done) {
    // A forwarder can only say that a member behind it was lost with its link; the process
    // that started the member's proc knows whether it died, and how.
    auto rank_of = std::make_shared<const std::vector<std::int64_t>>(std::move(request.rank_of));
    done = [done = std::move(done), base = request.base, rank_of = std::move(rank_of),
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
      auto work = [done, base, rank_of, items = std::move(items),
                   lost = std::move(lost)]() mutable {
        attribute_lost(*base, items, lost, *rank_of);
        done(std::move(items));
      };
      if (auto proc = root.lock()) {
        proc->post_background(std::move(work));
      } else {
        work();
      }
    };
  }
  run_hop(local, sender, std::move(hop), request.args, false, std::move(done));
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
