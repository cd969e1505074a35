#include "net/wake_group.hpp"

#include <unistd.h>

#include <string>

#include "net/shm_ring.hpp"

namespace baton::net::internal {

WakeGroup::~WakeGroup() {
  ::close(fd);
}

void WakeGroup::ring() {
  const std::uint64_t one = 1;
  (void)::write(fd, &one, sizeof one);  // a count nobody reads: 2^64 writes before it is full
  rings.fetch_add(1, std::memory_order_relaxed);
}

std::shared_ptr<WakeGroup> WakeGroups::group() {
  const std::lock_guard lock(mu_);
  if (!tried_) {
    tried_ = true;
    std::string error;
    const int fd = shm::make_bell(error);
    if (fd >= 0) group_ = std::make_shared<WakeGroup>(fd);
  }
  return group_;
}

}  // namespace baton::net::internal
