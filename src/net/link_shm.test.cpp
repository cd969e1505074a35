// Shared-memory links against hostile and dying peers: a raw client does the offer by hand
// (hello, offer, the memfd as SCM_RIGHTS) and then writes into the ring whatever it likes, or
// is SIGKILLed in the middle of a frame. The ordinary traffic over shared memory (order, large
// parts, backpressure, a close) runs in link.test.cpp, over every transport.

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>

#include "baton/net/link.hpp"
#include "net/inbox.test.hpp"
#include "net/io_thread.hpp"
#include "net/raw_shm.test.hpp"
#include "net/shm_ring.hpp"
#include "wire/slab.hpp"
#include "wire/slab.test.hpp"

namespace baton::net {
namespace {

using testing::control;
using ::testing::HasSubstr;
using testing::Inbox;
using testing::kDeadline;
using testing::make;
using testing::RawClient;
using testing::RawShmClient;

std::string frame(std::uint64_t seq, std::size_t part) {
  Envelope env = make(seq, part);
  env.seq = seq;
  return encode_frame(env).flatten();
}

/// Each hostile test runs with the event loop sleeping between frames, and with it spinning on
/// busy rings whatever the machine's load (spin.hpp).
struct ShmHostile : ::testing::TestWithParam<bool> {
  ShmHostile() {
    if (GetParam()) spin_for_tests(io, testing::kSpinWindow, true);
  }
  // What the links' handlers feed outlives the event loop: a link the test let go of may still
  // say it closed until the loop stops.
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::unique_ptr<Inbox>> inboxes;
  Inbox healthy_in;
  IoThread io;  // the links below go before their event loop
  std::vector<std::shared_ptr<Link>> links;
  std::string path = "/tmp/baton-test-shm-" + std::to_string(::getpid()) + ".sock";
  std::unique_ptr<Listener> listener = Listener::listen(
      io, Address::parse("unix://" + path), [this](const std::shared_ptr<Link>& link) {
        std::lock_guard lock(mu);
        inboxes.push_back(std::make_unique<Inbox>());
        links.push_back(link);
        cv.notify_all();
        // Echoes: a hand-made client never reads its ring, a real one hears back.
        return inboxes.back()->handler([weak = std::weak_ptr<Link>(link)](Envelope& env) {
          if (auto l = weak.lock()) l->send(env);
        });
      });
  std::shared_ptr<Link> healthy =
      Link::connect(io, Address::parse("unix://" + path), healthy_in.handler());

