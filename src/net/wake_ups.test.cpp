// Wake-ups held back while a thread sends to many same-host peers (wake_ups.hpp): a hand-made
// dialler says where its reader sleeps, and the test sees in its eventfd when it is woken.

#include "net/wake_ups.hpp"

#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "baton/net/link.hpp"
#include "net/inbox.test.hpp"
#include "net/io_thread.hpp"
#include "net/raw_shm.test.hpp"
#include "net/shm_ring.hpp"

namespace baton::net {
namespace {

using testing::Inbox;
using testing::kDeadline;
using testing::make;
using testing::RawShmClient;

/// Keeps the calling thread on the core it runs on, so that "this core" stays one core.
class Pinned {
 public:
  Pinned() {
    ::pthread_getaffinity_np(::pthread_self(), sizeof before_, &before_);
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(::sched_getcpu(), &one);
    pinned_ = ::pthread_setaffinity_np(::pthread_self(), sizeof one, &one) == 0;
  }
  ~Pinned() { ::pthread_setaffinity_np(::pthread_self(), sizeof before_, &before_); }
  Pinned(const Pinned&) = delete;
  Pinned& operator=(const Pinned&) = delete;
  bool ok() const { return pinned_; }

 private:
  cpu_set_t before_{};
  bool pinned_ = false;
};

/// A listener whose accepted link writes into a hand-made dialler's ring, over shared memory.
struct Wakes : ::testing::Test {
  explicit Wakes(LinkOptions options = {}) : options_(std::move(options)) {}
  void SetUp() override {
    listener = Listener::listen(
        io, Address::parse("unix://" + path),
        [this](const std::shared_ptr<Link>& l) {
          std::lock_guard lock(mu);
          link = l;
          cv.notify_all();
          return in.handler();
        },
        options_);
    raw = std::make_unique<RawShmClient>(path);
    std::unique_lock lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, kDeadline, [&] { return link != nullptr; }));
    // The listener writes into the ring once it has said so on the socket.
    const auto until = std::chrono::steady_clock::now() + kDeadline;
    while (link->transport() != "shm") {
      ASSERT_LT(std::chrono::steady_clock::now(), until) << "the link never switched";
      lock.unlock();
      std::this_thread::yield();
      lock.lock();
    }
    (void)raw->woken();  // whatever the switch rang
  }
  /// The dialler's reader says it sleeps on `core`.
  void asleep_on(std::uint32_t core) const {
    raw->control_to_dialler->reader_sleeps.store(core + 1);
  }
  /// Waits until a send writes the ring from the sending thread, which only a send made while
  /// the link's writer is idle does (just after the switch it may still be finishing): only
  /// such a write holds its wake-up. The probes go to an awake reader, so they ring nothing.
  bool writes_directly() const {
    raw->control_to_dialler->reader_sleeps.store(0);
    const auto until = std::chrono::steady_clock::now() + kDeadline;
    for (std::uint64_t i = 1000; std::chrono::steady_clock::now() < until; ++i) {
      const std::uint64_t head = raw->control_to_dialler->head.load();
      if (!link->send(make(i, 1))) return false;
      if (raw->control_to_dialler->head.load() != head) return true;
      std::this_thread::yield();  // its writer writes it: the next may go directly
    }
    return false;
  }

  LinkOptions options_;
  std::mutex mu;
  std::condition_variable cv;
  Inbox in;
  IoThread io;
  std::string path = "/tmp/baton-test-wakes-" + std::to_string(::getpid()) + ".sock";
  std::unique_ptr<Listener> listener;
  std::shared_ptr<Link> link;
  std::unique_ptr<RawShmClient> raw;
};

TEST_F(Wakes, APeerAsleepOnThisCoreIsWokenOnlyOnceTheSendsAreDone) {
  const Pinned pinned;
  ASSERT_TRUE(pinned.ok());
  ASSERT_TRUE(writes_directly()) << "no send wrote the ring itself";
  asleep_on(static_cast<std::uint32_t>(::sched_getcpu()));
  {
    const HeldWakeUps held;
    ASSERT_TRUE(link->send(make(0, 10)));
    EXPECT_FALSE(raw->woken()) << "woken before the sends were done";
  }
  EXPECT_TRUE(raw->woken()) << "never woken";
  // Without a scope, the same peer is woken at once.
  asleep_on(static_cast<std::uint32_t>(::sched_getcpu()));
  ASSERT_TRUE(link->send(make(1, 10)));
  EXPECT_TRUE(raw->woken());
}

TEST_F(Wakes, APeerAsleepOnAnotherCoreIsWokenAtOnce) {
  const Pinned pinned;
  ASSERT_TRUE(pinned.ok());
  ASSERT_TRUE(writes_directly()) << "no send wrote the ring itself";
  const auto here = static_cast<std::uint32_t>(::sched_getcpu());
  const HeldWakeUps held;
  // Another core, and values a hostile peer could write: each is only a hint.
  for (const std::uint32_t core : {here + 1, std::uint32_t{0xfffffffe}, std::uint32_t{4096}}) {
    asleep_on(core);
    ASSERT_TRUE(link->send(make(core, 10)));
    EXPECT_TRUE(raw->woken()) << "a peer asleep on core " << core << " waited";
  }
}

/// The link holds little: a send soon waits for room, which the peer never makes.
struct WakesFull : Wakes {
  static LinkOptions small() {
    LinkOptions o;
    o.max_queued_bytes = std::size_t{16} << 10;
    o.send_timeout = std::chrono::milliseconds(200);
    return o;
  }
  WakesFull() : Wakes(small()) {}
};

TEST_F(WakesFull, HeldWakeUpsAreRungBeforeASendWaitsForRoom) {
  const Pinned pinned;
  ASSERT_TRUE(pinned.ok());
  ASSERT_TRUE(writes_directly()) << "no send wrote the ring itself";
  asleep_on(static_cast<std::uint32_t>(::sched_getcpu()));
  const HeldWakeUps held;
  ASSERT_TRUE(link->send(make(0, 10)));
  ASSERT_FALSE(raw->woken());
  // The peer never reads: its ring fills, then the link's queue, then a send waits. A peer
  // whose wake-up is held may be what it waits for, so the wake-up goes first.
  bool full = false;
  for (std::uint64_t i = 1; i < 200 && !full; ++i) {
    try {
      (void)link->send(make(i, 8 << 10));
    } catch (const LinkFullError&) {
      full = true;
    }
  }
  ASSERT_TRUE(full) << "the link never filled";
  EXPECT_TRUE(raw->woken()) << "the held wake-up waited while the send waited for room";
}

}  // namespace
}  // namespace baton::net
