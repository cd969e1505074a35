// Authenticated links: every connection proves it holds the job's secret before any frame.
// Raw socket clients play the hostile peers (no handshake, a wrong secret, a replayed answer,
// garbage after a good handshake); waits are on conditions with a generous deadline.

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <random>

#include "baton/net/link.hpp"
#include "net/inbox.test.hpp"
#include "net/refusal_log.hpp"

namespace baton::net {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;

constexpr std::size_t kChallenge = 10 + 32;  // "BATONAUTH1" and a nonce

using testing::Inbox;
using testing::kDeadline;
using testing::make;
using testing::RawClient;

std::string hmac(const std::string& secret, const std::string& label, const std::string& a,
                 const std::string& b) {
  const std::string msg = label + a + b;
  unsigned char out[32];
  unsigned int len = 0;
  HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()),
       reinterpret_cast<const unsigned char*>(msg.data()), msg.size(), out, &len);
  return std::string(reinterpret_cast<char*>(out), len);
}

/// A raw unix-socket client: it speaks (or fails to speak) the handshake by hand.
/// Answers a challenge on `raw` as a dialler holding `secret` would; returns the answer sent.
std::string answer(RawClient& raw, const std::string& challenge, const std::string& secret) {
  const std::string theirs = challenge.substr(10);
  const std::string mine(32, 'n');
  const std::string a = mine + hmac(secret, "dial", theirs, mine);
  raw.write(a);
  return a;
}

std::string unix_path(const std::string& tag) {
  return "/tmp/baton-auth-" + tag + "-" + std::to_string(::getpid()) + ".sock";
}

/// A listener holding `secret` that counts and records every link it accepts.
struct Server {
  explicit Server(IoThread& io, std::string secret_in, const std::string& tag,
                  LinkOptions options = {})
      : secret(std::move(secret_in)), path(unix_path(tag)) {
    options.secret = secret;
    listener = Listener::listen(
        io, Address::parse("unix://" + path),
        [this](const std::shared_ptr<Link>&) {
          std::lock_guard lock(mu);
          auto inbox = std::make_shared<Inbox>();
          inboxes.push_back(inbox);
          cv.notify_all();
          // The link may report its close after this Server is gone: its handler keeps the
          // inbox alive.
          LinkHandler h = inbox->handler();
          return LinkHandler{[inbox, f = std::move(h.on_envelope)](Envelope e) { f(std::move(e)); },
                             [inbox, f = std::move(h.on_closed)](
                                 LinkEnd end, const std::string& r) { f(end, r); }};
        },
        options);
  }
  std::size_t accepted() {
    std::lock_guard lock(mu);
    return inboxes.size();
  }
  Inbox& wait_accepted(std::size_t i) {
    std::unique_lock lock(mu);
    if (!cv.wait_for(lock, kDeadline, [&] { return inboxes.size() > i; })) {
      throw std::runtime_error("no link accepted");
    }
    return *inboxes[i];
  }
  std::size_t envelopes_received() {
    std::lock_guard lock(mu);
    std::size_t n = 0;
    for (auto& in : inboxes) {
      std::lock_guard inner(in->mu);
      n += in->envelopes.size();
    }
    return n;
  }

  std::string secret;
  std::string path;
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::shared_ptr<Inbox>> inboxes;
  std::unique_ptr<Listener> listener;
};

LinkOptions with_secret(const std::string& secret) {
  LinkOptions o;
  o.secret = secret;
  return o;
}

TEST(Auth, PeersHoldingTheSecretLinkAndExchangeFrames) {
  IoThread io;
  const std::string secret = new_job_secret();
  EXPECT_EQ(secret.size(), 64u);
  EXPECT_NE(secret, new_job_secret());
  Server server(io, secret, "good");
  Inbox client_in;
  auto link = Link::connect(io, Address::parse("unix://" + server.path), client_in.handler(),
                            with_secret(secret));
  ASSERT_TRUE(link->send(make(1)));  // queued until the handshake is done
  Inbox& in = server.wait_accepted(0);
  ASSERT_TRUE(in.wait_envelopes(1));
  EXPECT_EQ(in.envelopes[0].dest.port, 1u);
  link->close_and_wait("done");
}

TEST(Auth, AWrongSecretIsRefusedBeforeAnyFrame) {
  IoThread io;
  Server server(io, new_job_secret(), "wrong");
  Inbox client_in;
  auto link = Link::connect(io, Address::parse("unix://" + server.path), client_in.handler(),
                            with_secret(new_job_secret()));
  // Queued, or refused at once if the handshake has already failed: either way it never lands.
  (void)link->send(make(1));
  EXPECT_THAT(client_in.wait_closed(), HasSubstr("during authentication"));
  EXPECT_EQ(server.accepted(), 0u);
  EXPECT_EQ(server.envelopes_received(), 0u);
}