  Inbox& accepted(std::size_t i) {
    std::unique_lock lock(mu);
    if (!cv.wait_for(lock, kDeadline, [&] { return inboxes.size() > i; })) {
      throw std::runtime_error("no accepted link");
    }
    return *inboxes[i];
  }
  /// The healthy link, over shared memory, still carries frames both ways.
  void expect_healthy(std::size_t expected) {
    ASSERT_TRUE(healthy->send(make(expected, 10)));
    ASSERT_TRUE(accepted(0).wait_envelopes(expected + 1));
    ASSERT_TRUE(healthy_in.wait_envelopes(expected + 1));  // the echo: both ends switched
    EXPECT_EQ(healthy->transport(), "shm");
    std::lock_guard lock(mu);
    EXPECT_EQ(links[0]->transport(), "shm");
  }
};

TEST_P(ShmHostile, GarbageInTheRingClosesThatLinkAndLeavesTheOthersWorking) {
  expect_healthy(0);
  std::mt19937 rng(11);
  for (int round = 0; round < 10; ++round) {
    RawShmClient raw(path);
    Inbox& victim = accepted(static_cast<std::size_t>(round) + 1);
    std::string garbage(64 + rng() % 512, '\0');
    for (char& c : garbage) c = static_cast<char>(rng());
    garbage.replace(0, 5, std::string("\x20\x00\x00\x00X", 5));  // a 32-byte header, bad magic
    raw.write(frame(0, 100) + garbage);
    EXPECT_THAT(victim.wait_closed(), HasSubstr("magic")) << "round " << round;
    std::lock_guard lock(victim.mu);
    EXPECT_EQ(victim.envelopes.size(), 1u);  // the good frame before the garbage arrived
  }
  expect_healthy(1);
}

TEST_P(ShmHostile, AnImpossibleWritePositionClosesThatLinkWithTheReason) {
  expect_healthy(0);
  std::size_t next = 1;
  for (const std::uint64_t head : {std::uint64_t{1} << 40, std::uint64_t{64} << 10 | 1}) {
    RawShmClient raw(path);
    Inbox& victim = accepted(next++);
    raw.write(frame(0, 10));
    ASSERT_TRUE(victim.wait_envelopes(1));
    raw.control_to_listener->head.store(raw.out.position() + head);
    raw.ring();
    EXPECT_THAT(victim.wait_closed(), HasSubstr("broke the shared-memory ring"));
  }
  expect_healthy(1);
}

TEST_P(ShmHostile, APeerKilledInTheMiddleOfAFrameIsReportedAndNothingHangs) {
  expect_healthy(0);
  auto raw = std::make_unique<RawShmClient>(path);
  Inbox& victim = accepted(1);
  const std::string whole = frame(0, 1000);
  const std::string cut = frame(1, 20000).substr(0, 9000);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // The child holds the socket and the ring now: one frame, most of another, and it dies.
    raw->write(whole + cut);
    ::raise(SIGKILL);
    std::_Exit(1);
  }
  raw.reset();  // the parent's copies of the socket and the memfd: only the child holds them
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(WTERMSIG(status), SIGKILL);
  EXPECT_EQ(victim.wait_closed(), "peer closed the link");
  EXPECT_EQ(victim.end(), LinkEnd::lost);  // its end of the socket went with it: no bye came
  {
    std::lock_guard lock(victim.mu);
    ASSERT_EQ(victim.envelopes.size(), 1u);
    EXPECT_EQ(victim.envelopes[0].seq, 0u);
  }
  expect_healthy(1);
}

TEST_P(ShmHostile, AnOfferWithoutItsMemfdIsRefused) {
  expect_healthy(0);
  RawClient raw(path);
  Inbox& victim = accepted(1);
  raw.write(control("hello", 9) + control("shm", 1) + "m");  // the byte, but no descriptor
  EXPECT_THAT(victim.wait_closed(), HasSubstr("did not send its memfd and two eventfds"));
  expect_healthy(1);
}

TEST_P(ShmHostile, AnOfferOfAMemfdThatCouldShrinkIsRefused) {
  expect_healthy(0);
  RawClient raw(path);
  Inbox& victim = accepted(1);
  // A region that looks right but whose size is not sealed: its peer could shrink it later,
  // and a read past the end of the file would kill the listener with SIGBUS.
  shm::Region sealed = shm::Region::create(4096);
  const int fd = ::memfd_create("baton-link", MFD_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::ftruncate(fd, static_cast<off_t>(sealed.size)), 0);
  ASSERT_EQ(::pwrite(fd, sealed.base, sizeof(shm::RegionHeader), 0),
            static_cast<ssize_t>(sizeof(shm::RegionHeader)));
  raw.write(control("hello", 9) + control("shm", 1));
  std::string error;
  const int bells[2] = {shm::make_bell(error), shm::make_bell(error)};
  ASSERT_EQ(error, "");
  ASSERT_EQ(shm::send_fds(raw.fd(), {fd, bells[0], bells[1]}, 1000), "");
  for (const int f : {fd, bells[0], bells[1]}) ::close(f);
  EXPECT_THAT(victim.wait_closed(), HasSubstr("not sealed"));
  expect_healthy(1);
}

TEST_P(ShmHostile, AnOfferWhoseWakeUpsAreNotEventfdsIsRefused) {
  expect_healthy(0);
  RawClient raw(path);
  Inbox& victim = accepted(1);
  // A pipe where an eventfd belongs: writing the peer's wake-ups into it would block once full.
  shm::Region region = shm::Region::create(4096);
  int pipe_fds[2] = {-1, -1};
  ASSERT_EQ(::pipe(pipe_fds), 0);
  std::string error;
  const int bell = shm::make_bell(error);
  ASSERT_EQ(error, "");
  raw.write(control("hello", 9) + control("shm", 1));
  ASSERT_EQ(shm::send_fds(raw.fd(), {region.fd, pipe_fds[1], bell}, 1000), "");
  for (const int f : {pipe_fds[0], pipe_fds[1], bell}) ::close(f);
  EXPECT_THAT(victim.wait_closed(), HasSubstr("not eventfds"));
  expect_healthy(1);
}

TEST_P(ShmHostile, AFrameWhoseWakeUpWasLostIsReadAtTheNextHeartbeatsNotLeftToKillTheLink) {
  expect_healthy(0);
  RawShmClient raw(path);
  Inbox& victim = accepted(1);
  const auto until = std::chrono::steady_clock::now() + kDeadline;
  auto sleep_seen = [&](const char* when) {
    while (raw.control_to_listener->reader_sleeps.load() == 0) {
      ASSERT_LT(std::chrono::steady_clock::now(), until)
          << "the listener's read never slept " << when;
      std::this_thread::yield();
    }
  };
  sleep_seen("at first");
  // Written as a real writer does: the flag taken, then the wake-up rung.
  const std::string first = frame(0, 10);
  ASSERT_EQ(raw.out.write(first.data(), first.size()), first.size());
  ASSERT_NE(raw.control_to_listener->reader_sleeps.exchange(0), 0U);
  raw.ring();
  ASSERT_TRUE(victim.wait_envelopes(1));
  // Asleep again, the listener has taken that wake-up (its eventfd is never read, so only its
  // sleeping after the ring says so); the next frame goes into the ring with no wake-up:
  // nothing but the heartbeat's look can find it.
  sleep_seen("after the first frame");
  const std::string next = frame(1, 10);
  ASSERT_EQ(raw.out.write(next.data(), next.size()), next.size());
  ASSERT_TRUE(victim.wait_envelopes(2));  // a heartbeat or two later, well within dead_after
  std::lock_guard lock(victim.mu);
  EXPECT_EQ(victim.envelopes[1].seq, 1u);
  EXPECT_TRUE(victim.closed.empty()) << victim.closed.front();
}

INSTANTIATE_TEST_SUITE_P(Waits, ShmHostile, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& i) {
                           return i.param ? "Spinning" : "Sleeping";
                         });

