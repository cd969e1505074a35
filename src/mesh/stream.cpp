// Streamed replies, queued for the caller as they arrive; and the host layer's shutdown hook.

#include "mesh/cast_impl.hpp"

namespace baton::detail {

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
  auto local = cast_impl::root_proc(base);
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
// The node's: set by the runtime of this process.
std::shared_ptr<ShutdownHook> shutdown_hook() {
  auto node = node_here();
  return node ? node->extension<ShutdownHook>() : std::make_shared<ShutdownHook>();
}
}  // namespace

void set_shutdown_hook(std::function<void()> hook) {
  auto h = shutdown_hook();
  std::lock_guard lock(h->mu);
  h->hook = std::move(hook);
}

void run_shutdown_hook() {
  std::function<void()> hook;
  {
    auto h = shutdown_hook();
    std::lock_guard lock(h->mu);
    hook = h->hook;
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
