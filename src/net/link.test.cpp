// Links over real sockets: unix and tcp on loopback, with a raw socket client for hostile bytes.
// Waits are on conditions with a generous deadline (a failure, never a sleep).

#include "baton/net/link.hpp"
#include "net/inbox.test.hpp"
#include "net/io_thread.hpp"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <filesystem>
#include <future>
#include <mutex>
#include <random>
#include <thread>

namespace baton::net {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;

using testing::Inbox;
using testing::kDeadline;
using testing::make;

std::string unix_path(const std::string& tag) {
  return "/tmp/baton-test-" + tag + "-" + std::to_string(::getpid()) + ".sock";
}

/// Each test runs over every transport: "unix" (the socket carries the frames), "shm" (a unix
/// link whose frames go through shared memory), "shm-spin" (the same, with the event loop
/// spinning on busy rings whatever the machine's load: spin.hpp) and "tcp".
class LinkTest : public ::testing::TestWithParam<std::string> {
 protected:
  LinkTest() {
    if (GetParam() == "shm-spin") spin_for_tests(io, testing::kSpinWindow, true);
  }
  Address address() {
    return Address::parse(GetParam() == "tcp" ? "tcp://127.0.0.1:0"
                                              : "unix://" + unix_path("link"));
  }
  /// Options for the dialler, which chooses shared memory or not.
  LinkOptions options() {
    LinkOptions o;
    o.shared_memory = GetParam().starts_with("shm");
    return o;
  }
  /// The transport a link of this test's kind ends up on.
  std::string expected_transport() { return GetParam() == "shm-spin" ? "shm" : GetParam(); }
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
  auto client = Link::connect(io, listener->address(), client_in.handler(), options());
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
  EXPECT_EQ(client->transport(), expected_transport());
  EXPECT_EQ(server_side->transport(), expected_transport());
}

/// A receiver that reads its first envelope, then nothing more until resumed.
struct StalledReceiver {
  Inbox in;
  std::mutex mu;
  std::shared_ptr<Link> side;
  std::unique_ptr<Listener> listener;

