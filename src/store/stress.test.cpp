// The tensor store under load: a tensor larger than 4 GiB, a value larger than one message both
// ways, 1,000 put/delete cycles that leave nothing behind, a put whose writer dies half way,
// readers and writers of one key at once that never see a torn version, a volume killed during
// a large get, and 10,000 small tensors in one batch. This binary is its own worker: main()
// creates the Runtime first.

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>

#include "baton/baton.hpp"

namespace baton::store {
namespace {

using ::testing::HasSubstr;
constexpr std::size_t kMiB = std::size_t{1} << 20;

/// Byte `g` of the test's pattern.
std::byte pattern(std::uint64_t g) {
  return static_cast<std::byte>(g % 251);
}

Bytes patterned(std::uint64_t first, std::size_t n) {
  return Bytes::make(n, [&](std::span<std::byte> b) {
    for (std::size_t i = 0; i < n; ++i) b[i] = pattern(first + i);
  });
}

/// A number from /proc/<pid>/status (VmRSS, in kB).
std::size_t status_kb(int pid, const std::string& field) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(field + ":", 0) == 0) return std::stoul(line.substr(field.size() + 1));
  }
  return 0;
}

std::size_t open_fds(int pid) {
  std::size_t n = 0;
  for ([[maybe_unused]] const auto& e :
       std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd")) {
    ++n;
  }
  return n;
}

/// Writes and reads one key from actors, at once.
class Peer : public Actor {
 public:
  int pid() { return static_cast<int>(::getpid()); }
  /// Puts this rank's half of a [2, kCols] tensor, every element `step`, for steps 1..steps.
  Task<int> write(Store s, int steps) {
    const Box mine{{static_cast<std::int64_t>(context().rank), 0}, {1, kCols}};
    const TensorInfo info{"float32", 4, {2, kCols}};
    const PutOptions options{.shard = mine, .keep = 2};
    for (int step = 1; step <= steps; ++step) {
      const std::vector<float> v(kCols, static_cast<float>(step));
      Bytes value = Bytes::copy(v.data(), v.size() * sizeof(float));
      co_await s.put(kKey, std::move(value), info, options);
    }
    co_return steps;
  }
  /// Reads the key until it holds step `last`; the reads whose elements were not all alike.
  Task<std::vector<int>> read(Store s, int last) {
    int reads = 0;
    int torn = 0;
    for (bool done = false; !done;) {
      float first = 0;
      bool alike = true;
      try {
        const Got got = co_await s.get(kKey);
        const auto* f = reinterpret_cast<const float*>(got.data.data());
        first = f[0];
        for (std::int64_t i = 1; i < 2 * kCols; ++i) alike = alike && f[i] == first;
      } catch (const KeyNotFound&) {
        continue;  // no version complete yet
      }
      ++reads;
      torn += alike ? 0 : 1;
      done = first == static_cast<float>(last);
    }
    co_return std::vector<int>{reads, torn};
  }
  /// Puts the top half (rows [0, rows/2)) of a [rows, 4096] uint8 tensor under `key`, whose other
  /// half nobody puts: a sharded put its other owner never finishes.
  Task<bool> put_half(Store s, std::string key, std::int64_t rows) {
    const TensorInfo info{"uint8", 1, {rows, 4096}};
    const PutOptions options{.shard = Box{{0, 0}, {rows / 2, 4096}}};
    Bytes half = patterned(0, static_cast<std::size_t>(rows / 2) * 4096);
    const Put put = co_await s.put(key, std::move(half), info, options);
    co_return put.complete;
  }
  static constexpr std::int64_t kCols = 1 << 14;
  static inline const std::string kKey = "contended";
  static constexpr auto endpoints =
      baton::endpoints<&Peer::pid, &Peer::write, &Peer::read, &Peer::put_half>();
};

struct Stress : ::testing::Test {
  ProcMesh procs = this_host().spawn_procs({{"procs", 2}});
  Store store = Store::create(procs, Spread::single);
  ActorMesh<Peer> peers = procs.spawn<Peer>("peers");
  ~Stress() override { procs.stop().get(); }
};

