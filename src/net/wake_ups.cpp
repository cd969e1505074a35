// Wake-ups held back while a cast is sent (wake_ups.hpp), and rung once it is: through a wake
// group where one write wakes several of them (wake_group.hpp), else each link's own bell.

#include <algorithm>
#include <cstddef>
#include <utility>

#include "net/link_impl.hpp"

namespace baton::net {
namespace internal {

thread_local std::vector<std::shared_ptr<StreamLink>>* held_wake_ups = nullptr;

WakeGroup* StreamLink::armed_group() const {
  if (!shm_ || !shm_->group) return nullptr;
  if (shm_->out.control()->group_armed.load(std::memory_order_acquire) == 0) return nullptr;
  return shm_->group.get();
}

bool StreamLink::peer_sleeps() const {
  return shm_ && shm_->out.control()->reader_sleeps.load(std::memory_order_acquire) != 0;
}

void ring_all(std::vector<std::shared_ptr<StreamLink>>& held) {
  // Each held link's group, read once (a peer may arm its group meanwhile: that link is rung
  // by its bell), and how many of the wake-ups each group could carry. A cast reaches few
  // groups: one per event loop of this process that accepted its members' links.
  struct Carried {
    WakeGroup* group;
    std::size_t wake_ups;
    bool rung;
  };
  std::vector<Carried> groups;
  std::vector<WakeGroup*> group_of(held.size());
  const auto carried = [&groups](WakeGroup* g) {
    return std::find_if(groups.begin(), groups.end(),
                        [g](const Carried& c) { return c.group == g; });
  };
  for (std::size_t i = 0; i < held.size(); ++i) {
    WakeGroup* g = group_of[i] = held[i]->armed_group();
    if (g == nullptr) continue;
    if (const auto at = carried(g); at != groups.end()) {
      ++at->wake_ups;
    } else {
      groups.push_back({g, 1, false});
    }
  }
  // A group is worth its write for two wake-ups or more, where no more of its other peers than
  // those (each of which wakes in vain if it sleeps).
  for (Carried& c : groups) {
    c.rung = c.wake_ups >= 2 && c.group->links.load(std::memory_order_relaxed) <= 2 * c.wake_ups;
    if (c.rung) c.group->ring();
  }
  for (std::size_t i = 0; i < held.size(); ++i) {
    if (group_of[i] == nullptr || !carried(group_of[i])->rung) held[i]->ring_bell();
  }
  held.clear();
}

void ring_held_wake_ups() {
  if (held_wake_ups == nullptr) return;
  auto held = std::exchange(*held_wake_ups, {});
  ring_all(held);
}

}  // namespace internal

HeldWakeUps::HeldWakeUps() : outer_(std::exchange(internal::held_wake_ups, &held_)) {}

HeldWakeUps::~HeldWakeUps() {
  internal::held_wake_ups = outer_;
  internal::ring_all(held_);
}

}  // namespace baton::net
