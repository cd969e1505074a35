// Collectives on libtorch tensors between real worker processes, against direct computation;
// tensors collectives cannot move are refused saying why.

#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <vector>

#include "baton/collective/tensor.hpp"
#include "host/hosts.test.hpp"

namespace baton {
namespace {

using collective::ReduceOp;
using ::testing::HasSubstr;

class TensorRank : public Actor {
 public:
  Task<int> join(collective::Group g) {
    co_await comm_.join(g, *this);
    co_return comm_.rank();
  }
  /// [r + 1, 2(r + 1), ...] of type `type` allreduced with `op`, as doubles.
  Task<std::vector<double>> allreduce(std::int64_t n, int type, int op) {
    const double r = comm_.rank() + 1;
    at::Tensor t = (at::arange(1, n + 1, at::kDouble) * r).to(static_cast<at::ScalarType>(type));
    co_await collective::allreduce(comm_, t, static_cast<ReduceOp>(op));
    co_return values(t);
  }
  Task<std::vector<double>> broadcast(std::int64_t n) {
    at::Tensor t = at::full({n}, comm_.rank() + 10, at::kFloat);
    co_await collective::broadcast(comm_, t, 1);
    co_return values(t);
  }
  Task<std::vector<double>> allgather(std::int64_t n) {
    at::Tensor in = at::full({n}, comm_.rank(), at::kLong);
    at::Tensor out = at::empty({n * comm_.size()}, at::kLong);
    co_await collective::allgather(comm_, in, out);
    co_return values(out);
  }
  Task<std::vector<double>> reduce_scatter(std::int64_t n) {
    at::Tensor in = at::arange(0, n * comm_.size(), at::kFloat);
    at::Tensor out = at::empty({n}, at::kFloat);
    co_await collective::reduce_scatter(comm_, in, out);
    co_return values(out);
  }
  /// What a non-contiguous tensor's allreduce says.
  std::string refused() {
    at::Tensor t = at::ones({4, 4}).t().slice(0, 0, 2);
    try {
      (void)collective::allreduce(comm_, t);
    } catch (const UsageError& e) {
      return e.what();
    }
    return "accepted";
  }
  static constexpr auto endpoints =
      baton::endpoints<&TensorRank::join, &TensorRank::allreduce, &TensorRank::broadcast,
                       &TensorRank::allgather, &TensorRank::reduce_scatter, &TensorRank::refused>();

 private:
  static std::vector<double> values(const at::Tensor& t) {
    at::Tensor d = t.to(at::kDouble).contiguous();
    return {d.data_ptr<double>(), d.data_ptr<double>() + d.numel()};
  }
  collective::Communicator comm_;
};

TEST(TensorCollective, TensorsOfEveryTypeReduceAsComputedDirectly) {
  ProcMesh procs = this_host().spawn_procs({{"procs", 3}});
  auto ranks = procs.spawn<TensorRank>("ranks");
  (void)ranks.call(&TensorRank::join, collective::make_group(ranks)).get();
  const std::int64_t n = 1000;
  for (auto type : {at::kFloat, at::kDouble, at::kHalf, at::kBFloat16, at::kInt, at::kLong}) {
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::max}) {
      const auto got =
          ranks.call(&TensorRank::allreduce, n, static_cast<int>(type), static_cast<int>(op))
              .get()
              .values();
      for (const auto& v : got) {
        ASSERT_EQ(v.size(), static_cast<std::size_t>(n));
        for (std::int64_t i = 0; i < n; ++i) {
          const double want = op == ReduceOp::sum ? 6.0 * (i + 1) : 3.0 * (i + 1);
          const double tolerance = type == at::kBFloat16 ? 2e-2 : type == at::kHalf ? 2e-3 : 0;
          ASSERT_NEAR(v[i], want, want * tolerance) << c10::toString(type) << " i " << i;
        }
      }
    }
  }
  for (const auto& v : ranks.call(&TensorRank::broadcast, 5).get().values()) {
    EXPECT_EQ(v, std::vector<double>(5, 11.0));
  }
  for (const auto& v : ranks.call(&TensorRank::allgather, 2).get().values()) {
    EXPECT_EQ(v, (std::vector<double>{0, 0, 1, 1, 2, 2}));
  }
  const auto scattered = ranks.call(&TensorRank::reduce_scatter, 2).get().values();
  for (std::size_t r = 0; r < 3; ++r) {
    EXPECT_EQ(scattered[r], (std::vector<double>{3.0 * (2 * r), 3.0 * (2 * r + 1)}));
  }
  EXPECT_THAT(ranks.slice("procs", 0).call(&TensorRank::refused).get().values().at(0),
              HasSubstr("not contiguous"));
  procs.stop().get();
}

}  // namespace
}  // namespace baton

int main(int argc, char** argv) {
  return baton::test::run_hosts_test(argc, argv);
}