TEST_F(Stress, ATensorLargerThan4GiBIsPutAsShardsAndReadWholeAndAcrossTheBoundary) {
  // 4.5 GiB of uint8 in 18 shards of 256 MiB; the reader's copy as much again. A machine
  // without the memory for both runs the largest that fits, and says so.
  std::size_t total = std::size_t{18} * 256 * kMiB;
  const std::size_t available = [] {
    std::ifstream in("/proc/meminfo");
    for (std::string line; std::getline(in, line);) {
      if (line.rfind("MemAvailable:", 0) == 0) return std::stoul(line.substr(13)) * 1024;
    }
    return 0UL;
  }();
  if (available < 2 * total + (std::size_t{3} << 30)) {
    total = (available - (std::size_t{3} << 30)) / 2 / (256 * kMiB) * (256 * kMiB);
  }
  std::printf("tensor of %.2f GiB (MemAvailable %.1f GiB)\n",
              static_cast<double>(total) / (1 << 30), static_cast<double>(available) / (1 << 30));
  const TensorInfo info{"uint8", 1, {static_cast<std::int64_t>(total)}};
  for (std::size_t first = 0; first < total; first += 256 * kMiB) {
    const Box shard{{static_cast<std::int64_t>(first)}, {static_cast<std::int64_t>(256 * kMiB)}};
    store.put("huge", patterned(first, 256 * kMiB), info, {.shard = shard}).get();
  }
  // A box across the 4 GiB boundary (or the middle, on a smaller machine).
  const std::int64_t at = std::min<std::int64_t>(std::int64_t{1} << 32, total / 2) - 1000;
  const Got across = store.get("huge", {.box = Box{{at}, {3000}}}).get();
  ASSERT_EQ(across.data.size(), 3000u);
  for (std::size_t i = 0; i < 3000; ++i) {
    ASSERT_EQ(across.data.data()[i], pattern(static_cast<std::uint64_t>(at) + i)) << i;
  }
  // The whole, into memory of ours, in pieces of one message each.
  std::unique_ptr<std::byte[]> whole(new std::byte[total]);
  store.get_into("huge", std::span<std::byte>(whole.get(), total)).get();
  std::uint64_t sum = 0;
  for (std::size_t i = 0; i < total; ++i) sum += static_cast<std::uint64_t>(whole[i]);
  std::uint64_t expected = 0;  // sum of g % 251 over g < total
  expected += (total / 251) * (250 * 251 / 2);
  for (std::uint64_t r = 0; r < total % 251; ++r) expected += r;
  EXPECT_EQ(sum, expected);
  for (std::size_t i = 0; i < total; i += 4093) ASSERT_EQ(whole[i], pattern(i)) << i;
}

TEST_F(Stress, AValueLargerThanAMessageIsPutAndGotInPieces) {
  const std::size_t n = 600 * kMiB;  // three pieces each way
  const TensorInfo info{"uint8", 1, {static_cast<std::int64_t>(n / 1024), 1024}};
  EXPECT_TRUE(store.put("big", patterned(0, n), info).get().complete);
  const Got got = store.get("big").get();
  ASSERT_EQ(got.data.size(), n);
  for (std::size_t i = 0; i < n; i += 997) ASSERT_EQ(got.data.data()[i], pattern(i)) << i;
  EXPECT_EQ(got.data.data()[n - 1], pattern(n - 1));
}

TEST_F(Stress, AThousandPutAndDeleteCyclesLeaveNothingBehind) {
  const int volume_pid = peers.at(0).call(&Peer::pid).get();
  std::vector<std::byte> into(16 * kMiB);
  auto cycle = [&](int i) {
    // One in ten a slab (a memfd shared with the volume), the rest through the ring; half the
    // slabs are read into memory of ours, one-sided under a lease (registered, then released).
    const std::size_t n = i % 10 == 0 ? 16 * kMiB : std::size_t{64} * 1024;
    store.put("cycle", patterned(static_cast<std::uint64_t>(i), n)).get();
    if (i % 20 == 0) {
      store.get_into("cycle", std::span(into)).get();
      EXPECT_EQ(into[n - 1], pattern(static_cast<std::uint64_t>(i) + n - 1));
    } else {
      EXPECT_EQ(store.get("cycle").get().data.data()[n - 1],
                pattern(static_cast<std::uint64_t>(i) + n - 1));
    }
    store.erase("cycle").get();
  };
  for (int i = 0; i < 50; ++i) cycle(i);  // warm: pools, mappings, link buffers
  const std::size_t fds = open_fds(volume_pid);
  const std::size_t my_fds = open_fds(::getpid());
  const std::size_t rss = status_kb(volume_pid, "VmRSS");
  for (int i = 50; i < 1050; ++i) cycle(i);
  std::printf("volume: %zu fds, %zu kB resident before; %zu fds, %zu kB after\n", fds, rss,
              open_fds(volume_pid), status_kb(volume_pid, "VmRSS"));
  EXPECT_LE(open_fds(volume_pid), fds + 2);
  EXPECT_LE(open_fds(::getpid()), my_fds + 2);
  EXPECT_LT(status_kb(volume_pid, "VmRSS"), rss + std::size_t{64} * 1024);
  const auto stats = store.stats().get();
  ASSERT_EQ(stats.size(), 1u);
  EXPECT_EQ(stats[0].bytes_held, 0u);
  EXPECT_EQ(stats[0].versions, 0u);
}