TEST(ShmSpin, ABusyLinkIsReadBySpinningThenLeftAsleepOnceQuiet) {
  IoThread io;
  spin_for_tests(io, testing::kSpinWindow, true);
  Inbox server_in;
  auto listener = Listener::listen(
      io, Address::parse("unix:///tmp/baton-test-spin-" + std::to_string(::getpid()) + ".sock"),
      [&](const std::shared_ptr<Link>& link) {
        return server_in.handler([weak = std::weak_ptr<Link>(link)](Envelope& env) {
          if (auto l = weak.lock()) l->send(env);
        });
      });
  Inbox client_in;
  auto client = Link::connect(io, listener->address(), client_in.handler());
  // One at a time, as calls and their replies: at least 300, and on until a spinning thread has
  // caught a frame (a machine busy with other work may keep the spinner off its core for a
  // while), up to 30 times as many.
  constexpr std::uint64_t kAtLeast = 300;
  std::uint64_t calls = 0;
  while (calls < kAtLeast || (spin_counts(io).caught == 0 && calls < 30 * kAtLeast)) {
    ASSERT_TRUE(client->send(make(calls, 100)));
    ASSERT_TRUE(client_in.wait_envelopes(++calls));
  }
  EXPECT_EQ(client->transport(), "shm");
  // The server's ring was busy: frames were caught by a spinning thread, without a doorbell.
  EXPECT_GT(spin_counts(io).caught, 0u) << "after " << calls << " calls";
  // Quiet now: a spin runs out and the rings are left asleep, watched by nobody.
  const auto deadline = std::chrono::steady_clock::now() + kDeadline;
  while (spin_counts(io).watched != 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::yield();
  }
  EXPECT_EQ(spin_counts(io).watched, 0);
  EXPECT_GT(spin_counts(io).ran_out, 0u);
  // Asleep, the link still wakes for the next frame (its doorbell).
  ASSERT_TRUE(client->send(make(calls, 100)));
  ASSERT_TRUE(client_in.wait_envelopes(calls + 1));
  std::lock_guard lock(client_in.mu);
  for (std::uint64_t i = 0; i <= calls; ++i) ASSERT_EQ(client_in.envelopes[i].dest.port, i);
}

