// Load without loss, in bounded memory: four worker processes flood one slow actor in a fifth.
// Backpressure (a full mailbox stops its link reading; a full link makes its sender wait) keeps
// every process's peak memory bounded, and nothing is lost or reordered. This binary is its own
// worker: main() creates the Runtime first, which in a worker never returns.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "baton/baton.hpp"
#include "mesh/cast_impl.hpp"
#include "mesh/host_fanout.test.hpp"

namespace baton {
namespace {

constexpr int kSenders = 4;
constexpr std::int64_t kPerSender = 250000;  // a million messages in all
// How much any one process's peak memory may grow over what it held when its actor started.
// Measured on a 2-core VM with the bounds of main(): a few MiB each; without them
// (BATON_TEST_UNBOUNDED=1) the senders grow by about 55 MiB each in the first test, and the sink
// holds most of the 100 MiB in the second. Under ThreadSanitizer growth stays within the bound.
constexpr std::int64_t kBoundKib = std::int64_t{24} * 1024;

/// Peak resident memory of this process, in KiB (VmHWM).
std::int64_t peak_rss_kib() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::atoll(line.c_str() + 6);
  }
  return -1;
}

class Sink : public Actor {
 public:
  void take(int sender, std::int64_t seq) {
    auto& last = last_.at(static_cast<std::size_t>(sender));
    if (seq != last + 1) ++disorder_;
    last = seq;
    ++count_;
    // Slower than the senders, so that without backpressure its mailbox would grow.
    work(200);
  }
  /// A heavier message: a payload, and more work than the link takes to bring it.
  void take_big(int sender, std::int64_t seq, const Bytes& payload) {
    take(sender, seq);
    sink_ += payload.size();
    work(40000);
  }
  std::vector<std::int64_t> last() { return last_; }
  std::int64_t count() { return count_; }
  std::int64_t disorder() { return disorder_; }
  std::int64_t peak() { return peak_rss_kib() - start_kib_ + static_cast<std::int64_t>(sink_ & 0); }
  static constexpr auto endpoints = baton::endpoints<&Sink::take, &Sink::take_big, &Sink::last,
                                                     &Sink::count, &Sink::disorder, &Sink::peak>();

 private:
  std::vector<std::int64_t> last_ = std::vector<std::int64_t>(kSenders, -1);
  std::int64_t count_ = 0;
  std::int64_t disorder_ = 0;
  std::uint64_t sink_ = 0;  // keeps the busy work from being optimized away
  std::int64_t start_kib_ = peak_rss_kib();

  void work(int rounds) {
    std::uint64_t x = sink_ | 1;
    for (int i = 0; i < rounds; ++i) x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    sink_ += x;
  }
};

class Source : public Actor {
 public:
  /// Sends `n` messages, then a call that (FIFO per sender) the sink handles after them all.
  Task<std::int64_t> pump(ActorRef<Sink> sink, int me, std::int64_t n) {
    for (std::int64_t i = 0; i < n; ++i) sink.send(&Sink::take, me, i);
    co_await sink.call(&Sink::count);
    co_return n;
  }
  Task<std::int64_t> pump_big(ActorRef<Sink> sink, int me, std::int64_t n) {
    const Bytes payload = Bytes::copy(std::string(1024, 'p'));
    for (std::int64_t i = 0; i < n; ++i) sink.send(&Sink::take_big, me, i, payload);
    co_await sink.call(&Sink::count);
    co_return n;
  }
  std::int64_t peak() { return peak_rss_kib() - start_kib_; }
  static constexpr auto endpoints =
      baton::endpoints<&Source::pump, &Source::pump_big, &Source::peak>();

 private:
  std::int64_t start_kib_ = peak_rss_kib();
};