TEST(Auth, ADiallerSendsNothingToAListenerThatCannotProveTheSecret) {
  IoThread io;
  // A listener without authentication: it never sends the challenge.
  const std::string path = unix_path("open");
  std::mutex mu;
  std::vector<std::shared_ptr<Inbox>> inboxes;
  auto open =
      Listener::listen(io, Address::parse("unix://" + path), [&](const std::shared_ptr<Link>&) {
        std::lock_guard lock(mu);
        inboxes.push_back(std::make_unique<Inbox>());
        return inboxes.back()->handler();
      });
  LinkOptions options = with_secret(new_job_secret());
  options.dead_after = 300ms;
  Inbox client_in;
  auto link = Link::connect(io, Address::parse("unix://" + path), client_in.handler(), options);
  ASSERT_TRUE(link->send(make(1)));
  EXPECT_THAT(client_in.wait_closed(), HasSubstr("did not complete authentication"));
  std::lock_guard lock(mu);
  for (auto& in : inboxes) {
    std::lock_guard inner(in->mu);
    EXPECT_TRUE(in->envelopes.empty());  // not even the hello went out
  }
}

TEST(Auth, AClientThatSkipsTheHandshakeIsRefused) {
  IoThread io;
  Server server(io, new_job_secret(), "skip");
  RawClient raw(server.path);
  const std::string challenge = raw.read(kChallenge);
  ASSERT_EQ(challenge.size(), kChallenge);
  EXPECT_EQ(challenge.substr(0, 10), "BATONAUTH1");
  // Frames straight away, as a peer without authentication would send them.
  Envelope env = make(7);
  env.seq = 0;
  raw.write(encode_frame(env).flatten() + encode_frame(env).flatten());
  EXPECT_TRUE(raw.closed_by_server());
  EXPECT_EQ(server.accepted(), 0u);
  EXPECT_EQ(server.envelopes_received(), 0u);
}

TEST(Auth, AReplayedAnswerIsRefused) {
  IoThread io;
  Server server(io, new_job_secret(), "replay");
  std::string captured;
  {
    // A good handshake, recorded on the wire.
    RawClient raw(server.path);
    const std::string challenge = raw.read(kChallenge);
    captured = answer(raw, challenge, server.secret);
    const std::string proof = raw.read(32);
    EXPECT_EQ(proof, hmac(server.secret, "accept", captured.substr(0, 32), challenge.substr(10)));
    server.wait_accepted(0);
  }
  RawClient replay(server.path);
  const std::string fresh = replay.read(kChallenge);
  ASSERT_EQ(fresh.size(), kChallenge);
  replay.write(captured);  // last time's answer, to a new challenge
  EXPECT_TRUE(replay.closed_by_server());
  EXPECT_EQ(server.accepted(), 1u);  // only the honest one
}

TEST(Auth, RandomAndTruncatedAnswersAreAllRefusedAndTheListenerGoesOn) {
  IoThread io;
  Server server(io, new_job_secret(), "random");
  std::mt19937 rng(7);
  for (int round = 0; round < 300; ++round) {
    RawClient raw(server.path);
    ASSERT_EQ(raw.read(kChallenge).size(), kChallenge);
    // A random answer of random length (short ones are cut off by closing the connection).
    std::string junk(rng() % 80, '\0');
    for (char& c : junk) c = static_cast<char>(rng());
    raw.write(junk);
    if (junk.size() < 64) raw.shutdown_writes();
    EXPECT_TRUE(raw.closed_by_server()) << "round " << round;
  }
  EXPECT_EQ(server.accepted(), 0u);
  // The listener still accepts an honest peer.
  Inbox client_in;
  auto link = Link::connect(io, Address::parse("unix://" + server.path), client_in.handler(),
                            with_secret(server.secret));
  ASSERT_TRUE(link->send(make(1)));
  ASSERT_TRUE(server.wait_accepted(0).wait_envelopes(1));
  link->close_and_wait("done");
}

TEST(Auth, MalformedFramesAfterAGoodHandshakeCloseOnlyThatLink) {
  IoThread io;
  Server server(io, new_job_secret(), "hostile");
  Inbox healthy_in;
  auto healthy = Link::connect(io, Address::parse("unix://" + server.path), healthy_in.handler(),
                               with_secret(server.secret));
  Inbox& healthy_server = server.wait_accepted(0);
  auto frame = [](std::uint64_t seq) {
    Envelope env = make(seq);
    env.seq = seq;
    return encode_frame(env).flatten();
  };
  struct Hostile {
    const char* name;
    std::string bytes;
    const char* reason;
  };
  std::string bad_magic = frame(0);
  bad_magic[5] ^= 0x5a;
  const std::vector<Hostile> kinds = {
      {"absurd header length", std::string("\xff\xff\xff\x7f", 4), "exceeds the limit"},
      {"bad header bytes", bad_magic, "bad frame magic"},
      {"sequence gap", frame(0) + frame(3), "sequence gap"},
      {"truncated frame", frame(0).substr(0, 9), "peer closed"},
  };
  std::size_t n = 1;
  for (const auto& k : kinds) {
    {
      RawClient raw(server.path);
      answer(raw, raw.read(kChallenge), server.secret);
      ASSERT_EQ(raw.read(32).size(), 32u) << k.name;
      Inbox& victim = server.wait_accepted(n++);
      raw.write(k.bytes);
      if (std::string(k.name) == "truncated frame") {
        // closing mid-frame is the hostile part
      } else {
        EXPECT_THAT(victim.wait_closed(), HasSubstr(k.reason)) << k.name;
        continue;
      }
    }
    EXPECT_THAT(server.wait_accepted(n - 1).wait_closed(), HasSubstr(k.reason)) << k.name;
  }
  // The healthy link never noticed.
  ASSERT_TRUE(healthy->send(make(1)));
  ASSERT_TRUE(healthy_server.wait_envelopes(1));
  EXPECT_FALSE(healthy->closed());
  healthy->close_and_wait("done");
}

