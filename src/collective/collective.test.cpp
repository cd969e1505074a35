// Collectives through Gloo between real worker processes: each collective against a direct
// computation for several sizes and element types, with three ranks (not a power of two) and a
// slice of a mesh; small buffers (through baton's own messages) folded alike on every rank; ranks
// that enter different collectives (count, type, reduction, root or kind) all fail saying how; a
// rank killed in the middle of one fails the others naming it, never hangs, and a new group of the
// live members works.

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <numeric>
#include <span>
#include <vector>

#include "actor/metrics.hpp"
#include "baton/collective/collective.hpp"
#include "baton/gpu/gpu.hpp"
#include "collective/nccl.hpp"
#include "host/admin.test.hpp"
#include "host/hosts.test.hpp"

namespace baton {
namespace {

using collective::ReduceOp;
using ::testing::HasSubstr;

/// Rank r's input element i.
double input(std::size_t r, std::size_t i) {
  return static_cast<double>((r + 1) * 3) + static_cast<double>(i % 11) * 0.25;
}

/// Rank r's element i in round k of many_f32: magnitudes far apart, so that a float sum depends
/// on the order it is taken in (1e8 + 1 is 1e8 in float).
float folding_input(std::size_t r, int k, std::size_t i) {
  const float big = (i + static_cast<std::size_t>(k)) % 2 == 0 ? 1e8F : -1e8F;
  const float values[] = {big, 1.0F + static_cast<float>(k % 5), -big, 0.5F};
  return values[r % 4] * (r >= 4 ? 0.25F : 1.0F);
}

class Rank : public Actor {
 public:
  Task<int> join(collective::Group g) {
    co_await comm_.join(g, *this);
    co_return comm_.rank();
  }
  int pid() { return static_cast<int>(::getpid()); }

