// Part of `baton-bench store`, where there is a GPU: the store's device-memory paths, each
// beside its baseline from the same run. A get of 256 MiB stored in a volume of another proc
// into device memory, against one copy of 256 MiB from host to device memory; a put of 256 MiB
// from device memory, against one copy from device to host memory; and 256 MiB read from a
// direct writer's device memory in another proc into device memory (GPU IPC), against one
// device-to-device copy; then a weight sync of a model of 0.6 billion bfloat16 parameters
// (1.2 GB) read the same way.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "baton/baton.hpp"
#include "baton/store/store.hpp"
#include "figures.hpp"

namespace baton::bench {
namespace {

/// Opens direct keys over two buffers of its own device memory.
class DeviceHolder : public Actor {
 public:
  /// Opens `key` over two device buffers of `size` bytes, every byte 3, and publishes one.
  Task<std::uint64_t> publish(store::Store s, std::string key, std::uint64_t size) {
    for (void*& b : buffers_) {
      b = gpu::api().allocate(size);
      gpu::api().fill(b, 3, size);
    }
    std::vector<std::span<std::byte>> spans;
    for (void* b : buffers_) spans.emplace_back(static_cast<std::byte*>(b), size);
    const store::TensorInfo info{"uint8", 1, {static_cast<std::int64_t>(size)}};
    writer_ = co_await s.direct(key, info, spans);
    const std::size_t i = co_await writer_.acquire();
    co_return (co_await writer_.publish(i)).version;
  }
  /// Closes the key and frees the memory.
  Task<bool> close() {
    co_await writer_.close();
    for (void* b : buffers_) gpu::api().free(b);
    co_return true;
  }
  static constexpr auto endpoints =
      baton::endpoints<&DeviceHolder::publish, &DeviceHolder::close>();

 private:
  void* buffers_[2] = {nullptr, nullptr};
  store::DirectWriter writer_;
};

}  // namespace

void run_store_device(const ProcMesh& procs, const store::Store& s) {
  gpu::DeviceApi& g = gpu::api();
  if (!g.available()) {
    std::printf("store device figures skipped: %s\n", g.status().c_str());
    return;
  }
  constexpr std::size_t big = std::size_t{256} << 20;
  constexpr int kReps = 5;
  std::vector<std::byte> host(big, std::byte{1});
  void* dev = g.allocate(big);
  void* other = g.allocate(big);
  g.fill(other, 2, big);
  const double h2d = best_gbps(big, kReps, [&] { g.copy(dev, host.data(), big); });
  const double d2h = best_gbps(big, kReps, [&] { g.copy(host.data(), other, big); });
  const double d2d = best_gbps(big, kReps, [&] { g.copy(dev, other, big); });

  const std::span<std::byte> into(static_cast<std::byte*>(dev), big);
  const store::TensorInfo info{"uint8", 1, {static_cast<std::int64_t>(big)}};
  const double put = best_gbps(big, kReps, [&] {
    s.put("device", std::span<const std::byte>(static_cast<const std::byte*>(other), big), info)
        .get();
  });
  const double get = best_gbps(big, kReps, [&] { s.get_into("device", into).get(); });
  std::fill(host.begin(), host.end(), std::byte{0});
  g.copy(host.data(), dev, big);
  if (host[big - 1] != std::byte{2}) throw std::runtime_error("device get returned wrong bytes");

  auto holder = procs.spawn<DeviceHolder>("device_holder");
  (void)holder.call_one(&DeviceHolder::publish, s, std::string("device_direct"), big).get();
  s.get_into("device_direct", into).get();  // warm: opens the IPC handle
  const double direct = best_gbps(big, kReps, [&] { s.get_into("device_direct", into).get(); });
  g.copy(host.data(), dev, big);
  if (host[0] != std::byte{3}) throw std::runtime_error("direct device get returned wrong bytes");
  (void)holder.call_one(&DeviceHolder::close).get();

  // A weight sync: 0.6 billion bfloat16 parameters, one direct key, device to device.
  constexpr std::size_t model = std::size_t{1200} * 1000 * 1000;
  g.free(dev);
  g.free(other);
  void* weights = g.allocate(model);
  (void)holder.call_one(&DeviceHolder::publish, s, std::string("model"), model).get();
  const std::span<std::byte> model_into(static_cast<std::byte*>(weights), model);
  s.get_into("model", model_into).get();
  const double sync = best_gbps(model, 3, [&] { s.get_into("model", model_into).get(); });
  (void)holder.call_one(&DeviceHolder::close).get();
  g.free(weights);

  print_figure("gpu_h2d_256mib", h2d, "GB/s");
  print_figure("store_get_device_256mib", get, "GB/s");
  print_figure("store_get_device_ratio_h2d", get / h2d, "x");
  print_figure("gpu_d2h_256mib", d2h, "GB/s");
  print_figure("store_put_device_256mib", put, "GB/s");
  print_figure("store_put_device_ratio_d2h", put / d2h, "x");
  print_figure("gpu_copy_256mib", d2d, "GB/s");
  print_figure("store_direct_device_get_256mib", direct, "GB/s");
  print_figure("store_direct_device_ratio_copy", direct / d2d, "x");
  print_figure("store_weight_sync_0_6b_bf16", static_cast<double>(model) / sync / 1e6, "ms");
}

}  // namespace baton::bench
