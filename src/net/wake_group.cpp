#include "net/wake_group.hpp"

#include <sys/epoll.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
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

int open_group_watcher(int event, std::string& error) {
  if (!shm::is_eventfd(event)) {
    ::close(event);
    error = "the peer's wake group is not an eventfd";
    return -1;
  }
  const int watcher = ::epoll_create1(EPOLL_CLOEXEC);
  if (watcher < 0) {
    error = std::string("making an epoll for the peer's wake group: ") + std::strerror(errno);
    ::close(event);
    return -1;
  }
  // Edge-triggered: each write is one event, and the count, never read, stays where it is.
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLET;
  if (::epoll_ctl(watcher, EPOLL_CTL_ADD, event, &ev) != 0) {
    error = std::string("watching the peer's wake group: ") + std::strerror(errno);
    ::close(watcher);
    ::close(event);
    return -1;
  }
  // The registration holds the eventfd's file: this process needs no descriptor of its own.
  ::close(event);
  return watcher;
}

void take_group_wake_ups(int watcher) {
  epoll_event ev{};
  (void)::epoll_wait(watcher, &ev, 1, 0);  // one eventfd: at most one event, taken
}

}  // namespace baton::net::internal
