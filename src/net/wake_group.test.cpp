// Wake groups (wake_group.hpp): a thread that sends one message to several sleeping same-host
// peers wakes them all with one write of its event loop's group, each peer watching it, and
// rings each peer's own bell where a group would wake more peers in vain than on purpose; a
// peer that hands over something else as its group loses the link, which says why.

#include "net/wake_group.hpp"

#include <gtest/gtest.h>

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "baton/net/link.hpp"
#include "net/inbox.test.hpp"
#include "net/io_thread.hpp"
#include "net/link_impl.hpp"
#include "net/raw_shm.test.hpp"
#include "net/shm_ring.hpp"
#include "net/wake_ups.hpp"

namespace baton::net {
namespace {

using testing::control;
using testing::Inbox;
using testing::kDeadline;
using testing::make;

/// A listener and `kPeers` real diallers over shared memory, each with its own event loop.
struct Groups : ::testing::Test {
  static constexpr std::size_t kPeers = 3;

  /// No heartbeat within the test's deadline: a peer the group fails to wake stays asleep.
  static LinkOptions quiet() {
    LinkOptions o;
    o.heartbeat = std::chrono::minutes(2);
    o.dead_after = std::chrono::minutes(4);
    return o;
  }

  void SetUp() override {
    listener = Listener::listen(
        io, Address::parse("unix://" + path),
        [this](const std::shared_ptr<Link>& l) {
          std::lock_guard lock(mu);
          accepted.push_back(l);
          cv.notify_all();
          return server_in.handler();
        },
        quiet());
    for (std::size_t i = 0; i < kPeers; ++i) {
      peers.push_back(Link::connect(peer_io[i], listener->address(), in[i].handler(), quiet()));
      // The hello makes the accepted link; one message each way sees both switched.
      ASSERT_TRUE(peers.back()->send(make(100 + i)));
    }
    std::unique_lock lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, kDeadline, [&] { return accepted.size() == kPeers; }));
    lock.unlock();
    ASSERT_TRUE(server_in.wait_envelopes(kPeers));
    for (auto& l : accepted) links.push_back(std::dynamic_pointer_cast<internal::StreamLink>(l));
    // Each peer watches the group once its eventfd came after the switch.
    ASSERT_TRUE(eventually([&] {
      for (const auto& l : links) {
        if (l->transport() != "shm" || l->armed_group() == nullptr) return false;
      }
      return true;
    })) << "a peer never watched the wake group";
    group = links[0]->armed_group();
    for (const auto& l : links) ASSERT_EQ(l->armed_group(), group) << "one group per event loop";
  }

  /// Waits (bounded) for `done`, looking again as this thread yields: nothing here sleeps.
  template <class F>
  static bool eventually(F done) {
    const auto until = std::chrono::steady_clock::now() + kDeadline;
    while (!done()) {
      if (std::chrono::steady_clock::now() > until) return false;
      std::this_thread::yield();
    }
    return true;
  }
  bool all_asleep() const {
    for (const auto& l : links) {
      if (!l->peer_sleeps()) return false;
    }
    return true;
  }

  std::mutex mu;
  std::condition_variable cv;
  Inbox server_in;
  Inbox in[kPeers];
  // After the inboxes: the event loops stop before the inboxes their links report to go.
  IoThread io;
  IoThread peer_io[kPeers];
  std::string path = "/tmp/baton-test-groups-" + std::to_string(::getpid()) + ".sock";
  std::unique_ptr<Listener> listener;
  std::vector<std::shared_ptr<Link>> accepted;
  std::vector<std::shared_ptr<internal::StreamLink>> links;
  std::vector<std::shared_ptr<Link>> peers;
  internal::WakeGroup* group = nullptr;
};

TEST_F(Groups, OneWriteWakesEverySleepingPeerOfACast) {
  for (std::uint64_t round = 0; round < 20; ++round) {
    ASSERT_TRUE(eventually([&] { return all_asleep(); })) << "the peers never slept";
    const std::uint64_t rings = group->rings.load();
    {
      const HeldWakeUps held;
      for (const auto& l : links) ASSERT_TRUE(l->send(make(round, 10)));
    }
    // Every peer woke and read its message, though only the group was written.
    for (auto& i : in) ASSERT_TRUE(i.wait_envelopes(round + 1)) << "round " << round;
    EXPECT_EQ(group->rings.load(), rings + 1) << "round " << round;
  }
}