  StalledReceiver(IoThread& io, const Address& at) {
    listener = Listener::listen(io, at, [this](const std::shared_ptr<Link>& link) {
      std::lock_guard lock(mu);
      side = link;
      return in.handler([weak = std::weak_ptr<Link>(link), first = true](Envelope&) mutable {
        if (auto l = weak.lock(); l && std::exchange(first, false)) l->pause_reading();
      });
    });
  }
  void resume() {
    std::lock_guard lock(mu);
    side->resume_reading();
  }
};

TEST_P(LinkTest, AReceiverThatStopsReadingMakesItsSenderWaitThenFailClearly) {
  StalledReceiver server(io, address());
  Inbox& server_in = server.in;
  auto& listener = server.listener;
  LinkOptions options = this->options();
  options.max_queued_bytes = std::size_t{64} * 1024;
  options.send_timeout = 100ms;
  Inbox client_in;
  auto client = Link::connect(io, listener->address(), client_in.handler(), options);
  // Send until the link is full and stays full past the timeout: the send fails, clearly.
  std::uint64_t sent = 0;
  std::string error;
  while (sent < 1000000) {
    try {
      ASSERT_TRUE(client->send(make(sent, 1000)));
      ++sent;
    } catch (const LinkFullError& e) {
      error = e.what();
      break;
    }
  }
  ASSERT_FALSE(error.empty()) << "a link to a receiver that reads nothing never filled";
  EXPECT_THAT(error, HasSubstr("the receiver is not keeping up"));
  EXPECT_GT(client->queued_bytes(), options.max_queued_bytes / 2);  // still full
  ASSERT_TRUE(server_in.wait_envelopes(1));
  // Reading again: everything that was accepted arrives, in order, nothing lost.
  server.resume();
  ASSERT_TRUE(server_in.wait_envelopes(sent));
  std::lock_guard lock(server_in.mu);
  EXPECT_EQ(server_in.envelopes.size(), sent);
  for (std::uint64_t i = 0; i < sent; ++i) ASSERT_EQ(server_in.envelopes[i].dest.port, i);
}

TEST_P(LinkTest, ASenderThatMustNotWaitHearsWhenThereIsRoomAgain) {
  StalledReceiver server(io, address());
  LinkOptions options = this->options();
  options.max_queued_bytes = std::size_t{64} * 1024;
  Inbox client_in;
  auto client = Link::connect(io, server.listener->address(), client_in.handler(), options);
  std::promise<void> room;
  EXPECT_FALSE(client->when_room([] { FAIL() << "ran although the link had room"; }));
  // A send that finds room never waits, so sending until full() never blocks.
  std::uint64_t sent = 0;
  while (!client->full() && sent < 1000000) ASSERT_TRUE(client->send(make(sent++, 1000)));
  ASSERT_TRUE(client->full()) << "a link to a receiver that reads nothing never filled";
  ASSERT_TRUE(client->when_room([&room] { room.set_value(); }));
  auto ran = room.get_future();
  ASSERT_TRUE(server.in.wait_envelopes(1));
  server.resume();
  EXPECT_EQ(ran.wait_for(30s), std::future_status::ready);
  EXPECT_FALSE(client->full());
  ASSERT_TRUE(server.in.wait_envelopes(sent));
}

TEST_P(LinkTest, PeerCloseIsReportedWithAReason) {
  Inbox server_in;
  auto listener = Listener::listen(
      io, address(), [&](const std::shared_ptr<Link>&) { return server_in.handler(); });
  Inbox client_in;
  auto client = Link::connect(io, listener->address(), client_in.handler(), options());
  client->close("done here");
  EXPECT_EQ(client_in.wait_closed(), "done here");
  EXPECT_EQ(server_in.wait_closed(), "peer closed the link: done here");  // and said why
  EXPECT_EQ(client_in.end(), LinkEnd::closed);
  EXPECT_EQ(server_in.end(), LinkEnd::peer_closed);  // its bye came: on purpose, not lost
  EXPECT_TRUE(client->closed());
  EXPECT_FALSE(client->send(make(0, 1)));
}

INSTANTIATE_TEST_SUITE_P(Transports, LinkTest, ::testing::Values("unix", "shm", "shm-spin", "tcp"));

using testing::RawClient;

TEST_P(LinkTest, AFrameSentBeforeACloseIsDeliveredOrReturnedAndOnOneHostNeverBoth) {
  // Frames sent faster than the peer takes them go out in batches; a close lets the one on its
  // way finish. Each frame is delivered or handed back as unsent; on one host (where the peer
  // reads all before the close) never both. Over TCP, one not yet acknowledged may be both.
  Inbox server_in;
  auto listener = Listener::listen(
      io, address(), [&](const std::shared_ptr<Link>&) { return server_in.handler(); });
  Inbox client_in;
  std::vector<int> seen(20000, 0);  // +1 delivered, +2 returned
  LinkHandler handler = client_in.handler();
  handler.on_unsent = [&](const std::vector<Envelope>& envs) {
    for (const Envelope& e : envs) seen.at(e.dest.port) += 2;  // before on_closed
  };
  auto client = Link::connect(io, listener->address(), handler, options());
  for (std::uint64_t i = 0; i < seen.size(); ++i) ASSERT_TRUE(client->send(make(i, 100)));
  client->close("done");
  ASSERT_NE(client_in.wait_closed(), "never closed");
  // The peer learns that the link closed on purpose (its bye), not that the connection broke.
  EXPECT_EQ(server_in.wait_closed(), "peer closed the link: done");
  std::lock_guard lock(server_in.mu);
  for (const Envelope& e : server_in.envelopes) ++seen.at(e.dest.port);
  for (std::size_t i = 0; i < seen.size(); ++i) {
    ASSERT_NE(seen[i], 0) << "frame " << i << " was neither delivered nor returned";
    if (GetParam() != "tcp") {
      ASSERT_NE(seen[i], 3) << "frame " << i << " delivered and returned";
    }
  }
}

struct HostileFixture : ::testing::Test {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::unique_ptr<Inbox>> inboxes;
  IoThread io;
  std::string path = unix_path("hostile");
  std::unique_ptr<Listener> listener =
      Listener::listen(io, Address::parse("unix://" + path), [this](const std::shared_ptr<Link>&) {
        std::lock_guard lock(mu);
        inboxes.push_back(std::make_unique<Inbox>());
        cv.notify_all();
        return inboxes.back()->handler();
      });
  Inbox& accepted(std::size_t i) {
    std::unique_lock lock(mu);
    if (!cv.wait_for(lock, kDeadline, [&] { return inboxes.size() > i; })) {
      throw std::runtime_error("no accepted link");
    }
    return *inboxes[i];
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
  EXPECT_EQ(in.end(), LinkEnd::lost);
  std::lock_guard lock(in.mu);
  ASSERT_EQ(in.envelopes.size(), 2u);
  EXPECT_EQ(in.envelopes[0].seq, 0u);
  EXPECT_EQ(in.envelopes[1].seq, 1u);
}

/// A TCP proxy between a dialler and a listener, to break connections for real: reset() cuts
/// every live connection with a TCP reset both ways; blackhole() makes the live ones swallow
/// bytes without closing; stop_accepting() refuses new connections. One thread per connection
/// waits on both sockets and on a pipe that reset() writes to, so it sees a reset at once.
class Proxy {
 public:
  explicit Proxy(std::uint16_t upstream) : upstream_(upstream) {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
        ::listen(listen_fd_, 16) != 0) {
      throw std::runtime_error("proxy cannot listen");
    }
    socklen_t len = sizeof(addr);
    ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    acceptor_ = std::thread([this] { accept_loop(); });
  }
  ~Proxy() {
    stop_accepting();
    reset();
    std::lock_guard lock(mu_);
    for (auto& t : pumps_) t.join();
  }

