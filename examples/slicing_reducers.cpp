// baton slicing and reducers: one mesh of 2 x 4 worker procs, addressed whole, by row, by
// column and by a single point; replies folded along the cast tree with built-in and
// user-written reducers, and streamed as they arrive.

#include <CLI/CLI.hpp>
#include <baton/baton.hpp>

#include <cstdio>
#include <cstdlib>
#include <string>

class Shard : public baton::Actor {
 public:
  Shard() : rank_(static_cast<int>(context().rank)) {}
  int rank() { return rank_; }
  double loss(int step) { return 1.0 / (1 + rank_ + step); }
  std::string tag() { return "s" + std::to_string(rank_); }
  static constexpr auto endpoints = baton::endpoints<&Shard::rank, &Shard::loss, &Shard::tag>();

 private:
  int rank_;
};

/// A user reducer: any default-constructible callable (a, b) -> value. Folds run in rank order.
struct Join {
  std::string operator()(const std::string& a, const std::string& b) const { return a + "+" + b; }
};

int main(int argc, char** argv) {
  // --help says what it does; it takes no other arguments.
  CLI::App app{
      "slicing_reducers: a 2 x 4 mesh addressed whole, by row, by column and by point; "
      "replies folded by reducers along the cast tree and streamed"};
  CLI11_PARSE(app, argc, argv);
  baton::Runtime rt(argc, argv);  // in a worker process this never returns

  auto procs = baton::this_host().spawn_procs({{"hosts", 2}, {"gpus", 4}});
  auto shards = procs.spawn<Shard>("shards");

  const int total = shards.reduce(baton::sum, &Shard::rank).get();
  std::printf("whole mesh %s: rank sum %d\n", shards.shape().to_string().c_str(), total);
  if (total != 28) return 1;
  auto host1 = shards.slice("hosts", 1);
  std::printf("host 1 %s: min loss %.3f, max loss %.3f\n", host1.shape().to_string().c_str(),
              host1.reduce(baton::min, &Shard::loss, 0).get(),
              host1.reduce(baton::max, &Shard::loss, 0).get());
  auto column = shards.slice("gpus", 2, 4);
  for (const auto& [point, rank] : column.call(&Shard::rank).get().items()) {
    std::printf("gpus 2..3 %s -> rank %d\n", point.to_string().c_str(), rank);
    if (rank != static_cast<int>(point["hosts"] * 4 + 2 + point["gpus"])) return 1;
  }
  std::printf("one point: %s\n",
              shards.slice("hosts", 0).slice("gpus", 3).call_one(&Shard::tag).get().c_str());
  const std::string joined = shards.reduce(Join{}, &Shard::tag).get();
  std::printf("joined tags: %s\n", joined.c_str());
  if (joined != "s0+s1+s2+s3+s4+s5+s6+s7") return 1;

  auto stream = shards.stream(&Shard::loss, 1);
  int n = 0;
  while (auto next = stream.next()) ++n;
  std::printf("streamed %d replies\n", n);
  if (n != 8) return 1;

  procs.stop().get();
  return 0;
}
