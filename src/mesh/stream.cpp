// Streamed replies, queued for the caller as they arrive; and the host layer's shutdown hook.

#include <utility>

#include "actor/directory.hpp"
#include "actor/node.hpp"
#include "actor/replies.hpp"
#include "mesh/cast_impl.hpp"

namespace baton::detail {

void StreamQueue::push(CastItem item) {
  std::function<void()> wake;
  {
    std::lock_guard lock(mu_);
    q_.push_back(std::move(item));
    wake = wake_;  // it stays until its waiter is done
  }
  cv_.notify_one();
  if (wake) wake();
}

std::optional<CastItem> StreamQueue::pop(
    std::optional<std::chrono::steady_clock::time_point> deadline) {
  std::unique_lock lock(mu_);
  const std::shared_ptr<void> route = route_.lock();
  if (!wait_for_value(
          lock, cv_, wake_, route, [&] { return head_ < q_.size(); },
          deadline ? &*deadline : nullptr)) {
    return std::nullopt;
  }
  return std::move(q_[head_++]);
}

void StreamQueue::set_route(std::weak_ptr<void> route) {
  std::lock_guard lock(mu_);
  route_ = std::move(route);
}

namespace {

/// A stream's port: its items go to the queue, a member lost with a link attributed first.
class StreamPort final : public PortSink {
 public:
  StreamPort(std::shared_ptr<StreamQueue> q, std::shared_ptr<const std::vector<CastMember>> base,
             Slice view, std::weak_ptr<ProcState> proc)
      : q_(std::move(q)), base_(std::move(base)), view_(std::move(view)), proc_(std::move(proc)) {}

  bool deliver(const Body& body) override {
    auto item = decode<CastItem>(body);
    if (!reply_is_link_lost(item.reply)) {
      q_->push(std::move(item));
      return true;
    }
    // Waiting for an exit may take a moment: not on the I/O thread that brought the item.
    auto work = [q = q_, base = base_, view = view_, item = std::move(item),
                 since = std::chrono::steady_clock::now()]() mutable {
      std::vector<CastItem> items{std::move(item)};
      cast_impl::attribute_lost(*base, view, items, {0}, since);
      q->push(std::move(items[0]));
    };
    if (auto proc = proc_.lock()) {
      proc->post_background(std::move(work));
    } else {
      work();
    }
    return true;
  }

 private:
  std::shared_ptr<StreamQueue> q_;
  std::shared_ptr<const std::vector<CastMember>> base_;
  Slice view_;
  std::weak_ptr<ProcState> proc_;
};

}  // namespace

PortId open_stream_port(std::shared_ptr<const std::vector<CastMember>> base, const Slice& view,
                        std::shared_ptr<StreamQueue> q) {
  auto local = cast_impl::root_proc(*base);
  if (!local) throw UsageError("stream(): no proc in this process to receive the replies");
  q->set_route(local);
  auto port = std::make_shared<StreamPort>(std::move(q), std::move(base), view, local);
  std::lock_guard lock(local->mu);
  const std::uint64_t n = local->next_port++;
  local->ports.emplace(n, std::move(port));
  return PortId{local->client, n};
}

void close_stream_port(const PortId& id) {
  if (auto p = find_proc(id.actor.proc)) {
    std::lock_guard lock(p->mu);
    p->ports.erase(id.port);
    p->abandoned_ports.push_back(id.port);
    if (p->abandoned_ports.size() > ProcState::kAbandonedPorts) p->abandoned_ports.pop_front();
  }
}

}  // namespace baton::detail
