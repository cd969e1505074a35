// `baton-bench store`: the tensor store between the controller and a volume in another proc of
// this host, each figure beside its baseline from the same run: puts and gets of 256 MiB against
// a memcpy of 256 MiB; a 2-to-4 reshard (two row shards read as four column blocks) against the
// same bytes read whole; a state dict of 100 tensors of 1 MiB (put and get) against 100 reads of
// RdmaBuffers issued by hand; 256 MiB read from a direct writer's memory against the same
// memcpy; and 10,000 tensors of 4 KiB in one batch against one get of 40 MiB. Where there is a
// GPU, the device-memory paths too (store_gpu.cpp).

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "baton/baton.hpp"
#include "baton/store/store.hpp"
#include "figures.hpp"

namespace baton::bench {
namespace {

using Clock = std::chrono::steady_clock;
using store::Box;
using store::Store;
using store::TensorInfo;
constexpr std::size_t kMiB = std::size_t{1} << 20;

/// The median of `reps` runs of `f`, in seconds.
template <class F>
double median_seconds(int reps, F f) {
  std::vector<double> s;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = Clock::now();
    f();
    s.push_back(seconds_since(t0));
  }
  return median(s);
}

/// The medians of `reps` runs each of `base` and `ours`, taken in turns so that both see the same
/// machine (a neighbour's burst slows both, not one), in seconds.
template <class A, class B>
std::pair<double, double> medians_in_turns(int reps, A base, B ours) {
  std::vector<double> a;
  std::vector<double> b;
  for (int i = 0; i < reps; ++i) {
    auto t0 = Clock::now();
    base();
    a.push_back(seconds_since(t0));
    t0 = Clock::now();
    ours();
    b.push_back(seconds_since(t0));
  }
  return {median(a), median(b)};
}

/// Holds RdmaBuffers of its own memory, for the hand-made baseline.
class Holder : public Actor {
 public:
  std::vector<RdmaBuffer> expose(std::uint64_t count, std::uint64_t size) {
    std::vector<RdmaBuffer> out;
    for (std::uint64_t i = 0; i < count; ++i) {
      held_.push_back(RdmaBuffer::allocate(size));
      std::memset(held_.back().data(), static_cast<int>(i), size);
      out.push_back(held_.back());
    }
    return out;
  }
  /// Opens `key` in direct mode over two buffers of its own memory of `size` bytes each, and
  /// publishes one, every byte 1.
  Task<std::uint64_t> publish_direct(Store s, std::string key, std::uint64_t size) {
    direct_[0].assign(size, std::byte{1});
    direct_[1].assign(size, std::byte{1});
    std::vector<std::span<std::byte>> buffers{direct_[0], direct_[1]};
    const TensorInfo info{"uint8", 1, {static_cast<std::int64_t>(size)}};
    writer_ = co_await s.direct(key, info, buffers);
    const std::size_t i = co_await writer_.acquire();
    co_return (co_await writer_.publish(i)).version;
  }
  static constexpr auto endpoints = baton::endpoints<&Holder::expose, &Holder::publish_direct>();

 private:
  std::vector<RdmaBuffer> held_;
  std::vector<std::byte> direct_[2];
  store::DirectWriter writer_;
};

Bytes filled(std::size_t n, int value) {
  return Bytes::make(n, [&](std::span<std::byte> b) { std::memset(b.data(), value, b.size()); });
}

}  // namespace

