// Replies on their way up the cast tree: what is lost, and how reducers fold.

#include <algorithm>

#include "actor/failures.hpp"
#include "actor/replies.hpp"
#include "mesh/cast_impl.hpp"
#include "net/io_thread.hpp"

namespace baton::detail {
namespace cast_impl {
namespace {

struct Reducers {
  std::mutex mu;
  std::unordered_map<std::uint64_t, ReduceFn> by_id;
};
Reducers& reducers() {
  static Reducers r;
  return r;
}

}  // namespace

void run_off_reads(ProcState& local, std::function<void()> f) {
  if (!net::on_io_thread()) return f();
  net::IoThread* io = net::inline_io_thread();
  if (io != nullptr && io == local.io.get()) return net::run_after_handler(*io, std::move(f));
  local.post_background(std::move(f));
}

Body undeliverable_reply(const std::string& why) {
  return failure_reply(
      std::make_exception_ptr(UndeliverableError(UndeliverableError::Reason::link_lost, why)));
}

std::vector<CastItem> failures(const ViewIndex& view, const CastChild& child,
                               const std::string& why, std::optional<std::string> died) {
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

void attribute_lost(const std::vector<CastMember>& base, const Slice& view,
                    std::vector<CastItem>& items, const std::vector<std::size_t>& lost,
                    LostSince since) {
  for (std::size_t i : lost) {
    if (items[i].rank >= view.len()) continue;
    const std::size_t loc = view.location_of_rank(items[i].rank);
    if (loc >= base.size()) continue;
    if (auto died = await_proc_failure(base[loc].actor.proc, since)) {
      items[i].reply = failure_reply(std::make_exception_ptr(SupervisionError(*died)));
    }
  }
}

std::vector<CastItem> fold(std::uint64_t reducer, const std::string& state,
                           std::vector<CastItem> items) {
  if (items.size() <= 1) return items;
  std::sort(items.begin(), items.end(),
            [](const CastItem& a, const CastItem& b) { return a.rank < b.rank; });
  for (auto& it : items) {
    if (!reply_holds_value(it.reply)) return {std::move(it)};
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
  } catch (const std::exception& e) {
    // The caller's reducer threw (the caller's code, as an endpoint is the actor's): it fails
    // the reduce as an ActorError, with the reducer's message, whichever node folded.
    return {{items[0].rank, failure_reply(std::make_exception_ptr(
                                ActorError("the reducer of this cast", "fold", e.what())))}};
  } catch (...) {
    return {{items[0].rank, failure_reply(std::current_exception())}};
  }
}

}  // namespace cast_impl

std::uint64_t register_reducer(std::string_view key, ReduceFn fn) {
  const std::uint64_t id = fnv1a(key);
  auto& r = cast_impl::reducers();
  std::lock_guard lock(r.mu);
  r.by_id.emplace(id, fn);
  return id;
}

}  // namespace baton::detail