  /// Allreduces this rank's input (as type T, sent as doubles) and returns the result.
  template <class T>
  Task<std::vector<double>> allreduce_as(std::size_t n, int op) {
    std::vector<T> v(n);
    for (std::size_t i = 0; i < n; ++i) v[i] = T(input(rank(), i));
    co_await comm_.allreduce(std::span<T>(v), static_cast<ReduceOp>(op));
    std::vector<double> out(n);
    for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<double>(static_cast<float>(v[i]));
    co_return out;
  }
  Task<std::vector<double>> allreduce_f32(std::size_t n, int op) {
    return allreduce_as<float>(n, op);
  }
  Task<std::vector<double>> allreduce_f64(std::size_t n, int op) {
    return allreduce_as<double>(n, op);
  }
  Task<std::vector<double>> allreduce_f16(std::size_t n, int op) {
    return allreduce_as<collective::float16>(n, op);
  }
  Task<std::vector<double>> allreduce_bf16(std::size_t n, int op) {
    return allreduce_as<collective::bfloat16>(n, op);
  }
  Task<std::vector<std::int64_t>> allreduce_i64(std::size_t n, int op) {
    std::vector<std::int64_t> v(n);
    for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::int64_t>(rank() * 1000 + i);
    co_await comm_.allreduce(std::span<std::int64_t>(v), static_cast<ReduceOp>(op));
    co_return v;
  }
  Task<std::vector<std::int32_t>> broadcast_i32(std::size_t n, int root) {
    std::vector<std::int32_t> v(n, static_cast<std::int32_t>(rank() + 100));
    co_await comm_.broadcast(std::span<std::int32_t>(v), root);
    co_return v;
  }
  Task<std::vector<double>> allgather_f64(std::size_t n) {
    std::vector<double> in(n);
    for (std::size_t i = 0; i < n; ++i) in[i] = input(rank(), i);
    std::vector<double> out(n * static_cast<std::size_t>(comm_.size()));
    co_await comm_.allgather(std::span<const double>(in), std::span<double>(out));
    co_return out;
  }
  Task<std::vector<double>> reduce_scatter_f32(std::size_t n, int op) {
    const auto size = static_cast<std::size_t>(comm_.size());
    std::vector<float> in(n * size);
    for (std::size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(input(rank(), i));
    std::vector<float> out(n);
    co_await comm_.reduce_scatter(std::span<const float>(in), std::span<float>(out),
                                  static_cast<ReduceOp>(op));
    co_return std::vector<double>(out.begin(), out.end());
  }
  /// How many `op` collectives this rank's proc has timed, as its metrics say.
  double timed(const std::string& op) {
    for (const auto& s : detail::proc_metrics(proc()).samples) {
      if (s.name == "baton_collective_duration_seconds_count" && s.labels == "op=\"" + op + "\"") {
        return s.value;
      }
    }
    return 0;
  }
  Task<int> barrier() {
    co_await comm_.barrier();
    co_return comm_.rank();
  }
  /// `rounds` allreduces (sum) back to back of folding_input, the results one after another.
  Task<std::vector<float>> many_f32(int rounds, std::size_t n) {
    std::vector<float> all;
    for (int k = 0; k < rounds; ++k) {
      std::vector<float> v(n);
      for (std::size_t i = 0; i < n; ++i) v[i] = folding_input(rank(), k, i);
      co_await comm_.allreduce(std::span<float>(v));
      all.insert(all.end(), v.begin(), v.end());
    }
    co_return all;
  }
  /// One collective as `what` says: "allreduce" (`n` floats, `arg` a ReduceOp), "broadcast"
  /// (`n` ints from root `arg`), "allgather" (`n` doubles) or "barrier".
  Task<int> enter(std::string what, std::size_t n, int arg) {
    if (what == "allreduce") {
      std::vector<float> v(n, 1.0F);
      co_await comm_.allreduce(std::span<float>(v), static_cast<ReduceOp>(arg));
    } else if (what == "broadcast") {
      std::vector<std::int32_t> v(n, 7);
      co_await comm_.broadcast(std::span<std::int32_t>(v), arg);
    } else if (what == "allgather") {
      std::vector<double> in(n, 1.0);
      std::vector<double> out(n * static_cast<std::size_t>(comm_.size()));
      co_await comm_.allgather(std::span<const double>(in), std::span<double>(out));
    } else {
      co_await comm_.barrier();
    }
    co_return 0;
  }

  /// An allreduce of `n` ones and, issued before it ends, a broadcast from rank 0 of 300,000
  /// ints (through Gloo's ring), each awaited after: "ok" for each that gave the right values,
  /// else what it gave or why it failed.
  Task<std::vector<std::string>> two_at_once(std::size_t n) {
    std::vector<float> a(n, 1.0F);
    std::vector<std::int32_t> b(300000, static_cast<std::int32_t>(rank()));
    auto first = comm_.allreduce(std::span<float>(a));
    auto second = comm_.broadcast(std::span<std::int32_t>(b), 0);
    std::vector<std::string> out;
    const auto size = static_cast<float>(comm_.size());
    try {
      co_await std::move(first);
      const bool right = std::all_of(a.begin(), a.end(), [&](float x) { return x == size; });
      out.emplace_back(right ? "ok" : "wrong sums");
    } catch (const std::exception& e) {
      out.emplace_back(e.what());
    }
    try {
      co_await std::move(second);
      const bool right = std::all_of(b.begin(), b.end(), [](std::int32_t x) { return x == 0; });
      out.emplace_back(right ? "ok" : "wrong broadcast");
    } catch (const std::exception& e) {
      out.emplace_back(e.what());
    }
    co_return out;
  }

  static constexpr auto endpoints =
      baton::endpoints<&Rank::join, &Rank::pid, &Rank::allreduce_f32, &Rank::allreduce_f64,
                       &Rank::allreduce_f16, &Rank::allreduce_bf16, &Rank::allreduce_i64,
                       &Rank::broadcast_i32, &Rank::allgather_f64, &Rank::reduce_scatter_f32,
                       &Rank::barrier, &Rank::timed, &Rank::many_f32, &Rank::enter,
                       &Rank::two_at_once>();

 private:
  std::size_t rank() const { return static_cast<std::size_t>(comm_.rank()); }
  collective::Communicator comm_;
};

/// The elementwise `op` over ranks `ranks` of input(r, i).
double expected(ReduceOp op, std::size_t ranks, std::size_t i) {
  double acc = input(0, i);
  for (std::size_t r = 1; r < ranks; ++r) {
    const double x = input(r, i);
    acc = op == ReduceOp::min ? std::min(acc, x) : op == ReduceOp::max ? std::max(acc, x) : acc + x;
  }
  return op == ReduceOp::avg ? acc / static_cast<double>(ranks) : acc;
}

TEST(Collective, HalfPrecisionConvertsAsIeeeSaysRoundingToNearestEven) {
  using collective::bfloat16;
  using collective::float16;
  EXPECT_EQ(float16(1.0F).bits, 0x3c00);
  EXPECT_EQ(float16(-2.0F).bits, 0xc000);
  EXPECT_EQ(float16(65504.0F).bits, 0x7bff);                      // the largest half
  EXPECT_EQ(float16(1e6F).bits, 0x7c00);                          // overflows to infinity
  EXPECT_EQ(float16(std::ldexp(1.0F, -24)).bits, 0x0001);         // the smallest subnormal
  EXPECT_EQ(float16(1.0F + std::ldexp(1.0F, -11)).bits, 0x3c00);  // a tie: to even
  EXPECT_EQ(float16(1.0F + 3 * std::ldexp(1.0F, -11)).bits, 0x3c02);
  EXPECT_TRUE(std::isnan(static_cast<float>(float16(std::nanf("")))));
  for (std::uint32_t b = 0; b < 0x7c00; ++b) {  // every finite half survives float and back
    float16 h;
    h.bits = static_cast<std::uint16_t>(b);
    ASSERT_EQ(float16(static_cast<float>(h)).bits, b);
  }
  EXPECT_EQ(bfloat16(1.0F).bits, 0x3f80);
  EXPECT_EQ(static_cast<float>(bfloat16(3.140625F)), 3.140625F);
  EXPECT_EQ(bfloat16(1.0F + std::ldexp(1.0F, -8)).bits, 0x3f80);  // a tie: to even
  EXPECT_TRUE(std::isnan(static_cast<float>(bfloat16(std::nanf("")))));
}

TEST(Collective, DeviceCollectivesWithoutAGpuOrNcclAreRefusedSayingWhy) {
  const std::string why = collective::nccl::device_collectives_unavailable();
  if (!gpu::api().available()) {
    EXPECT_THAT(why, HasSubstr("no GPU here"));
    EXPECT_THAT(why, HasSubstr(gpu::api().status()));
  } else if (!why.empty()) {
    EXPECT_THAT(why, HasSubstr("install"));  // a GPU, but no NCCL/RCCL: what to install
  }
}

TEST(Collective, EveryCollectiveMatchesADirectComputation) {
  ProcMesh procs = this_host().spawn_procs({{"procs", 3}});
  auto ranks = procs.spawn<Rank>("ranks");
  EXPECT_EQ(ranks.call(&Rank::join, collective::make_group(ranks)).get().values(),
            (std::vector<int>{0, 1, 2}));
  for (std::size_t n : {std::size_t{1}, std::size_t{1000}, std::size_t{300001}}) {
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::min, ReduceOp::max}) {
      const int o = static_cast<int>(op);
      struct Case {
        const char* type;
        std::vector<std::vector<double>> got;
        double tolerance;  // relative
      };
      const Case cases[] = {
          {"f32", ranks.call(&Rank::allreduce_f32, n, o).get().values(), 1e-6},
          {"f64", ranks.call(&Rank::allreduce_f64, n, o).get().values(), 1e-12},
          {"f16", ranks.call(&Rank::allreduce_f16, n, o).get().values(), 4e-3},
          {"bf16", ranks.call(&Rank::allreduce_bf16, n, o).get().values(), 3e-2},
      };
      for (const auto& c : cases) {
        ASSERT_EQ(c.got.size(), 3u);
        for (const auto& v : c.got) {
          ASSERT_EQ(v.size(), n);
          for (std::size_t i = 0; i < n; ++i) {
            const double want = expected(op, 3, i);
            ASSERT_NEAR(v[i], want, std::abs(want) * c.tolerance)
                << c.type << " op " << o << " n " << n << " i " << i;
          }
        }
      }
    }
    for (const auto& v : ranks.call(&Rank::allreduce_i64, n, 0).get().values()) {
      for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(v[i], static_cast<std::int64_t>(3000 + 3 * i));
    }
    for (const auto& v : ranks.call(&Rank::broadcast_i32, n, 2).get().values()) {
      EXPECT_EQ(v, std::vector<std::int32_t>(n, 102));
    }
    for (const auto& v : ranks.call(&Rank::allgather_f64, n).get().values()) {
      ASSERT_EQ(v.size(), 3 * n);
      for (std::size_t r = 0; r < 3; ++r) {
        for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(v[r * n + i], input(r, i));
      }
    }
    const auto scattered = ranks.call(&Rank::reduce_scatter_f32, n, 0).get().values();
    for (std::size_t r = 0; r < 3; ++r) {
      for (std::size_t i = 0; i < n; ++i) {
        const double want = expected(ReduceOp::sum, 3, r * n + i);
        ASSERT_NEAR(scattered[r][i], want, want * 1e-6) << "rank " << r << " i " << i;
      }
    }
  }
  EXPECT_EQ(ranks.call(&Rank::barrier).get().values(), (std::vector<int>{0, 1, 2}));
  procs.stop().get();
}

TEST(Collective, AGroupOfOneRunsEveryCollectiveOnItsOwnBuffersAndTimesEach) {
  ProcMesh procs = this_host().spawn_procs({{"procs", 1}});
  auto ranks = procs.spawn<Rank>("ranks");
  EXPECT_EQ(ranks.call(&Rank::join, collective::make_group(ranks)).get().values(),
            std::vector<int>{0});
  // 1000 floats run where they are called (the group has no one to wait for); 300,001 too,
  // through Gloo's context of one.
  for (std::size_t n : {std::size_t{1000}, std::size_t{300001}}) {
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::max}) {
      const auto got = ranks.call(&Rank::allreduce_f32, n, static_cast<int>(op)).get().values();
      for (std::size_t i = 0; i < n; ++i) {
        ASSERT_EQ(got.at(0).at(i), static_cast<double>(static_cast<float>(input(0, i)))) << i;
      }
    }
    EXPECT_EQ(ranks.call(&Rank::broadcast_i32, n, 0).get().values().at(0),
              std::vector<std::int32_t>(n, 100));
    const auto gathered = ranks.call(&Rank::allgather_f64, n).get().values().at(0);
    for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(gathered.at(i), input(0, i));
    const auto scattered = ranks.call(&Rank::reduce_scatter_f32, n, 0).get().values().at(0);
    for (std::size_t i = 0; i < n; ++i) {
      ASSERT_EQ(scattered.at(i), static_cast<double>(static_cast<float>(input(0, i))));
    }
  }
  EXPECT_EQ(ranks.call(&Rank::barrier).get().values(), std::vector<int>{0});
  EXPECT_EQ(ranks.call(&Rank::timed, std::string("allreduce")).get().values().at(0), 6.0);
  EXPECT_EQ(ranks.call(&Rank::timed, std::string("barrier")).get().values().at(0), 1.0);
  procs.stop().get();
}