/// Lines a listener logged, collected from the I/O thread.
struct LogLines {
  std::mutex mu;
  std::vector<std::string> lines;
  std::function<void(const std::string&)> sink() {
    return [this](const std::string& line) {
      std::lock_guard lock(mu);
      lines.push_back(line);
    };
  }
  std::vector<std::string> snapshot() {
    std::lock_guard lock(mu);
    return lines;
  }
};

TEST(Auth, RefusalLinesAreLimitedPerWindowAndTheRestSummedUp) {
  std::vector<std::string> lines;
  internal::RefusalLog log("unix:///x", 2, 1000ms,
                           [&](const std::string& line) { lines.push_back(line); });
  const auto t0 = internal::RefusalLog::Clock::time_point{} + 1h;
  EXPECT_FALSE(log.refused("a", t0));
  EXPECT_FALSE(log.refused("b", t0 + 10ms));
  EXPECT_TRUE(log.refused("c", t0 + 20ms));  // the first held back: its owner arms a flush
  EXPECT_FALSE(log.refused("d", t0 + 30ms));
  EXPECT_EQ(log.window_end(), t0 + 1000ms);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0], "unix:///x refused a connection: a");
  EXPECT_EQ(lines[1], "unix:///x refused a connection: b");
  // The first refusal after the window: the window's summary, then a line of its own.
  EXPECT_FALSE(log.refused("e", t0 + 1500ms));
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[2], "unix:///x refused 2 more connections in the last 1.5 s (last reason: d)");
  EXPECT_EQ(lines[3], "unix:///x refused a connection: e");
  EXPECT_FALSE(log.refused("f", t0 + 1600ms));
  EXPECT_TRUE(log.refused("g", t0 + 1700ms));
  log.flush(t0 + 2500ms);  // the window's end, as its owner's timer calls it
  ASSERT_EQ(lines.size(), 6u);
  EXPECT_EQ(lines[5], "unix:///x refused 1 more connection in the last 1.0 s (last reason: g)");
  log.flush(t0 + 2600ms);  // nothing held back: no line
  EXPECT_EQ(lines.size(), 6u);
}

TEST(Auth, AFloodOfRefusedConnectionsLogsAFewLinesAndOneSummaryAndTheListenerGoesOn) {
  LogLines log;  // before the I/O thread: a listener's handshakes may log until it stops
  IoThread io;
  LinkOptions options;
  options.log = log.sink();
  options.refusal_log_lines = 5;
  options.refusal_log_window = std::chrono::hours(1);  // one window for the whole flood: no timing
  auto server = std::make_unique<Server>(io, new_job_secret(), "flood", options);
  constexpr int kGarbage = 500;
  for (int i = 0; i < kGarbage; ++i) {
    RawClient raw(server->path);
    ASSERT_EQ(raw.read(kChallenge).size(), kChallenge) << i;
    if (i % 2 == 0) {
      raw.shutdown_writes();  // no answer at all
    } else {
      raw.write(std::string(64, 'x'));  // an answer of the right size that proves nothing
    }
    ASSERT_TRUE(raw.closed_by_server()) << i;  // refused, and logged or counted, by now
  }
  auto lines = log.snapshot();
  ASSERT_EQ(lines.size(), 5u);
  for (const auto& line : lines) EXPECT_THAT(line, HasSubstr("refused a connection: "));
  EXPECT_EQ(server->accepted(), 0u);
  // The listener still serves an honest peer.
  Inbox client_in;
  auto link = Link::connect(io, Address::parse("unix://" + server->path), client_in.handler(),
                            with_secret(server->secret));
  ASSERT_TRUE(link->send(make(1)));
  ASSERT_TRUE(server->wait_accepted(0).wait_envelopes(1));
  link->close_and_wait("done");
  server.reset();  // the listener goes: what it held back is summed up
  lines = log.snapshot();
  ASSERT_EQ(lines.size(), 6u);
  EXPECT_THAT(lines[5], HasSubstr("refused " + std::to_string(kGarbage - 5) +
                                  " more connections in the last "));
  EXPECT_THAT(lines[5], HasSubstr("(last reason: the peer failed authentication"));
}

}  // namespace
}  // namespace baton::net