/// A client linked to a server that sends back each envelope it gets.
class ShmSlabs : public ::testing::Test {
 protected:
  // Echoes may still be on their way: both ends stop delivering before the inboxes go.
  ~ShmSlabs() override {
    client->close_and_wait("the test is over");
    (void)server_in.wait_closed();
  }

  IoThread io;
  Inbox server_in;
  std::shared_ptr<Listener> listener = Listener::listen(
      io, Address::parse("unix:///tmp/baton-test-slab-" + std::to_string(::getpid()) + ".sock"),
      [this](const std::shared_ptr<Link>& link) {
        return server_in.handler([weak = std::weak_ptr<Link>(link)](Envelope& env) {
          if (auto l = weak.lock()) l->send(env);  // the same bytes back
        });
      });
  Inbox client_in;
  std::shared_ptr<Link> client = Link::connect(io, listener->address(), client_in.handler());
};

TEST_F(ShmSlabs, A256MiBPartGoesThereAndBackInPlaceAndNothingIsLeftAfter) {
  std::vector<std::byte> pattern(std::size_t{256} << 20);
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    pattern[i] = static_cast<std::byte>((i * 7 + i / 4096) % 251);
  }
  const Bytes sent = Bytes::adopt(std::move(pattern));
  Envelope env = make(0);
  env.body = encode(42, sent);
  ASSERT_TRUE(client->send(env));
  ASSERT_TRUE(client_in.wait_envelopes(1));
  {
    std::lock_guard lock(client_in.mu);
    const auto [n, back] = decode<std::tuple<int, Bytes>>(client_in.envelopes[0].body);
    EXPECT_EQ(n, 42);
    ASSERT_EQ(back.size(), sent.size());
    EXPECT_EQ(std::memcmp(back.data(), sent.data(), sent.size()), 0);
    EXPECT_GE(wire::slab_fd(back), 0) << "the part was copied, not passed as a slab";
  }
  EXPECT_EQ(client->transport(), "shm");
  // Once both ends are closed and what they delivered is dropped, no slab is left.
  client->close_and_wait("done");
  EXPECT_EQ(server_in.wait_closed(), "peer closed the link: done");
  {
    std::scoped_lock lock(client_in.mu, server_in.mu);
    client_in.envelopes.clear();
    server_in.envelopes.clear();
  }
  EXPECT_EQ(wire::slabs_here(), 0u);
}