TEST(Collective, EachRanksMetricsTimeItsCollectivesByOperation) {
  ProcMesh procs = this_host().spawn_procs({{"procs", 2}});
  auto ranks = procs.spawn<Rank>("ranks");
  (void)ranks.call(&Rank::join, collective::make_group(ranks)).get();
  const auto before = ranks.call(&Rank::timed, std::string("allreduce")).get().values();
  for (int i = 0; i < 3; ++i) (void)ranks.call(&Rank::allreduce_i64, 4, 0).get();
  (void)ranks.call(&Rank::barrier).get();
  const auto after = ranks.call(&Rank::timed, std::string("allreduce")).get().values();
  for (std::size_t r = 0; r < after.size(); ++r) EXPECT_EQ(after[r] - before[r], 3.0) << r;
  for (const double n : ranks.call(&Rank::timed, std::string("barrier")).get().values()) {
    EXPECT_EQ(n, 1.0);
  }
  procs.stop().get();
}

TEST(Collective, ASliceOfAMeshIsAGroupOfItsOwn) {
  ProcMesh procs = this_host().spawn_procs({{"procs", 4}});
  auto ranks = procs.spawn<Rank>("ranks");
  auto slice = ranks.slice("procs", 1, 4);  // mesh ranks 1, 2, 3: group ranks 0, 1, 2
  EXPECT_EQ(slice.call(&Rank::join, collective::make_group(slice)).get().values(),
            (std::vector<int>{0, 1, 2}));
  for (const auto& v : slice.call(&Rank::allreduce_i64, 5, 0).get().values()) {
    EXPECT_EQ(v, (std::vector<std::int64_t>{3000, 3003, 3006, 3009, 3012}));
  }
  procs.stop().get();
}

