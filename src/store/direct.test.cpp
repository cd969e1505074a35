// The tensor store's direct mode over real worker processes: a writer's own memory published
// as versions, read whole and as boxes by the controller and by actors; the double-buffering
// promise (no read ever sees a buffer being written, with readers and the writer in other
// processes at once); a writer held back by a reader's lease until the reader lets go or the
// lease runs out; and bad input. This binary is its own worker: main() creates the Runtime first.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>

#include "baton/baton.hpp"
#include "store/volume.hpp"

namespace baton::store {
namespace {

using ::testing::HasSubstr;

constexpr std::int64_t kRows = 512;
constexpr std::int64_t kCols = 1024;  // 2 MiB of float32

TensorInfo info() {
  return {"float32", 4, {kRows, kCols}};
}

std::span<std::byte> bytes_of(std::vector<float>& v) {
  return std::as_writable_bytes(std::span<float>(v));
}

/// Writes versions of a direct key from memory of its own, two buffers of it.
class Writer : public Actor {
 public:
  /// Opens `key` and publishes versions 1..steps, every element of version n equal to n.
  Task<int> write(Store s, std::string key, int steps) {
    std::vector<std::span<std::byte>> buffers{bytes_of(mem_[0]), bytes_of(mem_[1])};
    const TensorInfo tensor = info();
    writer_ = co_await s.direct(key, tensor, buffers);
    for (int step = 1; step <= steps; ++step) {
      const std::size_t i = co_await writer_.acquire();
      std::fill(mem_[i].begin(), mem_[i].end(), static_cast<float>(step));
      co_await writer_.publish(i);
    }
    co_return steps;
  }
  Task<bool> close() {
    co_await writer_.close();
    co_return true;
  }
  static constexpr auto endpoints = baton::endpoints<&Writer::write, &Writer::close>();