TEST(Load, AMillionMessagesToOneSlowActorArriveInOrderInBoundedMemory) {
  auto procs = this_host().spawn_procs({{"procs", kSenders + 1}});
  auto sink = procs.slice("procs", 0).spawn<Sink>("sink");
  auto sources = procs.slice("procs", 1, kSenders + 1).spawn<Source>("sources");
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<Future<std::int64_t>> pumps;
  pumps.reserve(kSenders);
  for (int s = 0; s < kSenders; ++s) {
    pumps.push_back(sources.slice("procs", static_cast<std::size_t>(s))
                        .call_one(&Source::pump, sink.at(0), s, kPerSender));
  }
  for (auto& p : pumps) EXPECT_EQ(p.get(), kPerSender);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(sink.call_one(&Sink::count).get(), kSenders * kPerSender);
  EXPECT_EQ(sink.call_one(&Sink::disorder).get(), 0);
  EXPECT_EQ(sink.call_one(&Sink::last).get(), std::vector<std::int64_t>(kSenders, kPerSender - 1));
  const std::int64_t sink_peak = sink.call_one(&Sink::peak).get();
  const ValueMesh<std::int64_t> source_peaks = sources.call(&Source::peak).get();
  std::printf("1M messages in %.2f s (%.0f msg/s); peak RSS growth: sink %lld KiB, sources", secs,
              static_cast<double>(kSenders * kPerSender) / secs, static_cast<long long>(sink_peak));
  for (auto p : source_peaks.values()) std::printf(" %lld", static_cast<long long>(p));
  std::printf(" KiB\n");
  EXPECT_LT(sink_peak, kBoundKib);
  for (auto p : source_peaks.values()) EXPECT_LT(p, kBoundKib);
  procs.stop().get();
}

TEST(Load, AFullMailboxStopsItsLinkAndTheSendersWaitInBoundedMemory) {
  constexpr std::int64_t kBig = 25000;  // 1 KiB each: 100 MiB in all
  auto procs = this_host().spawn_procs({{"procs", kSenders + 1}});
  auto sink = procs.slice("procs", 0).spawn<Sink>("sink");
  auto sources = procs.slice("procs", 1, kSenders + 1).spawn<Source>("sources");
  std::vector<Future<std::int64_t>> pumps;
  pumps.reserve(kSenders);
  for (int s = 0; s < kSenders; ++s) {
    pumps.push_back(sources.slice("procs", static_cast<std::size_t>(s))
                        .call_one(&Source::pump_big, sink.at(0), s, kBig));
  }
  for (auto& p : pumps) EXPECT_EQ(p.get(), kBig);
  EXPECT_EQ(sink.call_one(&Sink::count).get(), kSenders * kBig);
  EXPECT_EQ(sink.call_one(&Sink::disorder).get(), 0);
  const std::int64_t sink_peak = sink.call_one(&Sink::peak).get();
  const ValueMesh<std::int64_t> source_peaks = sources.call(&Source::peak).get();
  std::printf("100 MiB to a slow actor; peak RSS growth: sink %lld KiB, sources",
              static_cast<long long>(sink_peak));
  for (auto p : source_peaks.values()) std::printf(" %lld", static_cast<long long>(p));
  std::printf(" KiB\n");
  EXPECT_LT(sink_peak, kBoundKib);
  for (auto p : source_peaks.values()) EXPECT_LT(p, kBoundKib);
  procs.stop().get();
}

/// A member of a broadcast mesh; those whose rank is listed are slower than the links that bring
/// their messages.
class Slow : public Actor {
 public:
  explicit Slow(const std::vector<std::size_t>& slow_ranks)
      : slow_(std::find(slow_ranks.begin(), slow_ranks.end(), context().rank) != slow_ranks.end()) {
  }