TEST_F(Groups, ASendToOnePeerRingsItsOwnBellNotTheGroup) {
  ASSERT_TRUE(eventually([&] { return all_asleep(); })) << "the peers never slept";
  const std::uint64_t rings = group->rings.load();
  {
    const HeldWakeUps held;
    ASSERT_TRUE(links[1]->send(make(7, 10)));
  }
  ASSERT_TRUE(in[1].wait_envelopes(1));
  EXPECT_EQ(group->rings.load(), rings);
  // Without a HeldWakeUps (a unicast), each peer is woken by its own bell.
  ASSERT_TRUE(eventually([&] { return all_asleep(); })) << "the peers never slept";
  for (const auto& l : links) ASSERT_TRUE(l->send(make(8, 10)));
  for (std::size_t i = 0; i < kPeers; ++i) ASSERT_TRUE(in[i].wait_envelopes(i == 1 ? 2 : 1));
  EXPECT_EQ(group->rings.load(), rings);
}

TEST_F(Groups, APeerThatLeavesIsNoLongerCountedInItsGroup) {
  EXPECT_EQ(group->links.load(), kPeers);
  peers[2]->close_and_wait("done");
  ASSERT_TRUE(eventually([&] { return group->links.load() == kPeers - 1; }))
      << "the group still counts a closed link";
  // The others still wake through it.
  ASSERT_TRUE(eventually([&] { return links[0]->peer_sleeps() && links[1]->peer_sleeps(); }));
  const std::uint64_t rings = group->rings.load();
  {
    const HeldWakeUps held;
    ASSERT_TRUE(links[0]->send(make(1, 10)));
    ASSERT_TRUE(links[1]->send(make(1, 10)));
  }
  ASSERT_TRUE(in[0].wait_envelopes(1));
  ASSERT_TRUE(in[1].wait_envelopes(1));
  EXPECT_EQ(group->rings.load(), rings + 1);
}

/// A listener written by hand: it answers a real dialler's offer with "taken, a wake group
/// follows" and then hands over a descriptor that is no eventfd (a pipe's end).
TEST(HostileGroups, APeerWhoseWakeGroupIsNoEventfdLosesItsLinkSayingWhy) {
  const std::string path = "/tmp/baton-test-groups-hostile-" + std::to_string(::getpid()) + ".sock";
  ::unlink(path.c_str());
  const int server = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(server, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  ASSERT_EQ(::bind(server, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::listen(server, 1), 0);

  Inbox in;
  IoThread io;
  auto link = Link::connect(io, Address::parse("unix://" + path), in.handler());
  ASSERT_TRUE(link->send(make(1)));  // the dialler writes its hello and offer first
  pollfd p{server, POLLIN, 0};
  ASSERT_EQ(::poll(&p, 1, static_cast<int>(std::chrono::milliseconds(kDeadline).count())), 1);
  const int conn = ::accept4(server, nullptr, nullptr, SOCK_CLOEXEC);
  ASSERT_GE(conn, 0);
  ASSERT_EQ(shm::send_all(conn, control("hello", 9) + control("shm-taken", 2), 1000), "");
  int pipe_ends[2];
  ASSERT_EQ(::pipe2(pipe_ends, O_CLOEXEC), 0);
  ASSERT_EQ(shm::send_fd(conn, pipe_ends[0], 1000, 'g'), "");

  const std::string why = in.wait_closed();
  EXPECT_NE(why.find("wake group is not an eventfd"), std::string::npos) << why;
  EXPECT_TRUE(link->closed());
  ::close(pipe_ends[0]);
  ::close(pipe_ends[1]);
  ::close(conn);
  ::close(server);
  ::unlink(path.c_str());
}

}  // namespace
}  // namespace baton::net