TEST_F(Stress, APutWhoseWriterDiesHalfWayHoldsNothingOnceTheNextVersionLands) {
  // The volume is in the first proc (Spread::single); the writer, in the second, puts one of
  // the two shards of a 64 MiB tensor and is killed before anyone puts the other.
  constexpr std::int64_t kRows = 16384;
  constexpr std::size_t kBytes = std::size_t{kRows} * 4096;
  const int volume_pid = peers.at(0).call(&Peer::pid).get();
  store.put("warm", patterned(0, kBytes / 2)).get();  // mappings and buffers of this size
  store.erase("warm").get();
  const std::size_t fds = open_fds(volume_pid);
  const std::size_t my_fds = open_fds(::getpid());
  ASSERT_FALSE(peers.at(1).call(&Peer::put_half, store, std::string("half"), kRows).get());
  ASSERT_EQ(::kill(peers.at(1).call(&Peer::pid).get(), SIGKILL), 0);
  // The half it put is held, and is no version anyone reads.
  auto stats = store.stats().get()[0];
  EXPECT_EQ(stats.versions, 1u);
  EXPECT_EQ(stats.bytes_held, kBytes / 2);
  EXPECT_FALSE(store.exists("half").get());
  EXPECT_THROW(store.get("half").get(), StoreError);
  // The next whole version lands and is read; the half-made one goes with it.
  const TensorInfo info{"uint8", 1, {kRows, 4096}};
  EXPECT_TRUE(store.put("half", patterned(7, kBytes), info).get().complete);
  EXPECT_EQ(store.get("half").get().data.data()[kBytes - 1], pattern(7 + kBytes - 1));
  stats = store.stats().get()[0];
  EXPECT_EQ(stats.versions, 1u);
  EXPECT_EQ(stats.bytes_held, kBytes);
  store.erase("half").get();
  stats = store.stats().get()[0];
  EXPECT_EQ(stats.versions, 0u);
  EXPECT_EQ(stats.bytes_held, 0u);
  // No shared memory of either put is left: the volume's descriptors and the controller's are
  // as before (each slab is a memfd while anything maps it).
  EXPECT_LE(open_fds(volume_pid), fds + 2);
  EXPECT_LE(open_fds(::getpid()), my_fds + 2);
}

TEST_F(Stress, ReadersAndWritersOfOneKeyAtOnceNeverSeeATornVersion) {
  constexpr int kSteps = 300;
  // Readers in both procs read while writers there put their halves (an actor handles one
  // message at a time, so they are other actors); every read is one whole version.
  auto readers = procs.spawn<Peer>("readers");
  auto reads = readers.call(&Peer::read, store, kSteps);
  auto writes = peers.call(&Peer::write, store, kSteps);
  EXPECT_EQ(writes.get(std::chrono::seconds(120)).size(), 2u);
  const auto done = reads.get(std::chrono::seconds(120));
  for (std::size_t m = 0; m < done.size(); ++m) {
    std::printf("reader %zu: %d reads\n", m, done[m][0]);
    EXPECT_GT(done[m][0], 0);
    EXPECT_EQ(done[m][1], 0) << "torn reads";
  }
}

TEST_F(Stress, AVolumeKilledDuringALargeGetEndsItInBoundedTime) {
  const std::size_t n = 768 * kMiB;
  store.put("doomed", patterned(0, n), {"uint8", 1, {static_cast<std::int64_t>(n / 4096), 4096}})
      .get();
  std::unique_ptr<std::byte[]> into(new std::byte[n]);
  const std::size_t my_fds = open_fds(::getpid());
  Future<Got> f = store.get_into("doomed", std::span<std::byte>(into.get(), n));
  ASSERT_EQ(::kill(peers.at(0).call(&Peer::pid).get(), SIGKILL), 0);
  std::string outcome = "done";
  try {
    f.get(std::chrono::seconds(60));  // a hang fails here with TimeoutError
  } catch (const StoreError& e) {
    outcome = e.what();
    EXPECT_THAT(outcome, HasSubstr("get of 'doomed'"));
  }
  std::printf("%s\n", outcome.c_str());
  // Nothing of the get is left here: the pieces that came are unmapped, their memfds closed.
  EXPECT_LE(open_fds(::getpid()), my_fds + 2);
  // The store goes on with the volume it has left... none, here: a put says so.
  EXPECT_THROW(store.put("after", Bytes::copy("x")).get(std::chrono::seconds(60)), StoreError);
}

TEST_F(Stress, TenThousandSmallTensorsGoInOneBatch) {
  constexpr int kCount = 10000;
  std::vector<std::tuple<std::string, Bytes, TensorInfo, PutOptions>> batch;
  std::vector<std::string> keys;
  batch.reserve(kCount);
  keys.reserve(kCount);
  for (int i = 0; i < kCount; ++i) {
    keys.push_back("small/" + std::to_string(i));
    batch.emplace_back(keys.back(), patterned(static_cast<std::uint64_t>(i), 4096),
                       TensorInfo{"float32", 4, {1024}}, PutOptions{});
  }
  ASSERT_EQ(store.put_batch(batch).get().size(), static_cast<std::size_t>(kCount));
  const auto got = store.get_batch(keys).get();
  ASSERT_EQ(got.size(), static_cast<std::size_t>(kCount));
  for (int i = 0; i < kCount; ++i) {
    ASSERT_EQ(got[i].data.data()[0], pattern(static_cast<std::uint64_t>(i))) << i;
  }
  EXPECT_EQ(store.keys("small/").get().size(), static_cast<std::size_t>(kCount));
}

}  // namespace
}  // namespace baton::store

int main(int argc, char** argv) {
  baton::RuntimeOptions options;
  options.supervise = [](const baton::MeshFailure&) { return true; };  // the kill test's own
  baton::Runtime rt(argc, argv, options);  // a worker serves here and never returns
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