TEST_F(ShmSlabs, WhatAHandlerDoesNotTakeIsReleasedWhenItReturns) {
  // A server that looks at each envelope and keeps nothing of it: the slab it received is
  // unmapped once its handler returns, though no other frame follows on the link (heartbeats,
  // which would also let it go, are 60 s apart here).
  LinkOptions slow;
  slow.heartbeat = std::chrono::seconds(60);
  slow.dead_after = std::chrono::seconds(120);
  std::atomic<int> seen{0};
  auto server = Listener::listen(
      io, Address::parse("unix:///tmp/baton-test-drop-" + std::to_string(::getpid()) + ".sock"),
      [&seen](const std::shared_ptr<Link>&) {
        return LinkHandler{[&seen](Envelope&& env) {
                             if (!env.body.parts.empty()) seen.fetch_add(1);
                           },
                           nullptr};
      },
      slow);
  Inbox in;
  auto link = Link::connect(io, server->address(), in.handler(), slow);
  // On the ring first: before it, a part goes through the socket as plain bytes.
  const auto ring_by = std::chrono::steady_clock::now() + kDeadline;
  while (link->transport() != "shm" && std::chrono::steady_clock::now() < ring_by) {
    ASSERT_TRUE(link->send(make(1)));
    std::this_thread::yield();
  }
  ASSERT_EQ(link->transport(), "shm");
  {
    Envelope env = make(0);
    env.body = encode(
        Bytes::make(std::size_t{16} << 20, [](std::span<std::byte> to) { to[0] = std::byte{1}; }));
    ASSERT_TRUE(link->send(env));
  }
  const auto deadline = std::chrono::steady_clock::now() + kDeadline;
  while ((seen.load() == 0 || wire::slabs_here() != 0) &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::yield();
  }
  EXPECT_EQ(seen.load(), 1);
  EXPECT_EQ(wire::slabs_here(), 0u) << "the dropped envelope's slab is still held";
  link->close_and_wait("done");
}

/// The inode of a slab's memfd (the same memory, whichever process holds it).
ino_t slab_inode(const Bytes& b) {
  struct stat st {};
  if (::fstat(wire::slab_fd(b), &st) != 0) return 0;
  return st.st_ino;
}

TEST_F(ShmSlabs, ASlabTheSenderMadeGoesThereAndBackAsItselfNeverCopied) {
  const Bytes sent = Bytes::make(std::size_t{64} << 20, [](std::span<std::byte> to) {
    for (std::size_t i = 0; i < to.size(); i += 4096) to[i] = static_cast<std::byte>(i >> 12);
  });
  ASSERT_GE(wire::slab_fd(sent), 0);
  for (int round = 0; round < 3; ++round) {
    Envelope env = make(static_cast<std::uint64_t>(round));
    env.body = encode(round, sent);
    ASSERT_TRUE(client->send(env));
  }
  ASSERT_TRUE(client_in.wait_envelopes(3));
  std::lock_guard lock(client_in.mu);
  for (int round = 0; round < 3; ++round) {
    const auto [n, back] = decode<std::tuple<int, Bytes>>(client_in.envelopes[round].body);
    EXPECT_EQ(n, round);
    ASSERT_EQ(back.size(), sent.size());
    EXPECT_EQ(slab_inode(back), slab_inode(sent)) << "the slab was copied on the way";
    EXPECT_NE(back.data(), sent.data());  // a mapping of its own, of the same memory
    EXPECT_EQ(std::memcmp(back.data(), sent.data(), sent.size()), 0);
  }
}

/// One ring of 4 KiB and both its ends, in this process.
class ShmRingEnds : public ::testing::Test {
 protected:
  shm::Region region = shm::Region::create(4096);
  shm::RegionLayout l = shm::layout(region.base, region.capacity);
  shm::RingEnd writer{l.control[0], l.data[0], region.capacity};
  shm::RingEnd reader{l.control[0], l.data[0], region.capacity};
  const std::string full = std::string(region.capacity, 'x');
};

