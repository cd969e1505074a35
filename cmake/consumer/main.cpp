// A program outside baton's tree: two worker procs, one actor in each, a call to both and a read
// of one's memory through an RdmaBuffer. Exits non-zero if any result is wrong.

#include <baton/baton.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <vector>

class Counter : public baton::Actor {
 public:
  explicit Counter(int start) : value_(start) {}
  int add(int n) { return value_ += n; }
  baton::RdmaBuffer expose(std::uint64_t size) {
    data_.assign(size, std::byte{7});
    return baton::RdmaBuffer::register_memory(data_.data(), data_.size());
  }
  static constexpr auto endpoints = baton::endpoints<&Counter::add, &Counter::expose>();

 private:
  int value_;
  std::vector<std::byte> data_;
};

constexpr std::uint64_t kSize = 1 << 20;

int main(int argc, char** argv) {
  baton::Runtime rt(argc, argv);  // in a worker process this never returns
  auto procs = baton::this_host().spawn_procs({{"gpus", 2}});
  auto counters = procs.spawn<Counter>("counters", 40);

  int wrong = 0;
  baton::ValueMesh<int> sums = counters.call(&Counter::add, 2).get();
  if (sums.size() != 2) ++wrong;
  for (int v : sums.values()) {
    if (v != 42) ++wrong;
  }

  baton::RdmaBuffer buffer = counters.slice("gpus", 1).call_one(&Counter::expose, kSize).get();
  std::vector<std::byte> local(buffer.size());
  buffer.read_into(local.data(), local.size()).get();
  if (local.size() != kSize) ++wrong;
  for (std::byte b : local) {
    if (b != std::byte{7}) {
      ++wrong;
      break;
    }
  }

  procs.stop().get();
  std::printf("consumer: %s\n", wrong == 0 ? "ok" : "WRONG");
  return wrong == 0 ? 0 : 1;
}
