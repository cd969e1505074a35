// The tensor store over device memory, across real worker processes: values put from a GPU's
// memory and read into it, whole, as boxes and resharded; a direct writer's device memory read
// through GPU IPC into device and host memory; and a destination of the wrong size refused with
// its bytes untouched. Without a GPU every test skips saying why, and the binary exits with the
// code CTest reports as skipped (not passed). This binary is its own worker: main() creates the
// Runtime first, which in a worker never returns.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "baton/baton.hpp"

namespace baton::store {
namespace {

using ::testing::HasSubstr;

/// The element at (r, c) of the test tensors, seeded so that two tensors differ.
float element(std::int64_t r, std::int64_t c, int seed) {
  return static_cast<float>(r * 1000 + c) + static_cast<float>(seed) * 0.25F;
}

std::vector<float> host_tensor(std::int64_t rows, std::int64_t cols, int seed) {
  std::vector<float> v(static_cast<std::size_t>(rows * cols));
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c < cols; ++c)
      v[static_cast<std::size_t>(r * cols + c)] = element(r, c, seed);
  }
  return v;
}

/// Device memory of `floats` elements, freed with the object.
class DeviceFloats {
 public:
  explicit DeviceFloats(std::size_t floats)
      : n_(floats), p_(static_cast<float*>(gpu::api().allocate(floats * sizeof(float)))) {}
  DeviceFloats(const DeviceFloats&) = delete;
  DeviceFloats& operator=(const DeviceFloats&) = delete;
  ~DeviceFloats() { gpu::api().free(p_); }
  std::span<std::byte> bytes() const {
    return {reinterpret_cast<std::byte*>(p_), n_ * sizeof(float)};
  }
  void upload(const std::vector<float>& v) const {
    gpu::api().copy(p_, v.data(), n_ * sizeof(float));
  }
  std::vector<float> download() const {
    std::vector<float> v(n_);
    gpu::api().copy(v.data(), p_, n_ * sizeof(float));
    return v;
  }

 private:
  std::size_t n_;
  float* p_;
};

/// Checks that `got`, a box of the tensor of `cols` columns made by `seed`, holds its elements.
void expect_box(const std::vector<float>& got, const Box& box, int seed) {
  ASSERT_EQ(got.size(), static_cast<std::size_t>(box.elements()));
  const std::int64_t w = box.sizes[1];
  for (std::int64_t r = 0; r < box.sizes[0]; ++r) {
    for (std::int64_t c = 0; c < w; ++c) {
      ASSERT_EQ(got[static_cast<std::size_t>(r * w + c)],
                element(box.offsets[0] + r, box.offsets[1] + c, seed))
          << "element (" << r << ", " << c << ") of box " << box.to_string();
    }
  }
}

/// Writes versions of a direct key from two buffers of its own device memory.
class DeviceWriter : public Actor {
 public:
  /// Opens `key` over two device buffers of `rows` x `cols` float32.
  Task<bool> open(Store s, std::string key, std::int64_t rows, std::int64_t cols) {
    rows_ = rows;
    cols_ = cols;
    const auto n = static_cast<std::size_t>(rows * cols);
    for (auto& b : buffers_) b = std::make_unique<DeviceFloats>(n);
    std::vector<std::span<std::byte>> spans{buffers_[0]->bytes(), buffers_[1]->bytes()};
    const TensorInfo tensor{"float32", 4, {rows, cols}};
    writer_ = co_await s.direct(key, tensor, spans);
    co_return true;
  }
  /// Writes the tensor made by `seed` into the buffer acquire() gives, and publishes it.
  Task<std::uint64_t> publish(int seed) {
    const std::size_t i = co_await writer_.acquire();
    buffers_[i]->upload(host_tensor(rows_, cols_, seed));
    co_return (co_await writer_.publish(i)).version;
  }
  Task<bool> close() {
    co_await writer_.close();
    co_return true;
  }
  static constexpr auto endpoints =
      baton::endpoints<&DeviceWriter::open, &DeviceWriter::publish, &DeviceWriter::close>();