TEST(Collective, AProcMeshSliceIsAGroupAnActorInEachOfItsProcsJoins) {
  ProcMesh procs = this_host().spawn_procs({{"procs", 4}});
  auto ranks = procs.spawn<Rank>("ranks");
  const collective::Group group = collective::make_group(procs.slice("procs", 1, 4));
  try {  // proc 0 is not in the group
    (void)ranks.slice("procs", 0).call(&Rank::join, group).get();
    ADD_FAILURE() << "an actor outside the group's procs joined it";
  } catch (const std::exception& e) {
    EXPECT_THAT(e.what(), HasSubstr("is not a member of the group"));
  }
  auto members = ranks.slice("procs", 1, 4);
  EXPECT_EQ(members.call(&Rank::join, group).get().values(), (std::vector<int>{0, 1, 2}));
  for (const auto& v : members.call(&Rank::allreduce_i64, 2, 0).get().values()) {
    EXPECT_EQ(v, (std::vector<std::int64_t>{3000, 3003}));
  }
  procs.stop().get();
}

TEST(Collective, ACollectiveWaitingLongerThanStallAfterNamesTheRanksThatHaveNotEnteredIt) {
  const auto job = this_job();
  ProcMesh procs = this_host().spawn_procs({{"procs", 3}});
  auto ranks = procs.spawn<Rank>("ranks");
  (void)ranks.call(&Rank::join, collective::make_group(ranks)).get();
  // Ranks 0 and 1 enter an allreduce that rank 2 enters only once their stall is logged.
  auto early = ranks.slice("procs", 0, 2).call(&Rank::allreduce_i64, 3, 0);
  const std::string rank0 = ranks.at(0).id().proc.name;
  const std::string logs = "/api/logs?level=warn&proc=" + rank0;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  Reply logged;
  do {
    logged = get(job, logs);
  } while (logged.body.find("have not entered it") == std::string::npos &&
           std::chrono::steady_clock::now() < until);
  EXPECT_THAT(logged.body, HasSubstr("collective allreduce number 1 on rank 0 of 3 has waited"));
  EXPECT_THAT(logged.body,
              HasSubstr("for the ranks that have not entered it: rank 2 (" +
                        ranks.at(2).id().to_string() + ", has entered 0 collectives)"));
  EXPECT_THAT(logged.body, Not(HasSubstr("rank 1 (")));
  auto late = ranks.slice("procs", 2).call(&Rank::allreduce_i64, 3, 0);
  for (const auto& v : early.get().values()) {
    EXPECT_EQ(v, (std::vector<std::int64_t>{3000, 3003, 3006}));
  }
  EXPECT_EQ(late.get().values().at(0), (std::vector<std::int64_t>{3000, 3003, 3006}));
  procs.stop().get();
}