int run_store() {
  auto procs = this_host().spawn_procs({{"procs", 1}});
  Store s = Store::create(procs, store::Spread::single);
  const std::size_t big = 256 * kMiB;
  constexpr int kReps = 5;
  constexpr int kTurns = 7;

  std::vector<std::byte> src(big, std::byte{1});
  std::vector<std::byte> dst(big, std::byte{2});
  const auto copy = [&] { std::memcpy(dst.data(), src.data(), big); };

  // 256 MiB as one float32 tensor of 64 Mi elements, laid out 8192 x 8192.
  const TensorInfo info{"float32", 4, {8192, 8192}};
  // The writer's own copy of its tensor, as the store's header shows it (Bytes::copy), then the
  // put; and the same with the copy written in place (Bytes::make), for comparison.
  const double put_s =
      median_seconds(kReps, [&] { s.put("big", Bytes::copy(src.data(), big), info).get(); });
  const double put_make_s = median_seconds(kReps, [&] {
    Bytes value = Bytes::make(
        big, [&](std::span<std::byte> b) { std::memcpy(b.data(), src.data(), b.size()); });
    s.put("big", std::move(value), info).get();
  });
  // Gets against memcpy, in turns: the ratio compares two things timed on the same machine.
  const auto [memcpy_s, get_s] =
      medians_in_turns(kTurns, copy, [&] { s.get_into("big", dst).get(); });
  std::fill(dst.begin(), dst.end(), std::byte{0});
  s.get_into("big", dst).get();
  if (dst[big - 1] != std::byte{1}) throw std::runtime_error("store get returned wrong bytes");

  // Resharded: put as two row shards, read as four column blocks (each assembled by the volume).
  const Box whole = Box::whole(info.shape);
  for (std::size_t i = 0; i < 2; ++i) {
    const Box rows = store::chunk(whole, 0, i, 2);
    s.put("sharded", filled(big / 2, static_cast<int>(i)), info, {.shard = rows}).get();
  }
  std::vector<std::byte> quarter(big / 4);
  const double reshard_s = median_seconds(kReps, [&] {
    for (std::size_t j = 0; j < 4; ++j) {
      s.get_into("sharded", quarter, {.box = store::chunk(whole, 1, j, 4)}).get();
    }
  });
  const double whole_s = median_seconds(kReps, [&] { s.get_into("sharded", dst).get(); });

  // A state dict: 100 tensors of 1 MiB, put then got, against 100 RdmaBuffer reads by hand.
  constexpr int kTensors = 100;
  std::vector<std::vector<std::byte>> outs(kTensors, std::vector<std::byte>(kMiB));
  const double dict_s = median_seconds(kReps, [&] {
    std::vector<std::tuple<std::string, Bytes, TensorInfo, store::PutOptions>> batch;
    batch.reserve(kTensors);
    for (int i = 0; i < kTensors; ++i) {
      batch.emplace_back("dict/layer" + std::to_string(i) + ".weight", filled(kMiB, i),
                         TensorInfo{"float32", 4, {512, 512}}, store::PutOptions{});
    }
    s.put_batch(batch).get();
    std::vector<Future<store::Got>> gets;
    gets.reserve(kTensors);
    for (int i = 0; i < kTensors; ++i) {
      gets.push_back(s.get_into("dict/layer" + std::to_string(i) + ".weight",
                                outs[static_cast<std::size_t>(i)]));
    }
    for (auto& g : gets) std::move(g).get();
  });
  auto holder = procs.spawn<Holder>("holder");
  const std::vector<RdmaBuffer> buffers = holder.call_one(&Holder::expose, kTensors, kMiB).get();
  const double rdma_s = median_seconds(kReps, [&] {
    std::vector<Future<void>> reads;
    reads.reserve(kTensors);
    for (int i = 0; i < kTensors; ++i) {
      reads.push_back(buffers[static_cast<std::size_t>(i)].read_into(
          outs[static_cast<std::size_t>(i)].data(), kMiB));
    }
    for (auto& r : reads) std::move(r).get();
  });

  // Direct mode: 256 MiB read from the writer's own memory (in the volume's proc), leased.
  (void)holder.call_one(&Holder::publish_direct, s, std::string("direct"), big).get();
  const auto [direct_memcpy_s, direct_s] =
      medians_in_turns(kTurns, copy, [&] { s.get_into("direct", dst).get(); });
  std::fill(dst.begin(), dst.end(), std::byte{0});
  s.get_into("direct", dst).get();
  if (dst[big - 1] != std::byte{1}) throw std::runtime_error("direct get returned wrong bytes");

  // 10,000 tensors of 4 KiB in one batch, against one get of 40 MiB.
  constexpr int kSmall = 10000;
  constexpr std::size_t kSmallBytes = 4096;
  std::vector<std::tuple<std::string, Bytes, TensorInfo, store::PutOptions>> smalls;
  std::vector<std::string> small_keys;
  smalls.reserve(kSmall);
  small_keys.reserve(kSmall);
  for (int i = 0; i < kSmall; ++i) {
    small_keys.push_back("small/" + std::to_string(i));
    smalls.emplace_back(small_keys.back(), Bytes::copy(std::string(kSmallBytes, 's')),
                        TensorInfo{"float32", 4, {1024}}, store::PutOptions{});
  }
  s.put_batch(smalls).get();
  const double small_s = median_seconds(3, [&] {
    if (s.get_batch(small_keys).get().size() != kSmall) throw std::runtime_error("short batch");
  });
  const std::size_t forty = kSmall * kSmallBytes;
  s.put("forty", filled(forty, 3)).get();
  std::vector<std::byte> forty_dst(forty);
  const double forty_s = median_seconds(3, [&] { s.get_into("forty", forty_dst).get(); });
  run_store_device(procs, s);
  procs.stop().get();

  print_figure("memcpy_256mib", gbps(big, memcpy_s), "GB/s");
  print_figure("store_put_256mib", gbps(big, put_s), "GB/s");
  print_figure("store_put_made_in_place_256mib", gbps(big, put_make_s), "GB/s");
  print_figure("store_get_256mib", gbps(big, get_s), "GB/s");
  print_figure("store_get_ratio_memcpy", memcpy_s / get_s, "x");
  print_figure("store_direct_get_256mib", gbps(big, direct_s), "GB/s");
  print_figure("store_direct_get_ratio_memcpy", direct_memcpy_s / direct_s, "x");
  print_figure("store_reshard_2to4_256mib", gbps(big, reshard_s), "GB/s");
  print_figure("store_get_unsharded_256mib", gbps(big, whole_s), "GB/s");
  print_figure("store_reshard_ratio_unsharded", whole_s / reshard_s, "x");
  print_figure("store_state_dict_100x1mib", dict_s * 1e3, "ms");
  print_figure("rdma_reads_100x1mib", rdma_s * 1e3, "ms");
  print_figure("store_state_dict_ratio_rdma", dict_s / rdma_s, "x");
  print_figure("store_small_batch_10k", small_s * 1e3, "ms");
  print_figure("store_get_40mib", forty_s * 1e3, "ms");
  print_figure("store_small_batch_ratio_40mib", small_s / forty_s, "x");
  return 0;
}

}  // namespace baton::bench