  Address address() const { return Address::parse("tcp://127.0.0.1:" + std::to_string(port_)); }
  void reset() {
    std::lock_guard lock(mu_);
    for (auto& c : conns_) {
      c->reset = true;
      const char wake = 1;
      (void)!::write(c->wake[1], &wake, 1);
    }
  }
  void blackhole() {
    std::lock_guard lock(mu_);
    for (auto& c : conns_) c->blackhole = true;
  }
  void stop_accepting() {
    if (stopped_.exchange(true)) return;
    ::shutdown(listen_fd_, SHUT_RDWR);
    acceptor_.join();
    ::close(listen_fd_);
  }
  int connections() {
    std::lock_guard lock(mu_);
    return static_cast<int>(conns_.size());
  }

 private:
  struct Conn {
    int down;
    int up;
    int wake[2] = {-1, -1};  // a pipe: reset() writes, the pump wakes; closed with the Conn
    std::atomic<bool> reset{false};
    std::atomic<bool> blackhole{false};
    Conn() {
      if (::pipe2(wake, O_CLOEXEC | O_NONBLOCK) != 0) throw std::runtime_error("proxy: no pipe");
    }
    ~Conn() {
      ::close(wake[0]);
      ::close(wake[1]);
    }
    Conn(const Conn&) = delete;
    Conn& operator=(const Conn&) = delete;
  };