TEST(Collective, SmallAllreducesGiveEveryRankTheSameBitsFoldedInRankOrderRoundAfterRound) {
  // Small buffers go through baton's messages (every rank's part to every other), not Gloo's
  // ring: each rank folds the parts itself, and must fold them as every other rank does.
  constexpr std::size_t kRanks = 4;
  constexpr int kRounds = 300;
  constexpr std::size_t kN = 3;
  ProcMesh procs = this_host().spawn_procs({{"procs", kRanks}});
  auto ranks = procs.spawn<Rank>("ranks");
  (void)ranks.call(&Rank::join, collective::make_group(ranks)).get();
  const auto got = ranks.call(&Rank::many_f32, kRounds, kN).get().values();
  ASSERT_EQ(got.size(), kRanks);
  for (int k = 0; k < kRounds; ++k) {
    for (std::size_t i = 0; i < kN; ++i) {
      float want = folding_input(0, k, i);
      for (std::size_t r = 1; r < kRanks; ++r) want += folding_input(r, k, i);
      for (std::size_t r = 0; r < kRanks; ++r) {
        const float v = got[r].at(static_cast<std::size_t>(k) * kN + i);
        ASSERT_EQ(std::bit_cast<std::uint32_t>(v), std::bit_cast<std::uint32_t>(want))
            << "rank " << r << " round " << k << " element " << i << ": " << v << " not " << want;
      }
    }
  }
  procs.stop().get();
}

