// Links over real sockets: unix and tcp on loopback, with a raw socket client for hostile bytes.
// Waits are on conditions with a generous deadline (a failure, never a sleep).

#include "baton/net/link.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <random>
#include <thread>

namespace baton::net {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;

constexpr auto kDeadline = 20s;

/// Envelopes and close reasons, collected from the I/O thread.
struct Inbox {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Envelope> envelopes;
  std::vector<std::string> closed;

  LinkHandler handler(const std::function<void(Envelope&)>& also = nullptr) {
    return LinkHandler{[this, also](Envelope env) {
                         if (also) also(env);
                         std::lock_guard lock(mu);
                         envelopes.push_back(std::move(env));
                         cv.notify_all();
                       },
                       [this](const std::string& reason) {
                         std::lock_guard lock(mu);
                         closed.push_back(reason);
                         cv.notify_all();
                       }};
  }
  bool wait_envelopes(std::size_t n) {
    std::unique_lock lock(mu);
    return cv.wait_for(lock, kDeadline, [&] { return envelopes.size() >= n; });
  }
  std::string wait_closed() {
    std::unique_lock lock(mu);
    if (!cv.wait_for(lock, kDeadline, [&] { return !closed.empty(); })) return "never closed";
    return closed.front();
  }
};

Envelope make(std::uint64_t i, std::size_t part) {
  Envelope env;
  env.sender = ActorId::parse("ctl/client[0]");
  env.dest = PortId{ActorId::parse("w.1/trainer[0]"), i};
  env.body =
      encode(static_cast<int>(i), Bytes::copy(std::string(part, static_cast<char>('a' + i % 26))));
  return env;
}

std::string unix_path(const std::string& tag) {
  return "/tmp/baton-test-" + tag + "-" + std::to_string(::getpid()) + ".sock";
}

class LinkTest : public ::testing::TestWithParam<std::string> {
 protected:
  Address address() {
    return Address::parse(GetParam() == "unix" ? "unix://" + unix_path("link")
                                               : "tcp://127.0.0.1:0");
  }
  IoThread io;
};

TEST_P(LinkTest, EnvelopesWithLargePartsArriveInOrderBothWays) {
  Inbox server_in;
  std::shared_ptr<Link> server_side;
  auto listener = Listener::listen(io, address(), [&](const std::shared_ptr<Link>& link) {
    server_side = link;
    // Echo every envelope back on the same link.
    return server_in.handler([weak = std::weak_ptr<Link>(link)](Envelope& env) {
      if (auto l = weak.lock()) l->send(env);
    });
  });
  Inbox client_in;
  auto client = Link::connect(io, listener->address(), client_in.handler());
  constexpr std::uint64_t kCount = 300;
  for (std::uint64_t i = 0; i < kCount; ++i) {
    ASSERT_TRUE(client->send(make(i, i % 50 == 0 ? (1 << 20) : kOutOfBandThreshold + i)));
  }
  ASSERT_TRUE(client_in.wait_envelopes(kCount));
  std::lock_guard lock(client_in.mu);
  for (std::uint64_t i = 0; i < kCount; ++i) {
    const Envelope& env = client_in.envelopes[i];
    ASSERT_EQ(env.seq, i);
    ASSERT_EQ(env.dest.port, i);
    const auto [n, bytes] = decode<std::tuple<int, Bytes>>(env.body);
    ASSERT_EQ(n, static_cast<int>(i));
    ASSERT_EQ(bytes, make(i, i % 50 == 0 ? (1 << 20) : kOutOfBandThreshold + i).body.parts[0]);
  }
  EXPECT_TRUE(client_in.closed.empty());
}

TEST_P(LinkTest, PeerCloseIsReportedWithAReason) {
  Inbox server_in;
  auto listener = Listener::listen(
      io, address(), [&](const std::shared_ptr<Link>&) { return server_in.handler(); });
  Inbox client_in;
  auto client = Link::connect(io, listener->address(), client_in.handler());
  client->close("done here");
  EXPECT_EQ(client_in.wait_closed(), "done here");
  EXPECT_EQ(server_in.wait_closed(), "peer closed the link");
  EXPECT_TRUE(client->closed());
  EXPECT_FALSE(client->send(make(0, 1)));
}

INSTANTIATE_TEST_SUITE_P(Transports, LinkTest, ::testing::Values("unix", "tcp"));

/// A raw client that skips the framing: hostile bytes, hand-made frames.
class RawClient {
 public:
  explicit RawClient(const std::string& path) : fd_(::socket(AF_UNIX, SOCK_STREAM, 0)) {
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      throw std::runtime_error("raw connect failed");
    }
  }
  ~RawClient() { ::close(fd_); }
  void write(const std::string& bytes) {
    std::size_t off = 0;
    while (off < bytes.size()) {
      const ssize_t n = ::send(fd_, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return;  // the server already closed: fine for these tests
      off += static_cast<std::size_t>(n);
    }
  }

 private:
  int fd_;
};

struct HostileFixture : ::testing::Test {
  IoThread io;
  std::string path = unix_path("hostile");
  std::mutex mu;
  std::vector<std::unique_ptr<Inbox>> inboxes;
  std::unique_ptr<Listener> listener =
      Listener::listen(io, Address::parse("unix://" + path), [this](const std::shared_ptr<Link>&) {
        std::lock_guard lock(mu);
        inboxes.push_back(std::make_unique<Inbox>());
        return inboxes.back()->handler();
      });
  Inbox& accepted(std::size_t i) {
    for (auto until = std::chrono::steady_clock::now() + kDeadline;
         std::chrono::steady_clock::now() < until;) {
      {
        std::lock_guard lock(mu);
        if (inboxes.size() > i) return *inboxes[i];
      }
      std::this_thread::yield();
    }
    throw std::runtime_error("no accepted link");
  }
};

TEST_F(HostileFixture, GarbageClosesThatLinkAndLeavesAHealthyOneWorking) {
  Inbox healthy_in;
  auto healthy = Link::connect(io, Address::parse("unix://" + path), healthy_in.handler());
  Inbox& healthy_server = accepted(0);
  std::mt19937 rng(5);
  for (int round = 0; round < 20; ++round) {
    RawClient raw(path);
    Inbox& victim = accepted(static_cast<std::size_t>(round) + 1);
    std::string garbage(64 + rng() % 512, '\0');
    for (char& c : garbage) c = static_cast<char>(rng());
    garbage[4] = 'X';                                           // never a valid magic
    garbage.replace(0, 4, std::string("\x20\x00\x00\x00", 4));  // a 32-byte header follows
    raw.write(garbage);
    EXPECT_THAT(victim.wait_closed(), HasSubstr("magic")) << "round " << round;
    std::lock_guard lock(victim.mu);
    EXPECT_TRUE(victim.envelopes.empty());
  }
  ASSERT_TRUE(healthy->send(make(0, 10)));
  ASSERT_TRUE(healthy_server.wait_envelopes(1));
}

TEST_F(HostileFixture, AnAbsurdHeaderLengthIsRefusedBeforeAllocating) {
  RawClient raw(path);
  Inbox& victim = accepted(0);
  raw.write(std::string("\xff\xff\xff\x7f", 4));
  EXPECT_THAT(victim.wait_closed(), HasSubstr("exceeds the limit"));
}

TEST_F(HostileFixture, DuplicatesAreDroppedAndAGapClosesTheLink) {
  RawClient raw(path);
  Inbox& in = accepted(0);
  auto frame = [](std::uint64_t seq) {
    Envelope env = make(seq, 8);
    env.seq = seq;
    return encode_frame(env).flatten();
  };
  raw.write(frame(0) + frame(0) + frame(1) + frame(5));
  EXPECT_THAT(in.wait_closed(), HasSubstr("sequence gap: expected 2, got 5"));
  std::lock_guard lock(in.mu);
  ASSERT_EQ(in.envelopes.size(), 2u);
  EXPECT_EQ(in.envelopes[0].seq, 0u);
  EXPECT_EQ(in.envelopes[1].seq, 1u);
}

TEST(Link, ConnectingToNothingSaysWhere) {
  IoThread io;
  try {
    Link::connect(io, Address::parse("unix://" + unix_path("nobody")), {});
    FAIL() << "expected an error";
  } catch (const std::runtime_error& e) {
    EXPECT_THAT(e.what(), HasSubstr("cannot connect to unix:///tmp/baton-test-nobody"));
  }
}

}  // namespace
}  // namespace baton::net
