// Collectives on device memory through NCCL/RCCL, between real worker processes, one GPU each.
// Without a GPU or without the library every test skips saying why, and the binary exits with the
// code CTest reports as skipped (not passed).

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <span>
#include <vector>

#include "baton/collective/collective.hpp"
#include "baton/gpu/gpu.hpp"
#include "collective/nccl.hpp"
#include "host/hosts.test.hpp"

namespace baton {
namespace {

using collective::ReduceOp;
using ::testing::HasSubstr;

float input(int rank, std::size_t i) {
  return static_cast<float>((rank + 1) * 2) + static_cast<float>(i % 7);
}

/// A rank whose buffers live on GPU rank % device_count.
class DeviceRank : public Actor {
 public:
  Task<int> join(collective::Group g) {
    co_await comm_.join(g, *this);
    co_return comm_.rank();
  }
  int pid() { return static_cast<int>(::getpid()); }

  /// Every collective on device buffers of n floats; the results, copied back, one after another:
  /// allreduce (sum), broadcast from the last rank, allgather, reduce_scatter (max).
  Task<std::vector<float>> every_collective(std::size_t n) {
    const auto size = static_cast<std::size_t>(comm_.size());
    std::vector<float> host(n * size);
    for (std::size_t i = 0; i < host.size(); ++i) host[i] = input(comm_.rank(), i);
    Buffer a(n * size, device());
    Buffer b(n * size, device());
    std::vector<float> results;
    auto take = [&](const Buffer& buf, std::size_t count) {
      std::vector<float> out(count);
      gpu::api().copy(out.data(), buf.p, count * sizeof(float));
      results.insert(results.end(), out.begin(), out.end());
    };
    gpu::api().copy(a.p, host.data(), n * sizeof(float));
    co_await comm_.allreduce(std::span<float>(a.p, n));
    take(a, n);
    gpu::api().copy(a.p, host.data(), n * sizeof(float));
    co_await comm_.broadcast(std::span<float>(a.p, n), comm_.size() - 1);
    take(a, n);
    gpu::api().copy(a.p, host.data(), n * sizeof(float));
    co_await comm_.allgather(std::span<const float>(a.p, n), std::span<float>(b.p, n * size));
    take(b, n * size);
    gpu::api().copy(a.p, host.data(), n * size * sizeof(float));
    co_await comm_.reduce_scatter(std::span<const float>(a.p, n * size), std::span<float>(b.p, n),
                                  ReduceOp::max);
    take(b, n);
    co_return results;
  }

  Task<int> allreduce_forever() {
    Buffer a(1 << 20, device());
    for (;;) co_await comm_.allreduce(std::span<float>(a.p, 1 << 20));
  }

  static constexpr auto endpoints =
      baton::endpoints<&DeviceRank::join, &DeviceRank::pid, &DeviceRank::every_collective,
                       &DeviceRank::allreduce_forever>();

 private:
  struct Buffer {
    Buffer(std::size_t n, int device) {
      gpu::api().set_device(device);
      p = static_cast<float*>(gpu::api().allocate(n * sizeof(float)));
    }
    ~Buffer() { gpu::api().free(p); }
    Buffer(const Buffer&) = delete;
    Buffer& operator=(const Buffer&) = delete;
    float* p = nullptr;
  };
  int device() const { return comm_.rank() % gpu::api().device_count(); }
  collective::Communicator comm_;
};

/// How many ranks this machine can give a GPU each (up to 4), or 0 with `why` set.
int device_ranks(std::string& why) {
  why = collective::nccl::device_collectives_unavailable();
  if (!why.empty()) return 0;
  return std::min(gpu::api().device_count(), 4);
}

TEST(DeviceCollectives, EveryCollectiveOnDeviceMemoryMatchesADirectComputation) {
  std::string why;
  const int n_ranks = device_ranks(why);
  if (n_ranks == 0) GTEST_SKIP() << "no device collectives here: " << why;
  ProcMesh procs = this_host().spawn_procs({{"gpus", n_ranks}});
  auto ranks = procs.spawn<DeviceRank>("ranks");
  (void)ranks.call(&DeviceRank::join, collective::make_group(ranks)).get();
  for (std::size_t n : {std::size_t{1}, std::size_t{1000}, std::size_t{1} << 18}) {
    const auto size = static_cast<std::size_t>(n_ranks);
    const auto all = ranks.call(&DeviceRank::every_collective, n).get().values();
    ASSERT_EQ(all.size(), size);
    for (std::size_t r = 0; r < size; ++r) {
      const auto& v = all[r];
      ASSERT_EQ(v.size(), n * 3 + n * size);
      for (std::size_t i = 0; i < n; ++i) {
        float sum = 0;
        float max = input(0, r * n + i);
        for (int k = 0; k < n_ranks; ++k) {
          sum += input(k, i);
          max = std::max(max, input(k, r * n + i));
        }
        ASSERT_EQ(v[i], sum) << "allreduce, rank " << r << " i " << i;
        ASSERT_EQ(v[n + i], input(n_ranks - 1, i)) << "broadcast, rank " << r << " i " << i;
        for (std::size_t k = 0; k < size; ++k) {
          ASSERT_EQ(v[2 * n + k * n + i], input(static_cast<int>(k), i)) << "allgather";
        }
        ASSERT_EQ(v[2 * n + size * n + i], max) << "reduce_scatter, rank " << r << " i " << i;
      }
    }
  }
  procs.stop().get();
}

TEST(DeviceCollectives, ARankKilledInsideNcclFailsTheOthersNamingItNeverAHang) {
  std::string why;
  const int n_ranks = device_ranks(why);
  if (n_ranks < 2) {
    GTEST_SKIP() << "needs two GPUs for two ranks: "
                 << (why.empty() ? std::to_string(n_ranks) + " here" : why);
  }
  ProcMesh procs = this_host().spawn_procs({{"gpus", n_ranks}});
  auto ranks = procs.spawn<DeviceRank>("ranks");
  (void)ranks.call(&DeviceRank::join, collective::make_group(ranks)).get();
  const int victim = ranks.slice("gpus", n_ranks - 1).call(&DeviceRank::pid).get().values().at(0);
  auto live = ranks.slice("gpus", 0, n_ranks - 1);
  auto pending = live.call(&DeviceRank::allreduce_forever);
  auto doomed = ranks.slice("gpus", n_ranks - 1).call(&DeviceRank::allreduce_forever);
  ::kill(victim, SIGKILL);
  try {
    (void)pending.get(std::chrono::seconds(60));
    ADD_FAILURE() << "allreduces with a dead rank went on";
  } catch (const TimeoutError&) {
    ADD_FAILURE() << "an allreduce with a dead rank hung";
  } catch (const std::exception& e) {
    EXPECT_THAT(e.what(), HasSubstr("rank " + std::to_string(n_ranks - 1)));
  }
  live.stop().get();
}

}  // namespace
}  // namespace baton

int main(int argc, char** argv) {
  const int rc = baton::test::run_hosts_test(argc, argv);
  return rc == 0 && ::testing::UnitTest::GetInstance()->skipped_test_count() > 0 ? 77 : rc;
}
