#pragma once

// For tests: a dialler of a shared-memory link written by hand (hello, offer, the memfd and the
// wake-up eventfds as SCM_RIGHTS), whose ring and wake-ups the test drives itself.

#include <poll.h>
#include <unistd.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "baton/wire/envelope.hpp"
#include "net/inbox.test.hpp"
#include "net/shm_ring.hpp"

namespace baton::net::testing {

/// A link's control frame, as a dialler writes it on the socket.
inline std::string control(const std::string& kind, std::uint64_t a, std::uint64_t b = 0) {
  Envelope env;
  env.sender = ActorId{ProcId{"link"}, "link", 0};
  env.dest = PortId{env.sender, 0};
  env.headers.emplace_back("baton.link", kind);
  env.body = encode(a, b);
  return encode_frame(env).flatten();
}

/// A dialler written by hand: it offers shared memory as a real one does, then writes into its
/// ring (the one the listener reads) whatever the test says.
struct RawShmClient {
  explicit RawShmClient(const std::string& path)
      : raw(path), region(shm::Region::create(std::size_t{64} << 10)) {
    const shm::RegionLayout l = shm::layout(region.base, region.capacity);
    control_to_listener = l.control[0];
    control_to_dialler = l.control[1];
    out = shm::RingEnd(l.control[0], l.data[0], region.capacity);
    raw.write(control("hello", 7) + control("shm", 1));
    std::string error;
    own_bell = shm::make_bell(error);
    listener_bell = shm::make_bell(error);
    if (error.empty()) error = shm::send_fds(raw.fd(), {region.fd, own_bell, listener_bell}, 1000);
    if (!error.empty()) throw std::runtime_error(error);
  }
  ~RawShmClient() {
    ::close(own_bell);
    ::close(listener_bell);
  }
  RawShmClient(const RawShmClient&) = delete;
  RawShmClient& operator=(const RawShmClient&) = delete;
  /// Whether the listener rang this client's wake-up (and takes it, if so).
  bool woken() {
    pollfd p{own_bell, POLLIN, 0};
    if (::poll(&p, 1, 0) != 1) return false;
    std::uint64_t count = 0;
    return ::read(own_bell, &count, sizeof count) == sizeof count;
  }
  void write(const std::string& bytes) {
    std::size_t done = 0;
    while (done < bytes.size()) {
      const std::size_t n = out.write(bytes.data() + done, bytes.size() - done);
      if (n == 0) throw std::runtime_error("the ring stayed full");
      done += n;
    }
    ring();
  }
  void ring() {
    const std::uint64_t one = 1;
    if (::write(listener_bell, &one, sizeof one) != sizeof one) throw std::runtime_error("ring");
  }

  RawClient raw;
  shm::Region region;
  shm::RingControl* control_to_listener = nullptr;
  shm::RingControl* control_to_dialler = nullptr;  // the listener's writes, which nothing reads
  shm::RingEnd out;
  int own_bell = -1;       // the listener rings it
  int listener_bell = -1;  // this client rings it
};

}  // namespace baton::net::testing
