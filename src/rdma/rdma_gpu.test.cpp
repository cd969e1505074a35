// RdmaBuffer over device memory across real worker processes: through GPU IPC handles and
// through messages. Without a GPU every test skips saying why, and the binary exits with the
// code CTest reports as skipped (not passed). This binary is its own worker: main() creates the
// Runtime first, which in a worker never returns.

#include <gtest/gtest.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "baton/baton.hpp"
#include "rdma/pattern.test.hpp"
#include "rdma/settings.test.hpp"

namespace baton {
namespace {

using rdma_testing::checksum;
using rdma_testing::expected;
using rdma_testing::fill;
using rdma_testing::finish;

/// Owns device memory in a worker process and registers it.
class DeviceHolder : public Actor {
 public:
  RdmaBuffer expose(std::uint64_t size, int seed) {
    std::vector<std::byte> staged(size);
    fill(staged.data(), size, seed);
    dev_ = gpu::api().allocate(size);
    gpu::api().copy(dev_, staged.data(), size);
    buf_ = RdmaBuffer::register_memory(dev_, size);
    return buf_;
  }
  std::uint64_t checksum_of_own() {
    std::vector<std::byte> v(buf_.size());
    gpu::api().copy(v.data(), buf_.data(), v.size());
    return checksum(v.data(), v.size());
  }
  static constexpr auto endpoints =
      baton::endpoints<&DeviceHolder::expose, &DeviceHolder::checksum_of_own>();

 private:
  void* dev_ = nullptr;
  RdmaBuffer buf_;
};

class RdmaGpu : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!gpu::api().available()) return;  // every test skips
    procs_ = new ProcMesh(this_host().spawn_procs({{"gpus", 2}}));
    holders_ = new ActorMesh<DeviceHolder>(procs_->spawn<DeviceHolder>("holders"));
  }
  static void TearDownTestSuite() {
    if (procs_ != nullptr) procs_->stop().get();
    delete holders_;
    delete procs_;
  }
  void SetUp() override {
    if (!gpu::api().available()) GTEST_SKIP() << "no GPU here: " << gpu::api().status();
  }
  static ActorMesh<DeviceHolder> holder(std::size_t rank) { return holders_->slice("gpus", rank); }
  rdma_testing::ScopedRdmaSettings settings_;  // whatever a test changes is restored after it
  static ProcMesh* procs_;
  static ActorMesh<DeviceHolder>* holders_;
};
ProcMesh* RdmaGpu::procs_ = nullptr;
ActorMesh<DeviceHolder>* RdmaGpu::holders_ = nullptr;

TEST_F(RdmaGpu, DeviceMemoryMovesThroughGpuIpcAndMessages) {
  constexpr std::size_t n = std::size_t{32} << 20;
  for (RdmaBackend forced : {RdmaBackend::automatic, RdmaBackend::messages}) {
    settings_.backend(forced);
    RdmaBuffer b = holder(0).call_one(&DeviceHolder::expose, n, 4).get();
    EXPECT_TRUE(b.device());
    std::vector<std::byte> host(n);
    EXPECT_EQ(rdma_backend(b, host.data()),
              forced == RdmaBackend::automatic ? RdmaBackend::gpu_ipc : RdmaBackend::messages);
    finish(b.read_into(host.data(), n));
    EXPECT_EQ(checksum(host.data(), n), expected(n, 4));
    // Into this process's device memory, and back out with another pattern.
    void* dev = gpu::api().allocate(n);
    finish(b.read_into(dev, n));
    std::vector<std::byte> back(n);
    gpu::api().copy(back.data(), dev, n);
    EXPECT_EQ(checksum(back.data(), n), expected(n, 4));
    fill(host.data(), n, 6);
    gpu::api().copy(dev, host.data(), n);
    finish(b.write_from(dev, n));
    EXPECT_EQ(holder(0).call_one(&DeviceHolder::checksum_of_own).get(), expected(n, 6));
    gpu::api().free(dev);
    b.drop().get();
  }
}

}  // namespace
}  // namespace baton

int main(int argc, char** argv) {
  baton::Runtime rt(argc, argv);  // a worker serves here and never returns
  ::testing::InitGoogleTest(&argc, argv);
  const int rc = RUN_ALL_TESTS();
  // CTest's SKIP_RETURN_CODE: a run that skipped (no GPU) is reported as skipped, not passed.
  return rc == 0 && ::testing::UnitTest::GetInstance()->skipped_test_count() > 0 ? 77 : rc;
}