 private:
  std::int64_t rows_ = 0, cols_ = 0;
  std::unique_ptr<DeviceFloats> buffers_[2];
  DirectWriter writer_;
};

class StoreGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!gpu::api().available()) GTEST_SKIP() << "no GPU here: " << gpu::api().status();
    procs_ = std::make_unique<ProcMesh>(this_host().spawn_procs({{"procs", 2}}));
    store_ = Store::create(*procs_, Spread::single);  // its volume in the first proc
  }
  void TearDown() override {
    if (procs_) procs_->stop().get();
  }
  std::unique_ptr<ProcMesh> procs_;
  Store store_;
};

TEST_F(StoreGpu, DeviceValuesRoundTripWholeAndAsBoxesThroughEveryPath) {
  // 64 KiB goes in messages; 8 MiB as a memfd the reader maps (its boxes under leases, read
  // one-sided); 288 MiB in pieces of 256 MiB at most.
  for (const std::int64_t rows : {std::int64_t{16}, std::int64_t{2048}, std::int64_t{73728}}) {
    SCOPED_TRACE("rows " + std::to_string(rows));
    constexpr std::int64_t cols = 1024;
    const TensorInfo tensor{"float32", 4, {rows, cols}};
    const Box whole = Box::whole(tensor.shape);
    DeviceFloats src(static_cast<std::size_t>(rows * cols));
    src.upload(host_tensor(rows, cols, 1));
    const std::span<const std::byte> value = src.bytes();
    ASSERT_TRUE(store_.put("w", value, tensor).get().complete);
    // Whole, into device memory and into a new host value.
    DeviceFloats dst(static_cast<std::size_t>(rows * cols));
    store_.get_into("w", dst.bytes(), {}, "float32").get();
    expect_box(dst.download(), whole, 1);
    const Got got = store_.get("w").get();
    const auto* f = reinterpret_cast<const float*>(got.data.data());
    expect_box(std::vector<float>(f, f + rows * cols), whole, 1);
    // A row block, a column block and a 2-D tile, each into device memory of its size.
    for (const Box& box : {Box{{rows / 2, 0}, {rows / 4, cols}}, Box{{0, 256}, {rows, 256}},
                           Box{{rows / 4, 512}, {rows / 2, 128}}}) {
      DeviceFloats part(static_cast<std::size_t>(box.elements()));
      const GetOptions at{.box = box};
      store_.get_into("w", part.bytes(), at, "float32").get();
      expect_box(part.download(), box, 1);
    }
  }
}

TEST_F(StoreGpu, ShardsPutFromDeviceMemoryAreReadInAnotherLayoutIntoDeviceMemory) {
  // Two row shards from device memory, read as four column blocks into device memory.
  constexpr std::int64_t rows = 1024;
  constexpr std::int64_t cols = 2048;  // 8 MiB in all
  const TensorInfo tensor{"float32", 4, {rows, cols}};
  const Box whole = Box::whole(tensor.shape);
  const std::vector<float> full = host_tensor(rows, cols, 3);
  for (std::size_t i = 0; i < 2; ++i) {
    const Box shard = chunk(whole, 0, i, 2);
    const auto first = static_cast<std::size_t>(shard.offsets[0] * cols);
    DeviceFloats src(static_cast<std::size_t>(shard.elements()));
    src.upload(std::vector<float>(full.begin() + static_cast<std::ptrdiff_t>(first),
                                  full.begin() + static_cast<std::ptrdiff_t>(first) +
                                      static_cast<std::ptrdiff_t>(shard.elements())));
    const PutOptions as{.shard = shard};
    EXPECT_EQ(
        store_.put("sharded", std::span<const std::byte>(src.bytes()), tensor, as).get().complete,
        i == 1);
  }
  for (std::size_t j = 0; j < 4; ++j) {
    const Box block = chunk(whole, 1, j, 4);
    DeviceFloats part(static_cast<std::size_t>(block.elements()));
    const GetOptions at{.box = block};
    store_.get_into("sharded", part.bytes(), at, "float32").get();
    expect_box(part.download(), block, 3);
  }
}