TEST(Collective, ACollectiveIssuedBeforeTheOneBeforeEndedRunsAfterItAndFailsWithIt) {
  ProcMesh procs = this_host().spawn_procs({{"procs", 3}});
  auto ranks = procs.spawn<Rank>("ranks");
  // A small allreduce (started where it is called) and a large broadcast issued behind it,
  // 50 times: both right on every rank, every time.
  (void)ranks.call(&Rank::join, collective::make_group(ranks)).get();
  for (int round = 0; round < 50; ++round) {
    for (const auto& got : ranks.call(&Rank::two_at_once, 1000).get().values()) {
      ASSERT_EQ(got, (std::vector<std::string>{"ok", "ok"})) << "round " << round;
    }
  }
  // Rank 1 passes another count: the allreduce fails on every rank, and the broadcast behind
  // it too, the group broken, though Gloo's ring would have run it.
  (void)ranks.call(&Rank::join, collective::make_group(ranks)).get();
  std::vector<Future<std::vector<std::string>>> calls;
  for (std::size_t r = 0; r < 3; ++r) {
    calls.push_back(ranks.at(r).call(&Rank::two_at_once, r == 1 ? 4 : 5));
  }
  for (std::size_t r = 0; r < 3; ++r) {
    const auto got = calls[r].get(std::chrono::seconds(60));
    ASSERT_EQ(got.size(), 2u);
    EXPECT_THAT(got[0], HasSubstr("every rank passes the same count and type")) << r;
    EXPECT_THAT(got[1], HasSubstr("the group is broken")) << r;
    EXPECT_THAT(got[1], HasSubstr("every rank passes the same count and type")) << r;
  }
  procs.stop().get();
}