  void take(std::int64_t seq, const Bytes& payload) {
    if (seq != last_ + 1) ++disorder_;
    last_ = seq;
    bytes_ += static_cast<std::int64_t>(payload.size());
    // Slow without taking a core from the sender (13 processes share 2 here): a pause, not
    // busy work. It orders nothing; it only makes this member slower than its link.
    if (slow_) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::int64_t last() { return last_; }
  std::int64_t disorder() { return disorder_; }
  std::int64_t bytes() { return bytes_; }
  std::int64_t peak() { return peak_rss_kib() - start_kib_; }
  static constexpr auto endpoints =
      baton::endpoints<&Slow::take, &Slow::last, &Slow::disorder, &Slow::bytes, &Slow::peak>();

 private:
  bool slow_;
  std::int64_t last_ = -1;
  std::int64_t disorder_ = 0;
  std::int64_t bytes_ = 0;
  std::int64_t start_kib_ = peak_rss_kib();
};

// A broadcast to 12 members goes through the cast tree: the controller sends to the head of each
// subtree, and each head forwards to the members behind it on its I/O thread, which cannot wait
// for room. Here the heads are quick and the members behind them slow, so a head's link to its
// slow member fills; the head must then stop reading from the controller rather than queue, so
// that the controller waits and every process holds a bounded amount. Without that each head
// would hold most of the 96 MiB sent (about 70 MiB here).
TEST(Load, CastsForwardedToSlowMembersWaitUpstreamInBoundedMemory) {
  constexpr std::int64_t kCasts = 6000;  // 16 KiB each: 96 MiB to every member
  constexpr std::size_t kMembers = 12;   // more than the fan-out: some members are forwarded to
  constexpr int kFanOut = 8;
  const test_support::HostFanOut fanout(kFanOut);
  auto procs = this_host().spawn_procs({{"procs", kMembers}});
  std::vector<std::size_t> behind_heads;  // the members a head forwards to
  for (auto [b, e] : detail::cast_impl::split(0, kMembers, kFanOut)) {
    for (std::size_t r = b + 1; r < e; ++r) behind_heads.push_back(r);
  }
  ASSERT_FALSE(behind_heads.empty());
  auto slow = procs.spawn<Slow>("slow", behind_heads);
  const Bytes payload = Bytes::copy(std::string(16384, 'c'));
  for (std::int64_t i = 0; i < kCasts; ++i) slow.broadcast(&Slow::take, i, payload);
  // FIFO across the tree's paths: this call reaches each member after every broadcast.
  EXPECT_EQ(slow.call(&Slow::last).get().values(), std::vector<std::int64_t>(kMembers, kCasts - 1));
  EXPECT_EQ(slow.call(&Slow::disorder).get().values(), std::vector<std::int64_t>(kMembers, 0));
  EXPECT_EQ(slow.call(&Slow::bytes).get().values(),
            std::vector<std::int64_t>(kMembers, kCasts * 16384));
  const ValueMesh<std::int64_t> peaks = slow.call(&Slow::peak).get();
  std::printf("96 MiB broadcast to %zu members; peak RSS growth, KiB:", kMembers);
  for (auto p : peaks.values()) std::printf(" %lld", static_cast<long long>(p));
  std::printf("\n");
  // The heads forward: what they hold is the bound under test. A slow member holds its full
  // mailbox besides (mailbox_limit messages of 16 KiB), more under AddressSanitizer.
  for (std::size_t r = 0; r < kMembers; ++r) {
    const bool behind =
        std::find(behind_heads.begin(), behind_heads.end(), r) != behind_heads.end();
    EXPECT_LT(peaks[r],
              behind ? kBoundKib + std::int64_t{1000} * 16 + std::int64_t{16} * 1024 : kBoundKib)
        << "rank " << r;
  }
  procs.stop().get();
}

}  // namespace
}  // namespace baton

#if defined(__SANITIZE_ADDRESS__)
// AddressSanitizer keeps freed memory in a quarantine (256 MiB by default), which would count as
// growth here; a small one still catches a use after free in this traffic.
extern "C" const char* __asan_default_options() {  // NOLINT: named by the sanitizer runtime
  return "quarantine_size_mb=4:thread_local_quarantine_size_kb=64";
}
#endif

int main(int argc, char** argv) {
  baton::RuntimeOptions options;
  options.mailbox_limit = 1000;                          // messages waiting per actor
  options.link.max_queued_bytes = std::size_t{1} << 20;  // bytes waiting per link
  if (const char* unbounded = std::getenv("BATON_TEST_UNBOUNDED")) {
    (void)unbounded;  // to measure what the bounds save: both limits out of reach
    options.mailbox_limit = std::size_t{1} << 40;
    options.link.max_queued_bytes = std::size_t{1} << 40;
  }
  baton::Runtime rt(argc, argv, options);  // a worker serves here and never returns
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
