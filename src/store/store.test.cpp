// The tensor store over real worker processes: values put and got by key from the controller and
// from actors holding the store's handle, tensors put as shards and read back as any box
// (checked element by element), versions and what is kept, bad input, and a volume whose proc
// is killed. This binary is its own worker: main() creates the Runtime first.

#include "baton/store/store.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstring>

#include "baton/baton.hpp"
#include "store/volume.hpp"
#include "wire/slab.hpp"

namespace baton::store {
namespace {

using ::testing::HasSubstr;

/// The elements of `b` of the test's tensor with `cols` columns, row-major: element (r, c) is
/// r * cols + c.
std::vector<float> expected(const Box& b, std::int64_t cols) {
  std::vector<float> out;
  for (std::int64_t r = 0; r < b.sizes[0]; ++r) {
    for (std::int64_t c = 0; c < b.sizes[1]; ++c) {
      out.push_back(static_cast<float>((b.offsets[0] + r) * cols + b.offsets[1] + c));
    }
  }
  return out;
}

std::vector<float> floats(const Bytes& b) {
  std::vector<float> out(b.size() / sizeof(float));
  std::memcpy(out.data(), b.data(), out.size() * sizeof(float));
  return out;
}

/// The bytes of box `b` of the test's tensor.
Bytes shard_bytes(const Box& b, std::int64_t cols) {
  const std::vector<float> v = expected(b, cols);
  return Bytes::copy(v.data(), v.size() * sizeof(float));
}

TensorInfo f32(std::int64_t rows, std::int64_t cols) {
  return {"float32", 4, {rows, cols}};
}

/// An actor that uses a store it was handed: puts its rank's row shard, or reads a box.
class Worker : public Actor {
 public:
  // (The options are named, not temporaries in the co_await: GCC 12 destroys such a temporary
  // twice.)
  Task<Put> put_rows(Store s, std::string key, std::int64_t rows, std::int64_t cols, int of) {
    const Box mine =
        chunk(Box::whole({rows, cols}), 0, context().rank, static_cast<std::size_t>(of));
    const PutOptions options{.shard = mine};
    co_return co_await s.put(key, shard_bytes(mine, cols), f32(rows, cols), options);
  }
  Task<std::vector<float>> read(Store s, std::string key, Box b) {
    const GetOptions options{.box = b};
    co_return floats((co_await s.get(key, options)).data);
  }
  /// Puts `size` bytes of ordinary memory (not a memfd), each `rank + 1`, as `prefix` + rank.
  Task<Put> put_heap(Store s, std::string prefix, std::uint64_t size) {
    const auto fill = static_cast<std::byte>(context().rank + 1);
    Bytes value = Bytes::adopt(std::vector<std::byte>(size, fill));
    const std::string key = prefix + std::to_string(context().rank);
    const TensorInfo info{"uint8", 1, {static_cast<std::int64_t>(size)}};
    const PutOptions options{};
    co_return co_await s.put(key, std::move(value), info, options);
  }
  int pid() { return static_cast<int>(::getpid()); }
  static constexpr auto endpoints =
      baton::endpoints<&Worker::put_rows, &Worker::read, &Worker::put_heap, &Worker::pid>();
};

struct StoreTest : ::testing::Test {
  static void SetUpTestSuite() {
    procs_ = new ProcMesh(this_host().spawn_procs({{"procs", 2}}));
    store_ = new Store(Store::create(*procs_));
  }
  static void TearDownTestSuite() {
    procs_->stop().get();
    delete store_;
    delete procs_;
  }
  static ProcMesh* procs_;
  static Store* store_;
};
ProcMesh* StoreTest::procs_ = nullptr;
Store* StoreTest::store_ = nullptr;

TEST_F(StoreTest, BytesGoInAndComeBackWithVersionsKeysAndErase) {
  Store& s = *store_;
  EXPECT_EQ(s.volumes(), 2u);
  const Put first = s.put("plain/a", Bytes::copy("hello")).get();
  EXPECT_TRUE(first.complete);
  const Put second = s.put("plain/a", Bytes::copy("hello again")).get();
  EXPECT_EQ(second.version, first.version + 1);
  EXPECT_EQ(s.get("plain/a").get().data.str(), "hello again");
  EXPECT_EQ(s.latest_version("plain/a").get(), second.version);
  EXPECT_TRUE(s.exists("plain/a").get());
  // Prefixes are plain strings: no separator is special.
  for (const char* k : {"plain.b", "plainc", "plain/d/e"}) s.put(k, Bytes::copy(k)).get();
  EXPECT_EQ(s.keys("plain").get(),
            (std::vector<std::string>{"plain.b", "plain/a", "plain/d/e", "plainc"}));
  EXPECT_EQ(s.keys("plain/").get(), (std::vector<std::string>{"plain/a", "plain/d/e"}));
  s.erase("plain/a").get();
  s.erase("plain/a").get();  // idempotent
  EXPECT_FALSE(s.exists("plain/a").get());
  EXPECT_EQ(s.latest_version("plain/a").get(), std::nullopt);
}

TEST_F(StoreTest, AMissingKeyIsKeyNotFoundNamingTheNearestKeys) {
  Store& s = *store_;
  s.put("model/layer1.weight", Bytes::copy("w")).get();
  s.put("model/layer1.bias", Bytes::copy("b")).get();
  try {
    s.get("model/layer1.wieght").get();
    FAIL() << "a missing key was found";
  } catch (const KeyNotFound& e) {
    EXPECT_THAT(e.what(), HasSubstr("no key 'model/layer1.wieght'"));
    EXPECT_THAT(e.what(), HasSubstr("'model/layer1.weight'"));
  }
}

TEST_F(StoreTest, ShardsPutByActorsAreReadBackAsAnyBoxElementByElement) {
  constexpr std::int64_t kRows = 7;
  constexpr std::int64_t kCols = 10;
  auto workers = procs_->spawn<Worker>("writers");
  // Two row shards, each put by the actor that owns it, from its own proc.
  auto puts = workers.call(&Worker::put_rows, *store_, std::string("t"), kRows, kCols, 2).get();
  EXPECT_NE(puts[0].complete, puts[1].complete);  // the second one completed the version
  EXPECT_EQ(puts[0].version, puts[1].version);
  const std::vector<Box> asks = {
      Box::whole({kRows, kCols}),                  // the whole
      chunk(Box::whole({kRows, kCols}), 0, 1, 4),  // a row block
      chunk(Box::whole({kRows, kCols}), 1, 2, 4),  // a column block
      Box{{2, 3}, {4, 5}},                         // a tile across shards
      Box{{4, 0}, {1, 10}},                        // one row, in one shard
  };
  for (const Box& b : asks) {
    EXPECT_EQ(floats(store_->get("t", {.box = b}).get().data), expected(b, kCols)) << b.to_string();
    // And from an actor in another proc, through a handle it was passed.
    EXPECT_EQ(workers.at(1).call(&Worker::read, *store_, std::string("t"), b).get(),
              expected(b, kCols))
        << b.to_string();
  }
  // Resharded the other way: 2 row shards read as 4 column shards and as 2x2 tiles.
  for (std::size_t i = 0; i < 4; ++i) {
    const Box b = chunk(Box::whole({kRows, kCols}), 1, i, 4);
    EXPECT_EQ(floats(store_->get("t", {.box = b}).get().data), expected(b, kCols));
  }
  for (std::size_t i = 0; i < 2; ++i) {
    for (std::size_t j = 0; j < 2; ++j) {
      const Box b = chunk(chunk(Box::whole({kRows, kCols}), 0, i, 2), 1, j, 2);
      EXPECT_EQ(floats(store_->get("t", {.box = b}).get().data), expected(b, kCols));
    }
  }
}

/// Transfers of `s` by a one-sided read, of a put's bytes or a get's ("rdma " and its backend),
/// over all its volumes.
std::uint64_t one_sided_reads(const Store& s) {
  std::uint64_t n = 0;
  for (const auto& v : s.stats().get()) {
    for (const auto& [path, count] : v.transfers_by_path)
      n += path.rfind("rdma ", 0) == 0 ? count : 0;
  }
  return n;
}

/// Gets the store's volumes have answered, and the bytes they gave.
std::pair<std::uint64_t, std::uint64_t> gets_and_bytes(const Store& s) {
  std::pair<std::uint64_t, std::uint64_t> n;
  for (const auto& v : s.stats().get()) {
    n.first += v.gets;
    n.second += v.bytes_out;
  }
  return n;
}

/// Puts the test's [rows, cols] float32 tensor under `key` as two row shards; its whole box.
Box put_in_two_row_shards(const Store& s, const std::string& key, std::int64_t rows,
                          std::int64_t cols) {
  const Box whole = Box::whole({rows, cols});
  for (std::size_t i = 0; i < 2; ++i) {
    const Box half = chunk(whole, 0, i, 2);
    s.put(key, shard_bytes(half, cols), f32(rows, cols), {.shard = half}).get();
  }
  return whole;
}

/// A volume's lease on `box` of `key`, asked of each volume of `s` as a get into memory of ours
/// asks; the volume that granted it, and the lease.
struct Leased {
  ActorRef<detail::Volume> volume;
  detail::ReadLease lease;
  /// Its bytes, read one-sided.
  std::vector<float> read() const {
    std::vector<float> out(lease.buffer.size() / sizeof(float));
    lease.buffer.read_into(out.data(), lease.buffer.size(), lease.offset).get();
    return out;
  }
  /// Ends it; whether it was still held.
  bool release(const std::string& key) const {
    return volume
        .call(&detail::Volume::release, key, lease.lease, std::uint64_t{0},
              std::string("rdma test"))
        .get();
  }
};
std::optional<Leased> lease_of(const Store& s, const std::string& key,
                               const std::optional<Box>& box) {
  for (const auto& v : decode<std::vector<ActorRef<detail::Volume>>>(encode(s))) {
    std::vector<detail::GetItem> item{detail::GetItem{key, {}, box, ""}};
    item[0].lease = true;
    const detail::GetAnswer a = v.call(&detail::Volume::get, item).get();
    if (a.answer.code == detail::Code::leased && a.lease) return Leased{v, *a.lease};
  }
  return std::nullopt;
}

TEST_F(StoreTest, ALargeGetIntoReadsTheVolumesMemoryOneSidedAsAnyBox) {
  // 2 MiB as two row shards of 1 MiB: each ask below is at least kLeaseBytes, so it is read
  // from the volume's memory under a lease, straight from a shard or from bytes assembled for it.
  constexpr std::int64_t kRows = 1024;
  constexpr std::int64_t kCols = 512;
  // Each shard's 1 MiB is offered one-sided too: the volume reads it from the controller.
  const std::uint64_t at_start = one_sided_reads(*store_);
  const Box whole = put_in_two_row_shards(*store_, "leased", kRows, kCols);
  EXPECT_EQ(one_sided_reads(*store_), at_start + 2);
  const std::uint64_t before = one_sided_reads(*store_);
  const auto [gets_before, bytes_before] = gets_and_bytes(*store_);
  std::uint64_t bytes = 0;
  const std::vector<Box> asks = {
      whole,                        // across both shards: assembled
      chunk(whole, 0, 1, 2),        // the second shard, as it is
      Box{{256, 0}, {512, kCols}},  // rows across the shards' boundary
      chunk(whole, 1, 0, 2),        // a column block: assembled
      Box{{100, 128}, {700, 384}},  // a tile across the shards
  };
  for (const Box& b : asks) {
    std::vector<float> into(static_cast<std::size_t>(b.elements()), -1.0F);
    const Got got =
        store_->get_into("leased", std::as_writable_bytes(std::span(into)), {.box = b}).get();
    EXPECT_EQ(got.box, b);
    EXPECT_EQ(into, expected(b, kCols)) << b.to_string();
    bytes += into.size() * sizeof(float);
  }
  EXPECT_EQ(one_sided_reads(*store_), before + asks.size());
  // Each counted once, with its bytes, when its reader had them.
  EXPECT_EQ(gets_and_bytes(*store_),
            std::make_pair(gets_before + asks.size(), bytes_before + bytes));
  // Under 1 MiB the bytes come in the answer, as before.
  std::vector<float> small(1000);
  store_
      ->get_into("leased", std::as_writable_bytes(std::span(small)), {.box = Box{{0, 0}, {2, 500}}})
      .get();
  EXPECT_EQ(small, expected(Box{{0, 0}, {2, 500}}, kCols));
  EXPECT_EQ(one_sided_reads(*store_), before + asks.size());
}

TEST_F(StoreTest, ALeaseOnStoredBytesKeepsThemWhileTheWriterPutsTenMore) {
  const TensorInfo info{"float32", 4, {1 << 19}};  // 2 MiB
  auto value = [](float x) {
    const std::vector<float> v(1 << 19, x);
    return Bytes::copy(v.data(), v.size() * sizeof(float));
  };
  store_->put("kept", value(1), info).get();
  const auto gets_before = gets_and_bytes(*store_);
  // Asked as a get into 2 MiB asks: the key's volume grants a lease on its own memory.
  const std::optional<Leased> leased = lease_of(*store_, "kept", std::nullopt);
  ASSERT_TRUE(leased.has_value()) << "no volume leased the key";
  EXPECT_FALSE(leased->lease.direct);
  for (int i = 2; i <= 11; ++i) store_->put("kept", value(static_cast<float>(i)), info).get();
  store_->erase("kept").get();
  // The version it leased is neither kept nor the key there, and its bytes are still whole.
  EXPECT_EQ(leased->read(), std::vector<float>(1 << 19, 1.0F));
  EXPECT_TRUE(leased->release("kept"));
  // Released with nothing said to be read: no get is counted.
  EXPECT_EQ(gets_and_bytes(*store_), gets_before);
  // Released: the bytes are unregistered, and a read of them is refused.
  std::vector<float> some(4);
  EXPECT_THROW(leased->lease.buffer.read_into(some.data(), 16, 0).get(), RdmaError);
  // A lease released twice, or never granted, was not held.
  EXPECT_FALSE(leased->release("kept"));
}

TEST_F(StoreTest, BoxesAssembledForLeasesHoldMemoryOfTheirOwnUntilReleased) {
  // Column blocks of two row shards are assembled in the volume's scratch memory for each
  // lease: two leases held at once each read their own box, and memory given back after a
  // release serves the next box correctly.
  constexpr std::int64_t kRows = 1024;
  constexpr std::int64_t kCols = 512;
  put_in_two_row_shards(*store_, "assembled", kRows, kCols);
  auto lease = [&](const Box& b) {
    std::optional<Leased> l = lease_of(*store_, "assembled", b);
    EXPECT_TRUE(l.has_value()) << "no volume leased " << b.to_string();
    return l.value_or(Leased{});
  };
  const Box left = Box{{0, 0}, {kRows, kCols / 2}};  // 1 MiB
  const Box right = Box{{0, kCols / 2}, {kRows, kCols / 2}};
  // One assembled and given back first, so the pool holds memory of this size.
  const Leased zeroth = lease(right);
  EXPECT_EQ(zeroth.read(), expected(right, kCols));
  EXPECT_TRUE(zeroth.release("assembled"));
  const Leased first = lease(left);
  const Leased second = lease(right);
  EXPECT_EQ(first.read(), expected(left, kCols));
  EXPECT_EQ(second.read(), expected(right, kCols));
  EXPECT_TRUE(first.release("assembled"));
  EXPECT_TRUE(second.release("assembled"));
  // Again, on memory given back: each box, not what the memory held before.
  const Box middle = Box{{0, kCols / 4}, {kRows, kCols / 2}};
  const Leased third = lease(middle);
  EXPECT_EQ(third.read(), expected(middle, kCols));
  EXPECT_TRUE(third.release("assembled"));
}

TEST_F(StoreTest, WhereOneSidedTransfersCannotBeMadeTheBytesGoInMessages) {
  // A forced rdma backend that cannot serve host memory (gpu_ipc): a large put's upload and a
  // large get's lease cannot be used, and the bytes travel in the messages instead.
  const TensorInfo info{"float32", 4, {1 << 19}};  // 2 MiB
  const std::vector<float> v(1 << 19, 3.0F);
  const std::uint64_t before = one_sided_reads(*store_);
  set_rdma_backend(RdmaBackend::gpu_ipc);
  store_->put("forced", Bytes::copy(v.data(), v.size() * 4), info).get();
  std::vector<float> into(1 << 19);
  store_->get_into("forced", std::as_writable_bytes(std::span(into))).get(std::chrono::seconds(60));
  set_rdma_backend(RdmaBackend::automatic);
  EXPECT_EQ(into, v);
  EXPECT_EQ(one_sided_reads(*store_), before);
  // A put naming memory the volume does not hold for it is refused, storing nothing.
  detail::PutItem item{"forced", Bytes(), info, Box::whole({1 << 19})};
  item.upload = 987654321;
  item.upload_size = v.size() * 4;
  for (const auto& volume : decode<std::vector<ActorRef<detail::Volume>>>(encode(*store_))) {
    const detail::PutAnswer a =
        volume.call(&detail::Volume::put, std::vector<detail::PutItem>{item}).get();
    EXPECT_EQ(a.answer.code, detail::Code::bad);
    EXPECT_THAT(a.answer.message, HasSubstr("is not held here"));
  }
  EXPECT_EQ(store_->latest_version("forced").get(), std::optional<std::uint64_t>(1));
}

TEST_F(StoreTest, AValueInOrdinaryMemoryBecomesOneMemfdForReadersOnThisHost) {
  // One volume; each worker puts 16 MiB of ordinary memory. The worker in the volume's own proc
  // puts in-process, so the volume keeps that memory as it is. A get by message from this host
  // passes a value of this size as a memfd: the first get makes the memory one, and later gets
  // pass the same memfd, where each used to be copied into a new one.
  constexpr std::uint64_t kBig = 16 << 20;
  Store one = Store::create(*procs_, Spread::single, "heap");
  auto workers = procs_->spawn<Worker>("heap-writers");
  (void)workers.call(&Worker::put_heap, one, std::string("heap/"), kBig).get();
  EXPECT_EQ(one.stats().get()[0].transfers_by_path.at("in-process"), 1u);
  for (int rank = 0; rank < 2; ++rank) {
    const std::string key = "heap/" + std::to_string(rank);
    std::vector<ino_t> memfds;
    for (int i = 0; i < 3; ++i) {
      const Got got = one.get(key).get();
      ASSERT_EQ(got.data.size(), kBig);
      EXPECT_EQ(got.data.data()[kBig - 1], static_cast<std::byte>(rank + 1));
      const int fd = wire::slab_fd(got.data);
      ASSERT_GE(fd, 0) << key << " came as a memfd";
      struct stat st {};
      ASSERT_EQ(::fstat(fd, &st), 0);
      memfds.push_back(st.st_ino);
    }
    EXPECT_EQ(memfds[1], memfds[0]) << key;
    EXPECT_EQ(memfds[2], memfds[0]) << key;
  }
  // A get into memory of ours, now that the value is a memfd, passes the memfd too (no lease, no
  // one-sided read), and the reader copies every byte out of it.
  const std::uint64_t one_sided = one_sided_reads(one);
  const std::uint64_t by_shm = one.stats().get()[0].transfers_by_path.at("shm");
  std::vector<std::byte> into(kBig, std::byte{7});
  one.get_into("heap/0", into).get();
  EXPECT_EQ(std::count(into.begin(), into.end(), std::byte{1}), static_cast<std::ptrdiff_t>(kBig));
  EXPECT_EQ(one_sided_reads(one), one_sided);
  EXPECT_EQ(one.stats().get()[0].transfers_by_path.at("shm"), by_shm + 1);
  workers.stop().get();
}

TEST_F(StoreTest, APartialKeyIsNotReadableAndSaysWhatItLacks) {
  const Box top = Box{{0, 0}, {2, 4}};
  store_->put("partial", shard_bytes(top, 4), f32(4, 4), {.shard = top}).get();
  try {
    store_->get("partial").get();
    FAIL() << "a partial key was read";
  } catch (const KeyNotFound& e) {
    EXPECT_THAT(e.what(), HasSubstr("is partial"));
    EXPECT_THAT(e.what(), HasSubstr("lacks [2:4, 0:4]"));
  }
  EXPECT_FALSE(store_->exists("partial").get());
  const Box bottom = Box{{2, 0}, {2, 4}};
  EXPECT_TRUE(
      store_->put("partial", shard_bytes(bottom, 4), f32(4, 4), {.shard = bottom}).get().complete);
  EXPECT_EQ(floats(store_->get("partial").get().data), expected(Box::whole({4, 4}), 4));
}

TEST_F(StoreTest, AShardPutTwiceBeforeTheOtherStartsTheNextVersion) {
  // Rank 0 runs a step ahead: its second shard must not tear the first version.
  const Box top = Box{{0, 0}, {1, 2}};
  const Box bottom = Box{{1, 0}, {1, 2}};
  auto value = [](float x) {
    const float v[2] = {x, x};
    return Bytes::copy(v, sizeof v);
  };
  const Put a = store_->put("ahead", value(1), f32(2, 2), {.shard = top, .keep = 2}).get();
  const Put b = store_->put("ahead", value(2), f32(2, 2), {.shard = top, .keep = 2}).get();
  EXPECT_EQ(b.version, a.version + 1);
  store_->put("ahead", value(1), f32(2, 2), {.shard = bottom, .keep = 2}).get();
  EXPECT_EQ(floats(store_->get("ahead").get().data), (std::vector<float>{1, 1, 1, 1}));
  store_->put("ahead", value(2), f32(2, 2), {.shard = bottom, .keep = 2}).get();
  EXPECT_EQ(floats(store_->get("ahead").get().data), (std::vector<float>{2, 2, 2, 2}));
  EXPECT_EQ(floats(store_->get("ahead", {.version = a.version}).get().data),
            (std::vector<float>{1, 1, 1, 1}));
}

TEST_F(StoreTest, AReaderKeepsItsVersionWhileTheWriterPutsTenMore) {
  const std::vector<float> first(1 << 16, 1.0F);
  store_->put("held", Bytes::copy(first.data(), first.size() * 4), {"float32", 4, {1 << 16}}).get();
  const Got held = store_->get("held").get();
  for (int i = 2; i <= 11; ++i) {
    const std::vector<float> next(1 << 16, static_cast<float>(i));
    store_
        ->put("held", Bytes::copy(next.data(), next.size() * 4), {"float32", 4, {1 << 16}},
              {.keep = 3})
        .get();
  }
  EXPECT_EQ(floats(held.data), first);  // its bytes unchanged
  EXPECT_EQ(floats(store_->get("held").get().data), std::vector<float>(1 << 16, 11.0F));
  // Only the newest three are kept; an older one says so.
  EXPECT_NO_THROW(store_->get("held", {.version = held.version + 8}).get());
  try {
    store_->get("held", {.version = held.version}).get();
    FAIL() << "a dropped version was read";
  } catch (const KeyNotFound& e) {
    EXPECT_THAT(e.what(), HasSubstr("is not kept"));
  }
  std::uint64_t versions = 0;
  for (const auto& v : store_->stats().get()) versions += v.versions;
  EXPECT_LE(versions, 3u + 20u);  // this key's three, and the other tests' keys
}

TEST_F(StoreTest, BadInputIsRefusedSayingWhat) {
  auto error = [](Future<Put> f) {
    try {
      f.get();
    } catch (const StoreError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_THAT(error(store_->put("bad", Bytes::copy("12345"), f32(2, 2))),
              HasSubstr("the value has 5 bytes, but shard [0:2, 0:2] of float32[2, 2] needs 16"));
  EXPECT_THAT(error(store_->put("bad", Bytes::copy(std::string(16, 'x')), f32(2, 2),
                                {.shard = Box{{1, 0}, {2, 2}}})),
              HasSubstr("lies outside the tensor float32[2, 2]"));
  store_->put("good", Bytes::copy(std::string(16, 'x')), f32(2, 2)).get();
  try {
    store_->get("good", {.box = Box{{0, 0}, {3, 2}}}).get();
    FAIL() << "a box outside the tensor was read";
  } catch (const StoreError& e) {
    EXPECT_THAT(e.what(), HasSubstr("box [0:3, 0:2] lies outside the tensor float32[2, 2]"));
  }
  EXPECT_FALSE(store_->exists("bad").get());
  std::vector<std::byte> small(15);
  try {
    store_->get_into("good", small).get();
    FAIL() << "a destination of the wrong size was filled";
  } catch (const StoreError& e) {
    EXPECT_THAT(e.what(), HasSubstr("into a destination of 15 bytes: box [0:2, 0:2] of "
                                    "float32[2, 2] has 16 (4 bytes an element)"));
  }
  std::vector<std::byte> right(16);
  store_->get_into("good", right).get();
  EXPECT_EQ(right[15], std::byte{'x'});
}

TEST_F(StoreTest, ABatchIsAllOrNothing) {
  // More items than one message carries to a volume (kItemsPerMessage), so in several groups.
  constexpr int kItems = 2500;
  std::vector<std::tuple<std::string, Bytes, TensorInfo, PutOptions>> batch;
  batch.reserve(kItems + 1);
  for (int i = 0; i < kItems; ++i) {
    batch.emplace_back("batch/" + std::to_string(i), Bytes::copy(std::to_string(i)), TensorInfo{},
                       PutOptions{});
  }
  batch.emplace_back("batch/bad", Bytes::copy("123"), f32(1, 1), PutOptions{});
  EXPECT_THROW(store_->put_batch(batch).get(), StoreError);
  EXPECT_TRUE(store_->keys("batch/").get().empty());
  batch.pop_back();
  const auto puts = store_->put_batch(batch).get();
  ASSERT_EQ(puts.size(), static_cast<std::size_t>(kItems));
  std::vector<std::string> keys;
  keys.reserve(kItems);
  for (int i = 0; i < kItems; ++i) keys.push_back("batch/" + std::to_string(i));
  const auto got = store_->get_batch(keys).get();
  ASSERT_EQ(got.size(), static_cast<std::size_t>(kItems));
  for (int i = 0; i < kItems; ++i) ASSERT_EQ(got[i].data.str(), std::to_string(i));
  // A missing key fails the batch, naming it.
  keys.emplace_back("batch/none");
  EXPECT_THROW(store_->get_batch(keys).get(), KeyNotFound);
}

TEST(StoreSpread, OneVolumePerProcPerHostOrOneInAll) {
  auto procs = this_host().spawn_procs({{"procs", 3}});
  EXPECT_EQ(Store::create(procs, Spread::per_proc).volumes(), 3u);
  EXPECT_EQ(Store::create(procs, Spread::per_host, "by_host").volumes(), 1u);  // one host here
  const Store one = Store::create(procs, Spread::single, "one");
  ASSERT_EQ(one.volumes(), 1u);
  for (int i = 0; i < 20; ++i) one.put("k" + std::to_string(i), Bytes::copy("v")).get();
  const auto stats = one.stats().get();
  ASSERT_EQ(stats.size(), 1u);
  EXPECT_EQ(stats[0].keys, 20u);
  // The controller and the volume are procs of one host: their link is shared memory.
  EXPECT_EQ(stats[0].transfers_by_path.at("shm"), 20u);
  EXPECT_EQ(stats[0].bytes_by_path.at("shm"), 20u);
  EXPECT_EQ(stats[0].proc, "procs" + stats[0].proc.substr(5, stats[0].proc.find('.') - 5) + ".0");
  procs.stop().get();
}

TEST(StoreFailure, AKilledVolumeFailsItsKeysNamingThemTheOthersKeepWorkingAndTheyCanBePutAgain) {
  auto procs = this_host().spawn_procs({{"procs", 2}});
  Store s = Store::create(procs);
  auto workers = procs.spawn<Worker>("pids");
  std::vector<std::string> keys;
  for (int i = 0; i < 16; ++i) {
    keys.push_back("k" + std::to_string(i));
    s.put(keys.back(), Bytes::copy(keys.back())).get();
  }
  ASSERT_EQ(::kill(workers.at(1).call(&Worker::pid).get(), SIGKILL), 0);
  int lost = 0;
  int kept = 0;
  for (const auto& k : keys) {
    try {
      EXPECT_EQ(s.get(k).get(std::chrono::seconds(30)).data.str(), k);
      ++kept;
    } catch (const StoreError& e) {
      if (++lost == 1) std::printf("%s\n", e.what());
      EXPECT_THAT(e.what(), HasSubstr("get of '" + k + "'"));
      EXPECT_THAT(e.what(), HasSubstr("its volume in proc"));
    }
  }
  EXPECT_GT(lost, 0);
  EXPECT_GT(kept, 0);
  EXPECT_EQ(s.keys().get().size(), static_cast<std::size_t>(kept));
  // A lost key is not there, and can be put again: on the volume left.
  for (const auto& k : keys) {
    if (s.exists(k).get()) continue;
    s.put(k, Bytes::copy("again " + k)).get();
    EXPECT_EQ(s.get(k).get().data.str(), "again " + k);
  }
  EXPECT_EQ(s.keys().get(), [&] {
    auto sorted = keys;
    std::sort(sorted.begin(), sorted.end());
    return sorted;
  }());
  // A batch moves past the lost volume as a put does: all of it lands, on the volume left.
  std::vector<std::tuple<std::string, Bytes, TensorInfo, PutOptions>> batch;
  std::vector<std::string> batch_keys;
  for (int i = 0; i < 16; ++i) {
    batch_keys.push_back("b" + std::to_string(i));
    batch.emplace_back(batch_keys.back(), Bytes::copy(batch_keys.back()), TensorInfo{},
                       PutOptions{});
  }
  EXPECT_EQ(s.put_batch(batch).get(std::chrono::seconds(30)).size(), batch.size());
  const auto got = s.get_batch(batch_keys).get(std::chrono::seconds(30));
  ASSERT_EQ(got.size(), batch_keys.size());
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i].data.str(), batch_keys[i]);
  procs.stop().get();
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