TEST_F(StoreGpu, ADirectWritersDeviceMemoryIsReadThroughGpuIpc) {
  constexpr std::int64_t rows = 1024;
  constexpr std::int64_t cols = 1024;  // 4 MiB
  const Box whole{{0, 0}, {rows, cols}};
  auto writer = procs_->spawn<DeviceWriter>("writer").at(1);  // not the volume's proc
  ASSERT_TRUE(writer.call(&DeviceWriter::open, store_, std::string("w"), rows, cols).get());
  EXPECT_EQ(writer.call(&DeviceWriter::publish, 5).get(), 1u);
  // Into device memory: device to device through GPU IPC; into host memory; a box into device.
  DeviceFloats dst(static_cast<std::size_t>(rows * cols));
  store_.get_into("w", dst.bytes(), {}, "float32").get();
  expect_box(dst.download(), whole, 5);
  std::vector<float> host(static_cast<std::size_t>(rows * cols));
  store_.get_into("w", std::as_writable_bytes(std::span<float>(host)), {}, "float32").get();
  expect_box(host, whole, 5);
  const Box tile{{100, 200}, {300, 400}};
  DeviceFloats part(static_cast<std::size_t>(tile.elements()));
  const GetOptions at{.box = tile};
  store_.get_into("w", part.bytes(), at, "float32").get();
  expect_box(part.download(), tile, 5);
  // The reads went through GPU IPC, and the store holds no byte of it.
  const VolumeStats stats = store_.stats().get().at(0);
  EXPECT_EQ(stats.bytes_held, 0u);
  ASSERT_TRUE(stats.transfers_by_path.contains("rdma gpu_ipc")) << [&] {
    std::string paths;
    for (const auto& [path, n] : stats.transfers_by_path) paths += path + " ";
    return paths;
  }();
  EXPECT_EQ(stats.transfers_by_path.at("rdma gpu_ipc"), 3u);
  // The next version replaces it, whole.
  EXPECT_EQ(writer.call(&DeviceWriter::publish, 6).get(), 2u);
  store_.get_into("w", dst.bytes(), {}, "float32").get();
  expect_box(dst.download(), whole, 6);
  ASSERT_TRUE(writer.call(&DeviceWriter::close).get());
  EXPECT_THROW(store_.get_into("w", dst.bytes()).get(), KeyNotFound);
}

TEST_F(StoreGpu, ADeviceDestinationOfTheWrongSizeIsRefusedAndLeftUntouched) {
  const TensorInfo tensor{"float32", 4, {512, 1024}};  // 2 MiB: read one-sided
  const std::vector<float> values = host_tensor(512, 1024, 7);
  ASSERT_TRUE(
      store_.put("w", std::as_bytes(std::span<const float>(values)), tensor).get().complete);
  DeviceFloats small(std::size_t{512} * 1000);
  const std::vector<float> before = host_tensor(512, 1000, 9);
  small.upload(before);
  try {
    store_.get_into("w", small.bytes(), {}, "float32").get();
    FAIL() << "a destination of the wrong size was written";
  } catch (const StoreError& e) {
    EXPECT_THAT(e.what(), HasSubstr("into a destination of 2048000 bytes"));
    EXPECT_THAT(e.what(), HasSubstr("has 2097152"));
  }
  EXPECT_EQ(small.download(), before);
  // Of the right size, the same bytes come.
  DeviceFloats right(std::size_t{512} * 1024);
  store_.get_into("w", right.bytes(), {}, "float32").get();
  EXPECT_EQ(right.download(), values);
}

}  // namespace
}  // namespace baton::store

int main(int argc, char** argv) {
  baton::Runtime rt(argc, argv);  // a worker serves here and never returns
  ::testing::InitGoogleTest(&argc, argv);
  const int rc = RUN_ALL_TESTS();
  // CTest's SKIP_RETURN_CODE: a run that skipped (no GPU) is reported as skipped, not passed.
  return rc == 0 && ::testing::UnitTest::GetInstance()->skipped_test_count() > 0 ? 77 : rc;
}
