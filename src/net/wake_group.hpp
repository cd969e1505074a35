#pragma once

// Internal: one wake-up for many same-host peers (a cast's members).
//
// Each link wakes its sleeping peer through an eventfd of its own, one write per peer. A cast
// that reaches N sleeping members would pay N writes, and on a small machine a write that wakes
// a peer costs the waker several microseconds. So each event loop that accepts same-host links
// also hands each of its peers one more eventfd, the same for all of them: its wake group. A
// peer watches it edge-triggered, in its event loop's epoll (edge_watch.hpp), never reading it
// (a read by one member would take the wake-up from the others), and says in the ring that it
// does (RingControl::group_armed). A thread that sends a cast holds the wake-ups it owes
// (wake_ups.hpp) and, where at least two of them go to one group, writes the group's eventfd
// once instead: the kernel wakes every watcher in that one write.
//
// A group's write also wakes its other sleeping peers, which find nothing and sleep again; it is
// used only where they are fewer than the peers the cast wakes.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>

#include "net/asio.hpp"

namespace baton::net::internal {

/// One event loop's wake group: its eventfd and the links that handed it to their peer.
struct WakeGroup {
  explicit WakeGroup(int event) : fd(event) {}
  ~WakeGroup();
  WakeGroup(const WakeGroup&) = delete;
  WakeGroup& operator=(const WakeGroup&) = delete;
  /// Wakes every peer that watches it (one write).
  void ring();

  const int fd;
  std::atomic<std::size_t> links{0};  // links whose peer was handed the group
  std::atomic<std::uint64_t> rings{0};
};

/// The wake group of an io_context (an Asio service): made at the first link that needs it.
class WakeGroups : public asio::execution_context::service {
 public:
  using key_type = WakeGroups;
  static inline asio::execution_context::id id;
  explicit WakeGroups(asio::execution_context& ctx) : service(ctx) {}
  /// The group, or null when no eventfd could be made (the links then wake peers one by one).
  std::shared_ptr<WakeGroup> group();

 private:
  void shutdown() override {}
  std::mutex mu_;
  std::shared_ptr<WakeGroup> group_;
  bool tried_ = false;
};

}  // namespace baton::net::internal
