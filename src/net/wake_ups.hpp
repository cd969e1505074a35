#pragma once

// Internal: wake-ups held back while a thread sends one message to many same-host peers.
//
// A peer whose reader sleeps is woken with a write to its eventfd, and on a small machine a
// wake-up costs the waker several microseconds, more when the peer's core is halted and must be
// interrupted (tens of microseconds before the peer runs). A cast sends to every member in turn:
// a member asleep on the sender's own core cannot run before the sender stops anyway, so its
// wake-up waits until the cast is sent, and the members asleep on other cores, rung at once,
// start waking meanwhile. (The reader says which core it went to sleep on, in the ring: a hint
// for the order of wake-ups and nothing else, which a hostile peer can only make worse for
// itself.)

#include <memory>
#include <vector>

namespace baton::net {
namespace internal {
class StreamLink;
/// The wake-ups this thread holds back (of the innermost HeldWakeUps), or null.
extern thread_local std::vector<std::shared_ptr<StreamLink>>* held_wake_ups;
/// Rings this thread's held wake-ups now: it is about to wait (for room on a full link, or for
/// a reply), or to run an actor, and a peer it has not woken may be what that waits for.
void ring_held_wake_ups();
/// Rings `held` and empties it: one write for each wake group that at least two of them go to
/// (wake_group.hpp), where that wakes fewer peers in vain than it wakes on purpose; each other
/// link's own bell.
void ring_all(std::vector<std::shared_ptr<StreamLink>>& held);
}  // namespace internal

/// While one lives, wake-ups that this thread's sends owe to same-host peers asleep on this
/// thread's core, or watching a wake group, are held back; they are rung when it goes.
class HeldWakeUps {
 public:
  HeldWakeUps();
  ~HeldWakeUps();
  HeldWakeUps(const HeldWakeUps&) = delete;
  HeldWakeUps& operator=(const HeldWakeUps&) = delete;

 private:
  std::vector<std::shared_ptr<internal::StreamLink>> held_;
  std::vector<std::shared_ptr<internal::StreamLink>>* outer_;
};

}  // namespace baton::net
