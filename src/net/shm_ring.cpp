#include "net/shm_ring.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

namespace baton::net::shm {

namespace {

constexpr std::size_t kHeaderBytes = 64;
constexpr std::size_t kControlBytes = sizeof(RingControl);
constexpr int kSeals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;

std::size_t round_up(std::size_t n, std::size_t to) {
  return (n + to - 1) / to * to;
}

std::string errno_text(const char* what) {
  return std::string(what) + ": " + std::strerror(errno);
}

}  // namespace

std::size_t region_size(std::size_t capacity) {
  return round_up(kHeaderBytes + 2 * kControlBytes, 4096) + 2 * round_up(capacity, 4096);
}

RegionLayout layout(void* base, std::size_t capacity) {
  auto* p = static_cast<std::byte*>(base);
  RegionLayout l{};
  l.header = reinterpret_cast<RegionHeader*>(p);
  l.control[0] = reinterpret_cast<RingControl*>(p + kHeaderBytes);
  l.control[1] = reinterpret_cast<RingControl*>(p + kHeaderBytes + kControlBytes);
  std::byte* data = p + round_up(kHeaderBytes + 2 * kControlBytes, 4096);
  l.data[0] = data;
  l.data[1] = data + round_up(capacity, 4096);
  return l;
}

// --- the reading end -------------------------------------------------------------------------

std::size_t RingEnd::readable() {
  if (!corrupt_.empty()) return 0;
  const std::uint64_t head = control_->head.load(std::memory_order_acquire);
  const std::uint64_t ready = head - mine_;
  if (head < mine_ || ready > capacity_) {
    corrupt_ = "the peer's write position (" + std::to_string(head) +
               ") is impossible for this ring (read up to " + std::to_string(mine_) +
               ", capacity " + std::to_string(capacity_) + ")";
    return 0;
  }
  known_ = head;
  return static_cast<std::size_t>(ready);
}

std::size_t RingEnd::ready(std::size_t want) {
  if (!corrupt_.empty()) return 0;
  const auto known = static_cast<std::size_t>(known_ - mine_);
  return known >= want ? known : readable();
}

std::size_t RingEnd::read(void* to, std::size_t n) {
  n = std::min(n, ready(n));
  if (n == 0) return 0;
  const std::size_t at = static_cast<std::size_t>(mine_ % capacity_);
  const std::size_t first = std::min(n, capacity_ - at);
  auto* out = static_cast<std::byte*>(to);
  std::memcpy(out, data_ + at, first);
  std::memcpy(out + first, data_, n - first);
  mine_ += n;
  control_->tail.store(mine_, std::memory_order_seq_cst);
  return n;
}

std::uint32_t asleep_here() {
  const int cpu = ::sched_getcpu();
  return cpu >= 0 ? static_cast<std::uint32_t>(cpu) + 1 : 1;
}

bool RingEnd::sleep_if_empty() {
  control_->reader_sleeps.store(asleep_here(), std::memory_order_seq_cst);
  if (readable() == 0 && corrupt_.empty()) return true;
  // Bytes came (or the ring broke) meanwhile: no sleep. A writer that saw the flag rings anyway:
  // one wake-up that finds nothing to do.
  control_->reader_sleeps.store(0, std::memory_order_relaxed);
  return false;
}

bool RingEnd::writer_wants_waking() {
  if (control_->writer_waits.load(std::memory_order_seq_cst) == 0) return false;
  // Once half the ring is free, not at every read: woken at once, a writer that outruns its
  // reader would write one frame per wake-up, and each side pay a system call per frame.
  if (readable() > capacity_ / 2) return false;
  return control_->writer_waits.exchange(0, std::memory_order_seq_cst) != 0;
}

// --- the writing end -------------------------------------------------------------------------

std::size_t RingEnd::writable() {
  if (!corrupt_.empty()) return 0;
  const std::uint64_t tail = control_->tail.load(std::memory_order_acquire);
  const std::uint64_t used = mine_ - tail;
  if (tail > mine_ || used > capacity_) {
    corrupt_ = "the peer's read position (" + std::to_string(tail) +
               ") is impossible for this ring (written up to " + std::to_string(mine_) +
               ", capacity " + std::to_string(capacity_) + ")";
    return 0;
  }
  known_ = tail;
  return capacity_ - static_cast<std::size_t>(used);
}

std::size_t RingEnd::room(std::size_t want) {
  if (!corrupt_.empty()) return 0;
  const std::size_t known = capacity_ - static_cast<std::size_t>(mine_ - known_);
  return known >= want ? known : writable();
}

std::size_t RingEnd::write(const void* from, std::size_t n) {
  n = std::min(n, room(n));
  if (n == 0) return 0;
  const std::size_t at = static_cast<std::size_t>(mine_ % capacity_);
  const std::size_t first = std::min(n, capacity_ - at);
  const auto* in = static_cast<const std::byte*>(from);
  std::memcpy(data_ + at, in, first);
  std::memcpy(data_, in + first, n - first);
  mine_ += n;
  control_->head.store(mine_, std::memory_order_seq_cst);
  return n;
}

bool RingEnd::wait_if_full() {
  control_->writer_waits.store(1, std::memory_order_seq_cst);
  if (writable() == 0 && corrupt_.empty()) return true;
  control_->writer_waits.store(0, std::memory_order_relaxed);
  return false;
}

std::uint32_t RingEnd::reader_wants_waking() {
  if (control_->reader_sleeps.load(std::memory_order_seq_cst) == 0) return 0;
  return control_->reader_sleeps.exchange(0, std::memory_order_seq_cst);
}

// --- regions ---------------------------------------------------------------------------------

Region::Region(Region&& o) noexcept
    : fd(std::exchange(o.fd, -1)),
      base(std::exchange(o.base, nullptr)),
      size(o.size),
      capacity(o.capacity) {}

Region& Region::operator=(Region&& o) noexcept {
  if (this != &o) {
    this->~Region();
    new (this) Region(std::move(o));
  }
  return *this;
}

Region::~Region() {
  if (base != nullptr) ::munmap(base, size);
  if (fd >= 0) ::close(fd);
}

void Region::close_fd() {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

Region Region::create(std::size_t capacity) {
  Region r;
  r.capacity = capacity;
  r.size = region_size(capacity);
  r.fd = ::memfd_create("baton-link", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (r.fd < 0) throw std::system_error(errno, std::generic_category(), "memfd_create");
  if (::ftruncate(r.fd, static_cast<off_t>(r.size)) != 0) {
    throw std::system_error(errno, std::generic_category(), "ftruncate of the link's memfd");
  }
  // Its size is fixed for good: neither side can shrink it under the other's mapping (a
  // process that touches a page past the end of a file it mapped gets SIGBUS).
  if (::fcntl(r.fd, F_ADD_SEALS, kSeals) != 0) {
    throw std::system_error(errno, std::generic_category(), "sealing the link's memfd");
  }
  r.base = ::mmap(nullptr, r.size, PROT_READ | PROT_WRITE, MAP_SHARED, r.fd, 0);
  if (r.base == MAP_FAILED) {
    r.base = nullptr;
    throw std::system_error(errno, std::generic_category(), "mmap of the link's memfd");
  }
  RegionLayout l = layout(r.base, capacity);  // a fresh memfd reads as zeros: rings empty
  l.header->magic = kMagic;
  l.header->version = kVersion;
  l.header->capacity = capacity;
  return r;
}

std::string Region::map(int fd, Region& out) {
  Region r;
  r.fd = fd;
  // Mapped only if its size is sealed: a peer that shrank it later would crash us (SIGBUS).
  const int seals = ::fcntl(fd, F_GET_SEALS);
  if (seals < 0 || (seals & kSeals) != kSeals) {
    return "the offered memfd's size is not sealed (F_SEAL_SHRINK, F_SEAL_GROW, F_SEAL_SEAL)";
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) return errno_text("fstat of the offered memfd");
  const auto size = static_cast<std::size_t>(st.st_size);
  if (size < region_size(0) || size > region_size(std::size_t{1} << 30)) {
    return "the offered memfd has an unusable size (" + std::to_string(size) + " bytes)";
  }
  r.base = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (r.base == MAP_FAILED) {
    r.base = nullptr;
    return errno_text("mmap of the offered memfd");
  }
  r.size = size;
  // Read once: the header is the peer's, and only what is checked here is used.
  RegionHeader header{};
  std::memcpy(&header, r.base, sizeof header);
  if (header.magic != kMagic || header.version != kVersion) {
    return "the offered memfd is not a baton link region of version " + std::to_string(kVersion);
  }
  if (header.capacity == 0 || header.capacity > (std::size_t{1} << 30) ||
      region_size(header.capacity) != size) {
    return "the offered memfd's ring capacity (" + std::to_string(header.capacity) +
           ") does not match its size (" + std::to_string(size) + ")";
  }
  r.capacity = static_cast<std::size_t>(header.capacity);
  ::close(r.fd);  // the mapping keeps the memory: no descriptor held per link
  r.fd = -1;
  out = std::move(r);
  return {};
}

// --- passing the descriptor ------------------------------------------------------------------

namespace {

/// After a send that took nothing: true to try again (interrupted, or room came within
/// `timeout_ms`); false with errno saying why not (ETIMEDOUT when no room came).
bool wait_for_room(int sock, int timeout_ms) {
  if (errno == EINTR) return true;
  if (errno != EAGAIN && errno != EWOULDBLOCK) return false;
  pollfd p{sock, POLLOUT, 0};
  if (::poll(&p, 1, timeout_ms) > 0) return true;
  errno = ETIMEDOUT;
  return false;
}

/// Appends the descriptors a received message carried to `fds`.
void collect_fds(msghdr& msg, std::vector<int>& fds) {
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const std::size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (std::size_t i = 0; i < count; ++i) {
      int fd = -1;
      std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
      fds.push_back(fd);
    }
  }
}

}  // namespace

std::string send_fds(int sock, const std::vector<int>& fds, int timeout_ms, char tag) {
  constexpr std::size_t kMost = 4;
  if (fds.empty() || fds.size() > kMost)
    return "cannot send " + std::to_string(fds.size()) + " fds";
  char byte = tag;
  iovec iov{&byte, 1};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMost)] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
  std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
  for (;;) {
    if (::sendmsg(sock, &msg, MSG_DONTWAIT | MSG_NOSIGNAL) == 1) return {};
    if (!wait_for_room(sock, timeout_ms)) return errno_text("sending a memfd");
  }
}