TEST_F(ShmRingEnds, BytesGoRoundTheRingInOrderAndItsPositionsAreChecked) {
  std::string sent;
  std::string got;
  std::mt19937 rng(3);
  while (got.size() < 100000) {
    std::string chunk(rng() % 3000, '\0');
    for (char& c : chunk) c = static_cast<char>('a' + rng() % 26);
    const std::size_t n = writer.write(chunk.data(), chunk.size());
    sent.append(chunk, 0, n);
    std::string buf(rng() % 5000, '\0');
    buf.resize(reader.read(buf.data(), buf.size()));
    got += buf;
    ASSERT_EQ(got, sent.substr(0, got.size()));
  }
  EXPECT_FALSE(reader.sleep_if_empty() && reader.readable() != 0);
  // A writer that says it is further ahead than the ring holds is found out.
  l.control[0]->head.store(reader.position() + region.capacity + 1);
  EXPECT_EQ(reader.readable(), 0u);
  EXPECT_THAT(reader.corrupt(), HasSubstr("impossible"));
}

TEST_F(ShmRingEnds, AWriterWaitingForRoomIsWokenOnceHalfTheRingIsFree) {
  ASSERT_EQ(writer.write(full.data(), full.size()), region.capacity);
  ASSERT_TRUE(writer.wait_if_full());  // no room: it waits for the reader
  std::string buf(region.capacity / 4, '\0');
  ASSERT_EQ(reader.read(buf.data(), buf.size()), buf.size());
  EXPECT_FALSE(reader.writer_wants_waking());  // a quarter free: reading goes on first
  ASSERT_EQ(reader.read(buf.data(), buf.size()), buf.size());
  EXPECT_TRUE(reader.writer_wants_waking());   // half free: the writer is woken
  EXPECT_FALSE(reader.writer_wants_waking());  // once
  ASSERT_EQ(reader.read(buf.data(), buf.size()), buf.size());
  EXPECT_FALSE(reader.writer_wants_waking());  // it no longer waits
}

TEST_F(ShmRingEnds, EachEndLooksAtThePeersPositionOnlyWhenWhatItKnewIsSpentAndChecksItThen) {
  std::string got(region.capacity, '\0');
  // Bytes written after the reader last looked are found once what it knew of is read.
  ASSERT_EQ(writer.write(full.data(), 100), 100u);
  ASSERT_EQ(reader.read(got.data(), 10), 10u);
  ASSERT_EQ(writer.write("abc", 3), 3u);
  ASSERT_EQ(reader.read(got.data(), 200), 93u);
  EXPECT_EQ(got.substr(90, 3), "abc");
  // The writer's position moves where no writer could put it: the reader takes the bytes it
  // already knew of without looking, and refuses the position when it looks again.
  ASSERT_EQ(writer.write(full.data(), 100), 100u);
  ASSERT_EQ(reader.read(got.data(), 10), 10u);
  l.control[0]->head.fetch_add(10 * region.capacity);
  EXPECT_EQ(reader.read(got.data(), 90), 90u);
  EXPECT_TRUE(reader.corrupt().empty());
  EXPECT_EQ(reader.read(got.data(), 1), 0u);
  EXPECT_THAT(reader.corrupt(), HasSubstr("impossible"));
  // The writer likewise: room it knew of is used, and an impossible read position refused.
  EXPECT_EQ(writer.write(full.data(), region.capacity / 2), region.capacity / 2);
  l.control[0]->tail.store(1u << 30);
  EXPECT_EQ(writer.write(full.data(), region.capacity / 4), region.capacity / 4);
  EXPECT_TRUE(writer.corrupt().empty());
  EXPECT_EQ(writer.write(full.data(), region.capacity / 2), 0u);
  EXPECT_THAT(writer.corrupt(), HasSubstr("impossible"));
}

TEST(ShmRing, ARegionThatIsNotOursIsRefused) {
  const int fd = ::memfd_create("not-baton", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::ftruncate(fd, static_cast<off_t>(shm::region_size(4096))), 0);
  ASSERT_EQ(::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL), 0);
  shm::Region out;
  EXPECT_THAT(shm::Region::map(fd, out), HasSubstr("not a baton link region"));
}

}  // namespace
}  // namespace baton::net