 private:
  std::vector<float> mem_[2] = {std::vector<float>(kRows * kCols),
                                std::vector<float>(kRows* kCols)};
  DirectWriter writer_;
};

/// Reads a direct key until it holds version `last`: {reads, reads not all alike, versions
/// that went backwards}.
class Reader : public Actor {
 public:
  Task<std::vector<int>> read(Store s, std::string key, int last) {
    int reads = 0;
    int torn = 0;
    int backwards = 0;
    std::uint64_t seen = 0;
    for (bool done = false; !done;) {
      Got got;
      try {
        got = co_await s.get(key);
      } catch (const KeyNotFound&) {
        continue;  // nothing published yet
      }
      const auto* f = reinterpret_cast<const float*>(got.data.data());
      bool alike = true;
      for (std::int64_t i = 1; i < kRows * kCols; ++i) alike = alike && f[i] == f[0];
      ++reads;
      torn += alike ? 0 : 1;
      backwards += got.version < seen ? 1 : 0;
      seen = got.version;
      done = f[0] == static_cast<float>(last);
    }
    co_return std::vector<int>{reads, torn, backwards};
  }
  static constexpr auto endpoints = baton::endpoints<&Reader::read>();
};

struct Direct : ::testing::Test {
  ProcMesh procs = this_host().spawn_procs({{"procs", 2}});
  Store store = Store::create(procs, Spread::single);  // its volume in the first proc
  ~Direct() override { procs.stop().get(); }
};

TEST_F(Direct, AWritersMemoryIsReadWholeAndAsBoxesWithNothingCopiedIntoTheStore) {
  std::vector<float> a(kRows * kCols);
  std::vector<float> b(kRows * kCols);
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(i);
  DirectWriter w = store.direct("w", info(), {bytes_of(a), bytes_of(b)}).get();
  EXPECT_THROW(store.get("w").get(), KeyNotFound);  // nothing published yet
  const std::size_t first = w.acquire().get();
  ASSERT_EQ(w.buffer(first).data(), first == 0 ? bytes_of(a).data() : bytes_of(b).data());
  if (first == 1) std::memcpy(b.data(), a.data(), a.size() * sizeof(float));
  EXPECT_EQ(w.publish(first).get().version, 1u);
  EXPECT_TRUE(store.exists("w").get());
  EXPECT_EQ(store.latest_version("w").get(), 1u);
  EXPECT_EQ(store.keys().get(), std::vector<std::string>{"w"});
  // Whole, by an actor in another proc and here into our memory.
  auto readers = procs.spawn<Reader>("readers");
  const Got whole = store.get("w").get();
  ASSERT_EQ(whole.data.size(), a.size() * sizeof(float));
  EXPECT_EQ(std::memcmp(whole.data.data(), a.data(), whole.data.size()), 0);
  std::vector<float> into(a.size());
  store.get_into("w", bytes_of(into), {}, "float32").get();
  EXPECT_EQ(into, a);
  // A column block, element by element.
  const Box cols{{0, 100}, {kRows, 3}};
  const GetOptions block{.box = cols};
  const Got part = store.get("w", block).get();
  ASSERT_EQ(part.data.size(), std::size_t{kRows} * 3 * sizeof(float));
  const auto* f = reinterpret_cast<const float*>(part.data.data());
  for (std::int64_t r = 0; r < kRows; ++r) {
    for (std::int64_t c = 0; c < 3; ++c) ASSERT_EQ(f[r * 3 + c], a[r * kCols + 100 + c]);
  }
  // The store holds no byte of it: the writer's memory is the version.
  const auto stats = store.stats().get();
  EXPECT_EQ(stats[0].bytes_held, 0u);
  EXPECT_EQ(stats[0].versions, 1u);
  // Only the latest version is held.
  const GetOptions old{.version = 7};
  EXPECT_THROW(store.get("w", old).get(), KeyNotFound);
  w.close().get();
  EXPECT_THROW(store.get("w").get(), KeyNotFound);
  EXPECT_FALSE(store.exists("w").get());
}

TEST_F(Direct, NoReadEverSeesABufferTheWriterIsWriting) {
  // The writer and one reader in one proc, another reader in the other, and this thread: every
  // read is one published version whole, and versions never go backwards.
  constexpr int kSteps = 300;
  auto writer = procs.spawn<Writer>("writer").at(1);  // in the proc without the volume
  auto readers = procs.spawn<Reader>("readers");
  auto reads = readers.call(&Reader::read, store, std::string("weights"), kSteps);
  auto wrote = writer.call(&Writer::write, store, std::string("weights"), kSteps);
  int mine = 0;
  for (bool done = false; !done;) {
    Got got;
    try {
      got = store.get("weights").get();
    } catch (const KeyNotFound&) {
      continue;
    }
    const auto* f = reinterpret_cast<const float*>(got.data.data());
    for (std::int64_t i = 1; i < kRows * kCols; ++i) ASSERT_EQ(f[i], f[0]) << "a torn read";
    ++mine;
    done = f[0] == static_cast<float>(kSteps);
  }
  EXPECT_EQ(wrote.get(std::chrono::seconds(120)), kSteps);
  const auto done = reads.get(std::chrono::seconds(120));
  for (std::size_t m = 0; m < done.size(); ++m) {
    std::printf("reader %zu: %d reads\n", m, done[m][0]);
    EXPECT_GT(done[m][0], 0);
    EXPECT_EQ(done[m][1], 0) << "torn reads";
    EXPECT_EQ(done[m][2], 0) << "versions went backwards";
  }
  std::printf("controller: %d reads\n", mine);
  EXPECT_TRUE(writer.call(&Writer::close).get());
}

TEST_F(Direct, AReadersLeaseHoldsTheWriterOffItsBufferUntilReleasedOrRunOut) {
  std::vector<float> a(kRows * kCols);
  std::vector<float> b(kRows * kCols);
  const DirectOptions options{.lease = std::chrono::milliseconds(2000)};
  DirectWriter w = store.direct("held", info(), {bytes_of(a), bytes_of(b)}, options).get();
  // The volume (a store is its volumes' handles), asked as a get asks it: a lease on the latest
  // version, held until released.
  const auto volume = decode<std::vector<ActorRef<detail::Volume>>>(encode(store)).at(0);
  auto lease = [&] {
    const std::vector<detail::GetItem> item{detail::GetItem{"held", {}, {}, ""}};
    const detail::GetAnswer got = volume.call(&detail::Volume::get, item).get();
    EXPECT_EQ(got.answer.code, detail::Code::leased) << got.answer.message;
    EXPECT_TRUE(got.lease->direct);
    return got.lease->lease;
  };
  auto release = [](const ActorRef<detail::Volume>& v, std::uint64_t id) {
    return v
        .call(&detail::Volume::release, std::string("held"), id, std::uint64_t{0},
              std::string("rdma"))
        .get();
  };
  const std::size_t first = w.acquire().get();
  w.publish(first).get();
  const std::uint64_t held = lease();  // on `first`, the latest
  const std::size_t second = w.acquire().get();
  EXPECT_NE(second, first);
  w.publish(second).get();
  // Now `first` is leased and `second` is the latest: no buffer is free.
  Future<std::size_t> third = w.acquire();
  (void)store.exists("held").get();  // the volume answered the acquire before this
  EXPECT_FALSE(third.ready());
  EXPECT_TRUE(release(volume, held));
  EXPECT_EQ(third.get(std::chrono::seconds(30)), first);
  w.publish(first).get();
  // A lease nobody releases runs out, and the writer goes on.
  const std::uint64_t forgotten = lease();  // on `first`
  Future<std::size_t> fourth = w.acquire();
  EXPECT_EQ(fourth.get(std::chrono::seconds(30)), second);  // second was free: not latest
  w.publish(second).get();
  Future<std::size_t> fifth = w.acquire();  // `first` leased, `second` latest: waits it out
  EXPECT_EQ(fifth.get(std::chrono::seconds(30)), first);
  EXPECT_FALSE(release(volume, forgotten));
  w.close().get();
}

TEST_F(Direct, BadInputIsRefusedSayingWhat) {
  std::vector<float> a(kRows * kCols);
  std::vector<float> b(kRows * kCols);
  std::vector<float> small(16);
  auto refused = [&](auto f, const std::string& says) {
    try {
      f();
      ADD_FAILURE() << "not refused: " << says;
    } catch (const StoreError& e) {
      std::printf("%s\n", e.what());
      EXPECT_THAT(e.what(), HasSubstr(says));
    }
  };
  refused([&] { store.direct("one", info(), {bytes_of(a)}).get(); }, "at least 2");
  refused(
      [&] {
        store.direct("odd", info(), {bytes_of(a), bytes_of(small)}).get();
      },
      "a buffer of 64 bytes");
  store.put("stored", Bytes::copy("x")).get();
  refused(
      [&] {
        store.direct("stored", info(), {bytes_of(a), bytes_of(b)}).get();
      },
      "holds stored versions");
  DirectWriter w = store.direct("d", info(), {bytes_of(a), bytes_of(b)}).get();
  refused([&] { store.put("d", Bytes::copy("x")).get(); }, "direct mode");
  refused([&] { w.publish(1).get(); }, "was not acquired");
  refused([&] { w.publish(5).get(); }, "no buffer 5");
  const std::size_t i = w.acquire().get();
  w.publish(i).get();
  std::vector<float> wrong(8);
  refused([&] { store.get_into("d", bytes_of(wrong)).get(); }, "into a destination of 32 bytes");
  w.close().get();
  refused([&] { w.acquire().get(); }, "not open here");
}

}  // namespace
}  // namespace baton::store

int main(int argc, char** argv) {
  baton::Runtime rt(argc, argv);  // a worker serves here and never returns
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