TEST(Collective, RanksEnteringDifferentCollectivesAllFailSayingHowTheyDiffer) {
  ProcMesh procs = this_host().spawn_procs({{"procs", 3}});
  auto ranks = procs.spawn<Rank>("ranks");
  struct Entered {
    std::string what;
    std::size_t n;
    int arg;
  };
  struct Case {
    Entered others;  // ranks 0 and 2
    Entered rank1;
    std::string said;  // by every rank
  };
  const int sum = static_cast<int>(ReduceOp::sum);
  // 10,000 floats go through baton's messages, 20,000 and more through Gloo's ring.
  const Case cases[] = {
      {{"allreduce", 5, sum}, {"allreduce", 4, sum}, "every rank passes the same count and type"},
      {{"allreduce", 10000, sum}, {"allreduce", 20000, sum}, "40000 bytes"},
      {{"allreduce", 30000, sum}, {"allreduce", 20000, sum}, "80000 bytes"},
      {{"allreduce", 5, sum},
       {"allreduce", 5, static_cast<int>(ReduceOp::max)},
       "every rank passes the same reduction"},
      {{"allreduce", 5, sum}, {"barrier", 0, 0}, "every rank calls the same collectives"},
      {{"allgather", 30000, 0}, {"broadcast", 60000, 0}, "every rank calls the same collectives"},
      {{"broadcast", 5, 0}, {"broadcast", 5, 1}, "every rank names the same root"},
      {{"broadcast", 300000, 2}, {"broadcast", 300000, 0}, "every rank names the same root"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.rank1.what + " of " + std::to_string(c.rank1.n) + " against " + c.others.what +
                 " of " + std::to_string(c.others.n));
    (void)ranks.call(&Rank::join, collective::make_group(ranks)).get();
    std::vector<Future<int>> calls;
    for (std::size_t r = 0; r < 3; ++r) {
      const Entered& e = r == 1 ? c.rank1 : c.others;
      calls.push_back(ranks.at(r).call(&Rank::enter, e.what, e.n, e.arg));
    }
    for (std::size_t r = 0; r < 3; ++r) {
      try {
        (void)calls[r].get(std::chrono::seconds(60));
        ADD_FAILURE() << "rank " << r << " completed a collective the others did not enter";
      } catch (const TimeoutError&) {
        ADD_FAILURE() << "rank " << r << " hung in a collective the others did not enter";
      } catch (const std::exception& e) {
        EXPECT_THAT(e.what(), HasSubstr(c.said)) << r;
        EXPECT_THAT(e.what(), HasSubstr("the group is broken")) << r;
        // Each names a rank on the other side: rank 1 names rank 0 or 2, the others rank 1.
        const std::string said = e.what();
        if (r == 1) {
          EXPECT_TRUE(said.find("rank 0 ") != said.npos || said.find("rank 2 ") != said.npos)
              << said;
        } else {
          EXPECT_THAT(said, HasSubstr("rank 1 ")) << r;
        }
      }
    }
  }
  procs.stop().get();
}

/// Ranks 0 and 1 enter an allreduce of `n` floats that rank 2 never joins; rank 2's process is
/// killed: both fail naming it, and a new group of the two works.
void killed_mid_collective(std::size_t n) {
  ProcMesh procs = this_host().spawn_procs({{"procs", 3}});
  auto ranks = procs.spawn<Rank>("ranks");
  (void)ranks.call(&Rank::join, collective::make_group(ranks)).get();
  const int victim = ranks.slice("procs", 2).call(&Rank::pid).get().values().at(0);
  auto live = ranks.slice("procs", 0, 2);
  auto pending = live.call(&Rank::allreduce_f32, n, 0);
  ::kill(victim, SIGKILL);
  try {
    (void)pending.get(std::chrono::seconds(60));
    ADD_FAILURE() << "an allreduce with a dead rank completed";
  } catch (const TimeoutError&) {
    ADD_FAILURE() << "an allreduce with a dead rank hung";
  } catch (const std::exception& e) {
    EXPECT_THAT(e.what(), HasSubstr("rank 2"));
    EXPECT_THAT(e.what(), HasSubstr("is gone"));
  }
  // The group is broken for good; a new one of the live members works.
  EXPECT_EQ(live.call(&Rank::join, collective::make_group(live)).get().values(),
            (std::vector<int>{0, 1}));
  for (const auto& v : live.call(&Rank::allreduce_i64, 3, 0).get().values()) {
    EXPECT_EQ(v, (std::vector<std::int64_t>{1000, 1002, 1004}));
  }
  live.stop().get();
}

TEST(Collective, ARankKilledMidCollectiveFailsTheOthersNamingItAndANewGroupWorks) {
  // 1000 floats go through baton's messages, 2^17 through Gloo's ring.
  for (const std::size_t n : {std::size_t{1000}, std::size_t{1} << 17}) {
    SCOPED_TRACE("floats: " + std::to_string(n));
    killed_mid_collective(n);
  }
}

}  // namespace
}  // namespace baton

int main(int argc, char** argv) {
  // A collective waiting more than 3 s is a stall in this job (its stall test waits longer).
  ::setenv("BATON_STALL_AFTER", "3", /*overwrite=*/0);
  return baton::test::run_hosts_test(argc, argv);
}