int make_bell(std::string& error) {
  const int fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (fd < 0) error = errno_text("making an eventfd");
  return fd;
}

bool is_eventfd(int fd) {
  char target[64] = {};
  const std::string link = "/proc/self/fd/" + std::to_string(fd);
  const ssize_t n = ::readlink(link.c_str(), target, sizeof(target) - 1);
  return n > 0 && std::string_view(target, static_cast<std::size_t>(n)) == "anon_inode:[eventfd]";
}

std::string send_all(int sock, std::string_view bytes, int timeout_ms) {
  while (!bytes.empty()) {
    const ssize_t n = ::send(sock, bytes.data(), bytes.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n > 0) {
      bytes.remove_prefix(static_cast<std::size_t>(n));
    } else if (!wait_for_room(sock, timeout_ms)) {
      return errno_text("sending the offer");
    }
  }
  return {};
}

Offered receive_offer(int sock, std::string& error) {
  char byte = 0;
  iovec iov{&byte, 1};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 4)] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  ssize_t n = 0;
  do {
    n = ::recvmsg(sock, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  if (n < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK) return {};
    error = errno_text("receiving the memfd");
    return {};
  }
  if (n == 0) {
    error = "the peer closed the connection before it sent the memfd it offered";
    return {};
  }
  std::vector<int> fds;
  collect_fds(msg, fds);
  if (byte != 'm' || fds.size() != 3 || (msg.msg_flags & MSG_CTRUNC) != 0) {
    error =
        "the peer offered a shared-memory link but did not send its memfd and two eventfds "
        "after it";
  } else if (!is_eventfd(fds[1]) || !is_eventfd(fds[2])) {
    error = "the peer offered a shared-memory link with wake-up descriptors that are not eventfds";
  }
  if (!error.empty()) {
    for (const int fd : fds) ::close(fd);
    return {};
  }
  return Offered{fds[0], fds[1], fds[2]};
}

Drained drain(int sock, std::deque<int>& fds) {
  Drained d;
  for (;;) {
    char bytes[256];
    iovec iov{bytes, sizeof bytes};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 8)] = {};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    const ssize_t n = ::recvmsg(sock, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return d;
    if (n <= 0) {
      d.eof = true;
      return d;
    }
    std::vector<int> got;
    collect_fds(msg, got);
    fds.insert(fds.end(), got.begin(), got.end());
    if ((msg.msg_flags & MSG_CTRUNC) != 0) {
      d.error = "the peer sent more descriptors in one message than a slab takes";
      return d;
    }
    // A short read with no descriptor took all there was: a unix stream socket's read stops
    // short only at the end of its queue or after a message that carried descriptors. What
    // comes after it is seen by the wait that follows (re-armed, it looks at the socket anew),
    // so the read that would only say EAGAIN is not made.
    if (got.empty() && static_cast<std::size_t>(n) < sizeof bytes) return d;
  }
}

}  // namespace baton::net::shm
