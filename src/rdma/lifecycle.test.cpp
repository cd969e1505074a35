// One process starts a runtime, stops it and starts another: the rdma layer's state (settings
// and counters, worker threads and timers, the UCX worker and its progress thread, staging
// memory, the registry and the rdma actor) is the runtime's own. A new runtime starts from the
// defaults, and once a runtime is gone no thread of its rdma layer is left. Run under ASan and
// TSan too.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "actor/node.hpp"
#include "baton/baton.hpp"
#include "rdma/state.hpp"

using namespace baton;
using namespace std::chrono_literals;

namespace {

int g_argc = 0;
char** g_argv = nullptr;

class Holder : public Actor {
 public:
  explicit Holder(int base) : data_(std::size_t{1} << 20, base) {}  // 4 MiB: a few chunks
  RdmaBuffer buffer() {
    if (!buffer_.valid()) buffer_ = RdmaBuffer::register_memory(data_.data(), bytes());
    return buffer_;
  }
  std::size_t bytes() const { return data_.size() * sizeof(int); }

  static constexpr auto endpoints = baton::endpoints<&Holder::buffer>();

 private:
  std::vector<int> data_;
  RdmaBuffer buffer_;
};

std::size_t threads_now() {
  std::size_t n = 0;
  for ([[maybe_unused]] const auto& t : std::filesystem::directory_iterator("/proc/self/task")) ++n;
  return n;
}

/// The process's thread count once it is back to `want`, or the last one seen after 30 s. A
/// joined thread leaves /proc a moment after its join returns, so this looks more than once.
std::size_t threads_settled_at(std::size_t want) {
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  std::size_t n = threads_now();
  while (n != want && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(1ms);
    n = threads_now();
  }
  return n;
}

/// Reads all of `b` and checks that every int is `value`.
void read_all(const RdmaBuffer& b, int value) {
  std::vector<int> got(b.size() / sizeof(int), -1);
  b.read_into(got.data(), b.size()).get();
  EXPECT_EQ(got, std::vector<int>(got.size(), value));
}

TEST(RdmaSettings, ATimeoutThatIsNoNumberOfMillisecondsIsRefusedSayingWhatToDo) {
  for (const char* bad : {"abc", "-5", "0", "10ms"}) {
    SCOPED_TRACE(bad);
    ::setenv("BATON_RDMA_TIMEOUT_MS", bad, 1);
    try {
      (void)rdma_detail::timeout_from_env();
      ADD_FAILURE() << "accepted";
    } catch (const RdmaError& e) {
      EXPECT_THAT(e.what(), ::testing::HasSubstr(std::string("BATON_RDMA_TIMEOUT_MS='") + bad +
                                                 "' is not a number of milliseconds of 1 or "
                                                 "more; unset it for the default (30000)"));
    }
  }
  ::setenv("BATON_RDMA_TIMEOUT_MS", "2500", 1);
  EXPECT_EQ(rdma_detail::timeout_from_env().count(), 2500);
  ::unsetenv("BATON_RDMA_TIMEOUT_MS");
  EXPECT_EQ(rdma_detail::timeout_from_env().count(), 30000);
}

TEST(RdmaLifecycle, EachRuntimeHasItsOwnRdmaStateAndItsThreadsEndWithIt) {
  const std::size_t before = threads_now();
  RdmaBackend first_choice = RdmaBackend::automatic;
  for (int round = 0; round < 3; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    {
      Runtime rt(g_argc, g_argv);
      // Nothing counted yet, and no setting of the last runtime seen here.
      const RdmaStats fresh = rdma_stats();
      EXPECT_EQ(fresh.local + fresh.gpu_ipc + fresh.ucx + fresh.messages + fresh.cma, 0U);
      EXPECT_EQ(fresh.chunks, 0U);
      const auto state = rdma_detail::rdma_state();
      EXPECT_EQ(state->settings.timeout_ms.load(), rdma_detail::timeout_from_env().count());

      auto procs = this_host().spawn_procs({{"gpus", 2}});
      auto holders = procs.spawn<Holder>("holders", round);
      RdmaBuffer remote = holders.slice("gpus", 1).call_one(&Holder::buffer).get();
      std::vector<int> probe(1);
      const RdmaBackend chosen = rdma_backend(remote, probe.data());
      if (round == 0) first_choice = chosen;
      EXPECT_EQ(chosen, first_choice) << "the backend forced in the last runtime is still forced";
      read_all(remote, round);

      // Every thread the layer has: the messages backend's chunks, and UCX where there is UCX.
      set_rdma_timeout(std::chrono::minutes(1));
      set_rdma_backend(RdmaBackend::messages);
      read_all(remote, round);
      EXPECT_EQ(rdma_stats().messages, 1U);
      EXPECT_GT(rdma_stats().chunks, 0U);
      if (state->ucx() != nullptr) {
        set_rdma_backend(RdmaBackend::ucx);
        read_all(remote, round);
        EXPECT_EQ(rdma_stats().ucx, 1U);
      }
      procs.stop().get();
    }
    EXPECT_EQ(detail::Node::current(), nullptr);
    EXPECT_THROW(rdma_stats(), UsageError);  // the settings went with the runtime
    EXPECT_EQ(threads_settled_at(before), before) << "a thread outlived its runtime";
  }
}

}  // namespace

int main(int argc, char** argv) {
  // A worker serves here and never returns; the controller starts (and stops) one runtime now.
  { Runtime rt(argc, argv); }
  g_argc = argc;
  g_argv = argv;
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
