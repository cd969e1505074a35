// `baton-bench allreduce`: a 64 MiB float sum over 4 procs through baton's collectives, against
// the same allreduce with Gloo set up directly (a file store, TCP on loopback) in the same
// processes and the same run, the two taking turns round by round.

#include <gloo/allreduce.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>

#include <chrono>
#include <filesystem>
#include <span>
#include <vector>

#include "baton/baton.hpp"
#include "baton/collective/collective.hpp"
#include "figures.hpp"

namespace baton::bench {
namespace {

using Clock = std::chrono::steady_clock;
constexpr std::size_t kFloats = std::size_t{16} << 20;  // 64 MiB
constexpr int kBlocks = 12;  // 64 MiB: each way runs 24 allreduces, 2 a block, in turns

class Reducer : public Actor {
 public:
  Task<int> join(collective::Group g) {
    co_await comm_.join(g, *this);
    co_return comm_.rank();
  }
  /// The ms of each of `rounds` allreduces of `floats` floats through the group.
  Task<std::vector<double>> through_baton(std::size_t floats, int rounds) {
    std::vector<float> data(floats, 1.0F);
    std::vector<double> ms;
    for (int i = 0; i < rounds; ++i) {
      const auto t0 = Clock::now();
      co_await comm_.allreduce(std::span<float>(data));
      ms.push_back(ms_since(t0));
    }
    co_return ms;
  }
  /// Sets up this rank's Gloo context of its own: a file store in `dir`, TCP on loopback.
  void connect_direct(const std::string& dir, int rank, int size) {
    gloo::transport::tcp::attr attr;
    attr.hostname = "127.0.0.1";
    auto device = gloo::transport::tcp::CreateDevice(attr);
    direct_ = std::make_shared<gloo::rendezvous::Context>(rank, size);
    gloo::rendezvous::FileStore store(dir);
    direct_->connectFullMesh(store, device);
  }
  /// The same as through_baton with that context.
  std::vector<double> direct_gloo(std::size_t floats, int rounds) {
    std::vector<float> data(floats, 1.0F);
    std::vector<double> ms;
    for (int i = 0; i < rounds; ++i) {
      const auto t0 = Clock::now();
      gloo::AllreduceOptions o(direct_);
      o.setOutput(data.data(), data.size());
      o.setReduceFunction([](void* out, const void* a, const void* b, std::size_t n) {
        auto* x = static_cast<float*>(out);
        const auto* p = static_cast<const float*>(a);
        const auto* q = static_cast<const float*>(b);
        for (std::size_t j = 0; j < n; ++j) x[j] = p[j] + q[j];
      });
      o.setTag(next_tag_++);
      gloo::allreduce(o);
      ms.push_back(ms_since(t0));
    }
    return ms;
  }
  int rank() const { return comm_.rank(); }
  static constexpr auto endpoints =
      baton::endpoints<&Reducer::join, &Reducer::through_baton, &Reducer::connect_direct,
                       &Reducer::direct_gloo, &Reducer::rank>();

 private:
  collective::Communicator comm_;
  std::shared_ptr<gloo::rendezvous::Context> direct_;
  std::uint32_t next_tag_ = 0;
};

}  // namespace

/// {through baton, with Gloo directly}: the slowest rank's median ms for `floats` floats, over
/// `blocks` blocks of `rounds` allreduces each way. The two take turns, and each goes first in
/// every other block, so that both see the same machine.
std::pair<double, double> measure(const ActorMesh<Reducer>& ranks, std::size_t floats, int rounds,
                                  int blocks) {
  std::vector<std::vector<double>> baton_ms(ranks.size());
  std::vector<std::vector<double>> gloo_ms(ranks.size());
  const auto add = [&](std::vector<std::vector<double>>& to,
                       const ValueMesh<std::vector<double>>& got) {
    for (std::size_t r = 0; r < ranks.size(); ++r)
      to[r].insert(to[r].end(), got[r].begin(), got[r].end());
  };
  for (int b = 0; b < blocks; ++b) {
    const bool gloo_first = b % 2 == 1;
    if (gloo_first) add(gloo_ms, ranks.call(&Reducer::direct_gloo, floats, rounds).get());
    add(baton_ms, ranks.call(&Reducer::through_baton, floats, rounds).get());
    if (!gloo_first) add(gloo_ms, ranks.call(&Reducer::direct_gloo, floats, rounds).get());
  }
  // A collective is as slow as its slowest rank.
  double ours = 0;
  double theirs = 0;
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    ours = std::max(ours, median(baton_ms[r]));
    theirs = std::max(theirs, median(gloo_ms[r]));
  }
  return {ours, theirs};
}

int run_allreduce() {
  constexpr std::size_t kProcs = 4;
  ProcMesh procs = this_host().spawn_procs({{"procs", kProcs}});
  auto ranks = procs.spawn<Reducer>("reducers");
  (void)ranks.call(&Reducer::join, collective::make_group(ranks)).get();
  const auto dir =
      std::filesystem::temp_directory_path() / ("baton-bench-gloo-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::vector<Future<void>> connected;
  connected.reserve(kProcs);
  for (std::size_t r = 0; r < kProcs; ++r) {
    connected.push_back(ranks.at(r).call(&Reducer::connect_direct, dir.string(),
                                         static_cast<int>(r), static_cast<int>(kProcs)));
  }
  for (auto& c : connected) std::move(c).get();
  std::filesystem::remove_all(dir);
  const auto [ours, theirs] = measure(ranks, kFloats, 2, kBlocks);
  // A gradient of a small model (ddp_train's: 4810 floats), where latency is all.
  const auto [ours_small, theirs_small] = measure(ranks, 4810, 25, 8);
  procs.stop().get();
  print_figure("allreduce_64mib_p50", ours, "ms");
  print_figure("gloo_allreduce_64mib_p50", theirs, "ms");
  print_figure("allreduce_ratio", ours / theirs, "x");
  print_figure("allreduce_19kib_p50", ours_small * 1000, "us");
  print_figure("gloo_allreduce_19kib_p50", theirs_small * 1000, "us");
  print_figure("allreduce_19kib_ratio", ours_small / theirs_small, "x");
  return 0;
}

}  // namespace baton::bench
