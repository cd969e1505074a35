// `baton-bench rdma`: reads of an RdmaBuffer owned by another proc on this host, into memory
// touched beforehand, against a single-thread memcpy of the same size into touched memory in
// the same run; the forced message fallback; the cost of first-touching fresh memory; and,
// where there is a GPU, device memory through GPU IPC against a device-to-device copy.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "baton/baton.hpp"
#include "figures.hpp"

namespace baton::bench {
namespace {

using Clock = std::chrono::steady_clock;
constexpr std::size_t kMiB = std::size_t{1} << 20;

class Owner : public Actor {
 public:
  /// kind 0: UCX-allocated host memory; 1: this process's own heap memory; 2: device memory.
  RdmaBuffer expose(std::uint64_t size, int kind) {
    if (kind == 2) {
      void* d = gpu::api().allocate(size);
      gpu::api().fill(d, 7, size);
      held_.push_back(RdmaBuffer::register_memory(d, size));
    } else if (kind == 1) {
      heap_.emplace_back(new std::byte[size]);
      std::memset(heap_.back().get(), 7, size);
      held_.push_back(RdmaBuffer::register_memory(heap_.back().get(), size));
    } else {
      held_.push_back(RdmaBuffer::allocate(size));
      std::memset(held_.back().data(), 7, size);
    }
    return held_.back();
  }
  static constexpr auto endpoints = baton::endpoints<&Owner::expose>();

 private:
  std::vector<std::unique_ptr<std::byte[]>> heap_;
  std::vector<RdmaBuffer> held_;
};

}  // namespace

int run_rdma() {
  auto procs = this_host().spawn_procs({{"procs", 1}});
  auto owner = procs.spawn<Owner>("owner");
  const std::size_t big = 256 * kMiB;

  // Baselines: single-thread memcpy between touched buffers, and into fresh memory.
  std::vector<std::byte> src(big, std::byte{1});
  std::vector<std::byte> dst(big, std::byte{2});
  const double memcpy_gbps = best_gbps(big, 5, [&] { std::memcpy(dst.data(), src.data(), big); });
  double first_touch_gbps = 0;
  {
    auto t0 = Clock::now();
    std::unique_ptr<std::byte[]> fresh(new std::byte[big]);
    std::memcpy(fresh.get(), src.data(), big);
    first_touch_gbps = static_cast<double>(big) / seconds_since(t0) / 1e9;
  }

  RdmaBuffer shm = owner.call_one(&Owner::expose, big, 0).get();
  RdmaBuffer heap = owner.call_one(&Owner::expose, big, 1).get();
  // UCX's own shared memory, read through UCX.
  set_rdma_backend(RdmaBackend::ucx);
  if (rdma_backend(shm, dst.data()) != RdmaBackend::ucx) {
    throw std::runtime_error("expected the ucx backend, got " +
                             std::string(to_string(rdma_backend(shm, dst.data()))));
  }
  auto read = [&](const RdmaBuffer& b, std::size_t n) { b.read_into(dst.data(), n).get(); };
  read(shm, big);  // warm: endpoint, keys, the mapping
  if (dst[big - 1] != std::byte{7}) throw std::runtime_error("rdma read returned wrong bytes");

  const int small_reps = 200;
  const double read_1mib = best_gbps(kMiB * small_reps, 3, [&] {
    for (int i = 0; i < small_reps; ++i) read(shm, kMiB);
  });
  const double read_64mib = best_gbps(64 * kMiB, 5, [&] { read(shm, 64 * kMiB); });
  const double read_256mib = best_gbps(big, 5, [&] { read(shm, big); });
  // The owner's ordinary heap memory, the way chosen by itself (cross-memory attach where the
  // kernel allows it).
  set_rdma_backend(RdmaBackend::automatic);
  std::printf("# heap memory of another proc goes by %s%s\n",
              std::string(to_string(rdma_backend(heap, dst.data()))).c_str(),
              rdma_stats().cma_refused.empty()
                  ? ""
                  : (" (cross-memory attach refused: " + rdma_stats().cma_refused + ")").c_str());
  read(heap, big);
  const double read_heap_256mib = best_gbps(big, 3, [&] { read(heap, big); });
  set_rdma_backend(RdmaBackend::messages);
  const double fallback_256mib = best_gbps(big, 3, [&] { read(shm, big); });
  set_rdma_backend(RdmaBackend::automatic);

  print_figure("rdma_read_1mib", read_1mib, "GB/s");
  print_figure("rdma_read_64mib", read_64mib, "GB/s");
  print_figure("rdma_read_256mib", read_256mib, "GB/s");
  print_figure("memcpy_256mib", memcpy_gbps, "GB/s");
  print_figure("rdma_read_ratio", read_256mib / memcpy_gbps, "x");
  print_figure("rdma_read_heap_256mib", read_heap_256mib, "GB/s");
  print_figure("rdma_read_heap_ratio", read_heap_256mib / memcpy_gbps, "x");
  print_figure("fallback_read_256mib", fallback_256mib, "GB/s");
  print_figure("first_touch_256mib", first_touch_gbps, "GB/s");

  if (gpu::api().available()) {
    RdmaBuffer dev = owner.call_one(&Owner::expose, big, 2).get();
    gpu::DeviceApi& g = gpu::api();
    void* a = g.allocate(big);
    void* b = g.allocate(big);
    g.fill(a, 1, big);
    g.fill(b, 2, big);
    const double d2d = best_gbps(big, 5, [&] { g.copy(b, a, big); });
    dev.read_into(b, big).get();  // warm: opens the IPC handle
    const double ipc = best_gbps(big, 5, [&] { dev.read_into(b, big).get(); });
    const double ipc_to_host = best_gbps(big, 3, [&] { dev.read_into(dst.data(), big).get(); });
    print_figure("gpu_ipc_read_256mib", ipc, "GB/s");
    print_figure("gpu_copy_256mib", d2d, "GB/s");
    print_figure("gpu_ipc_ratio", ipc / d2d, "x");
    print_figure("gpu_ipc_read_to_host_256mib", ipc_to_host, "GB/s");
    g.free(a);
    g.free(b);
  } else {
    std::printf("gpu figures skipped: %s\n", gpu::api().status().c_str());
  }
  procs.stop().get();
  return 0;
}

}  // namespace baton::bench