  void accept_loop() {
    for (;;) {
      const int down = ::accept(listen_fd_, nullptr, nullptr);
      if (down < 0) return;
      const int up = ::socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in addr{};
      addr.sin_family = AF_INET;
      addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      addr.sin_port = htons(upstream_);
      if (::connect(up, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
        std::fprintf(stderr, "proxy: upstream connect failed: %s\n", std::strerror(errno));
        ::close(down);
        ::close(up);
        continue;
      }
      auto conn = std::make_shared<Conn>();
      conn->down = down;
      conn->up = up;
      std::lock_guard lock(mu_);
      conns_.push_back(conn);
      pumps_.emplace_back([conn] { pump(*conn); });
    }
  }

  static void pump(Conn& c) {
    char buf[65536];
    for (;;) {
      if (c.reset) {
        const linger hard{1, 0};  // close with a reset, as a failed network path would
        ::setsockopt(c.down, SOL_SOCKET, SO_LINGER, &hard, sizeof(hard));
        ::setsockopt(c.up, SOL_SOCKET, SO_LINGER, &hard, sizeof(hard));
        ::close(c.down);
        ::close(c.up);
        return;
      }
      pollfd fds[3] = {{c.down, POLLIN, 0}, {c.up, POLLIN, 0}, {c.wake[0], POLLIN, 0}};
      if (::poll(fds, 3, -1) <= 0 || (fds[2].revents & POLLIN) != 0) continue;
      for (int i = 0; i < 2; ++i) {
        if ((fds[i].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
        const ssize_t n = ::read(fds[i].fd, buf, sizeof(buf));
        if (n <= 0) {
          c.reset = true;
          break;
        }
        if (c.blackhole) continue;  // swallowed
        const int to = i == 0 ? c.up : c.down;
        for (ssize_t off = 0; off < n;) {
          const ssize_t w = ::write(to, buf + off, static_cast<std::size_t>(n - off));
          if (w <= 0) {
            c.reset = true;
            break;
          }
          off += w;
        }
      }
    }
  }

  std::uint16_t upstream_;
  std::uint16_t port_ = 0;
  int listen_fd_ = -1;
  std::atomic<bool> stopped_{false};
  std::thread acceptor_;
  std::mutex mu_;
  std::vector<std::shared_ptr<Conn>> conns_;
  std::vector<std::thread> pumps_;
};

/// A listener whose first accepted link is the one under test (later accepts are connections
/// that resume it and end at once), behind a proxy.
struct RepairFixture : ::testing::Test {
  Inbox client_in;  // first, so it outlives the I/O thread and every link's handler
  LinkOptions options{
      .heartbeat = 20ms, .dead_after = 300ms, .reconnect_for = 10s, .ack_every = 16};
  IoThread io;
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::unique_ptr<Inbox>> inboxes;
  std::vector<std::shared_ptr<Link>> accepted_links;
  std::unique_ptr<Listener> listener;
  std::unique_ptr<Proxy> proxy;

  void start() {
    listener = Listener::listen(
        io, Address::parse("tcp://127.0.0.1:0"),
        [this](const std::shared_ptr<Link>& l) {
          std::lock_guard lock(mu);
          inboxes.push_back(std::make_unique<Inbox>());
          accepted_links.push_back(l);
          cv.notify_all();
          return inboxes.back()->handler();
        },
        options);
    proxy = std::make_unique<Proxy>(listener->address().port);
  }

  std::pair<Inbox*, std::shared_ptr<Link>> first_accepted() {
    std::unique_lock lock(mu);
    if (!cv.wait_for(lock, kDeadline, [&] { return !inboxes.empty(); })) {
      throw std::runtime_error("nothing accepted");
    }
    return {inboxes[0].get(), accepted_links[0]};
  }
};

void expect_in_order(Inbox& in, std::uint64_t n) {
  ASSERT_TRUE(in.wait_envelopes(n)) << "only " << in.envelopes.size() << " of " << n;
  std::lock_guard lock(in.mu);
  ASSERT_EQ(in.envelopes.size(), n) << "a frame arrived twice";
  for (std::uint64_t i = 0; i < n; ++i) {
    ASSERT_EQ(in.envelopes[i].seq, i);
    using Args = std::tuple<int, Bytes>;
    ASSERT_EQ(decode<Args>(in.envelopes[i].body), decode<Args>(make(i, 100).body)) << i;
  }
}

void exchange_across_resets(RepairFixture& f) {
  auto& proxy = f.proxy;
  auto& client_in = f.client_in;
  auto client = Link::connect(f.io, proxy->address(), client_in.handler(), f.options);
  auto [server_in, server] = f.first_accepted();
  constexpr std::uint64_t kCount = 4000;
  // Both directions at once, while the proxy cuts the connection every 500 frames received.
  std::thread server_sender([&, srv = server] {
    for (std::uint64_t i = 0; i < kCount; ++i) ASSERT_TRUE(srv->send(make(i, 100)));
  });
  for (std::uint64_t i = 0; i < kCount; ++i) {
    ASSERT_TRUE(client->send(make(i, 100)));
    if (i % 500 == 250) {
      ASSERT_TRUE(server_in->wait_envelopes(i / 2));
      proxy->reset();
    }
  }
  server_sender.join();
  expect_in_order(*server_in, kCount);
  expect_in_order(client_in, kCount);
  EXPECT_GE(client->connections(), 5u);
  EXPECT_GE(proxy->connections(), 5);
  std::lock_guard lock(server_in->mu);
  EXPECT_TRUE(server_in->closed.empty()) << server_in->closed.front();
  EXPECT_TRUE(client_in.closed.empty());
}

TEST_F(RepairFixture, EveryFrameArrivesOnceInOrderAcrossResetConnections) {
  start();
  exchange_across_resets(*this);
}

TEST_F(RepairFixture, EveryFrameArrivesOnceInOrderAcrossResetTlsConnections) {
  // Every new connection proves the secret and runs a new TLS handshake.
  std::string dir = (std::filesystem::temp_directory_path() / "baton-tls-XXXXXX").string();
  ASSERT_NE(::mkdtemp(dir.data()), nullptr);
  options.tls = make_job_certificates(dir);
  options.secret = new_job_secret();
  start();
  exchange_across_resets(*this);
  std::filesystem::remove_all(dir);
}

TEST_F(RepairFixture, HeartbeatsNoticeASilentPathAndTheLinkIsRepaired) {
  start();
  auto client = Link::connect(io, proxy->address(), client_in.handler(), options);
  auto [server_in, server] = first_accepted();
  ASSERT_TRUE(client->send(make(0, 100)));
  ASSERT_TRUE(server_in->wait_envelopes(1));
  proxy->blackhole();  // the connection stays open but nothing gets through
  ASSERT_TRUE(client->send(make(1, 100)));
  ASSERT_TRUE(server->send(make(0, 100)));
  expect_in_order(*server_in, 2);
  expect_in_order(client_in, 1);
  EXPECT_EQ(client->connections(), 2u);
}

TEST_F(RepairFixture, APeerThatStaysAwayClosesTheLinkWithAReason) {
  options.reconnect_for = 300ms;
  start();
  auto client = Link::connect(io, proxy->address(), client_in.handler(), options);
  auto [server_in, server] = first_accepted();
  ASSERT_TRUE(client->send(make(0, 100)));
  ASSERT_TRUE(server_in->wait_envelopes(1));
  proxy->stop_accepting();
  proxy->reset();
  // The path is gone and nothing listens there any more: the dialler gives up at once.
  EXPECT_THAT(client_in.wait_closed(), HasSubstr("the peer refuses new ones"));
  EXPECT_THAT(server_in->wait_closed(), HasSubstr("did not come back within 300 ms"));
  EXPECT_FALSE(client->send(make(1, 100)));
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

TEST(Link, ALinkDialledFromAnIoThreadConnectsOnItsStrandAndReportsAFailureAsItsClose) {
  // A link's handler runs on the I/O thread, where nothing may wait for a connect: a link
  // dialled there connects later, on its strand, and a failure comes as its close (with what
  // was sent on it handed back), not as an exception.
  Inbox target_in;
  Inbox dialled_in;
  Inbox failed_in;
  std::mutex mu;
  std::condition_variable cv;
  bool dialled = false;
  std::string thrown;
  std::vector<Envelope> unsent;
  IoThread io;
  std::shared_ptr<Link> good;  // after the I/O thread: no link may outlive it
  auto target = Listener::listen(io, Address::parse("unix://" + unix_path("io-target")),
                                 [&](const std::shared_ptr<Link>&) { return target_in.handler(); });
  const Address nobody = Address::parse("unix://" + unix_path("io-nobody"));
  auto trigger = Listener::listen(
      io, Address::parse("unix://" + unix_path("io-trigger")), [&](const std::shared_ptr<Link>&) {
        std::lock_guard lock(mu);
        try {
          good = Link::connect(io, target->address(), dialled_in.handler());
          EXPECT_TRUE(good->send(make(1)));  // waits for the connection, on the strand
          LinkHandler failing = failed_in.handler();
          failing.on_unsent = [&](std::vector<Envelope> envs) {
            std::lock_guard inner(mu);
            unsent = std::move(envs);
          };
          auto bad = Link::connect(io, nobody, failing);
          EXPECT_TRUE(bad->send(make(2)));  // the handler is still running: not failed yet
        } catch (const std::exception& e) {
          thrown = e.what();
        }
        dialled = true;
        cv.notify_all();
        return LinkHandler{};
      });
  auto client = Link::connect(io, trigger->address(), {});
  {
    std::unique_lock lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, kDeadline, [&] { return dialled; }));
    ASSERT_EQ(thrown, "");
  }
  ASSERT_TRUE(target_in.wait_envelopes(1));
  EXPECT_THAT(failed_in.wait_closed(),
              HasSubstr("cannot connect to " + nobody.to_string() + ": No such file"));
  {
    std::lock_guard lock(mu);
    ASSERT_EQ(unsent.size(), 1u);
    EXPECT_EQ(unsent[0].dest.port, 2u);
  }
  good->close_and_wait("done");
  client->close_and_wait("done");
}

}  // namespace
}  // namespace baton::net
