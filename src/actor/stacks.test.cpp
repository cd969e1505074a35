// The stacks of a process's threads: real threads, parked in functions of this file, asked for
// their stacks by signal and named from this binary's own symbols and line tables.

#include "actor/stacks.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <condition_variable>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "baton/actor/proc.hpp"

namespace baton::detail {
namespace {

using ::testing::AllOf;
using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

/// A thread that sits in a function of this file until it is let go.
class Parked {
 public:
  explicit Parked(bool block_the_signal = false) {
    std::promise<int> started;
    auto tid = started.get_future();
    thread_ = std::thread([this, block_the_signal, &started] {
      ::pthread_setname_np(::pthread_self(), "parked-test");
      if (block_the_signal) {
        sigset_t all;
        ::sigfillset(&all);
        ::pthread_sigmask(SIG_BLOCK, &all, nullptr);
      }
      parked_in_a_named_function(started);
    });
    tid_ = tid.get();
  }
  ~Parked() {
    {
      std::lock_guard lock(mu_);
      go_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  Parked(const Parked&) = delete;
  Parked& operator=(const Parked&) = delete;
  int tid() const { return tid_; }

 private:
  [[gnu::noinline]] void parked_in_a_named_function(std::promise<int>& started) {
    std::unique_lock lock(mu_);
    started.set_value(this_thread_id());
    cv_.wait(lock, [this] { return go_; });
  }
  std::mutex mu_;
  std::condition_variable cv_;
  bool go_ = false;
  int tid_ = 0;
  std::thread thread_;
};

const ThreadStack& find(const std::vector<ThreadStack>& stacks, int tid) {
  const auto it = std::find_if(stacks.begin(), stacks.end(),
                               [tid](const ThreadStack& s) { return s.tid == tid; });
  if (it == stacks.end()) throw std::runtime_error("no thread " + std::to_string(tid));
  return *it;
}

TEST(Stacks, AParkedThreadShowsTheFunctionItWaitsInWithItsFileAndLine) {
  Parked parked;
  const auto stacks = thread_stacks();
  const ThreadStack& s = find(stacks, parked.tid());
  EXPECT_EQ(s.name, "parked-test");
  EXPECT_EQ(s.note, "");
  EXPECT_THAT(s.native, Contains(AllOf(HasSubstr("Parked::parked_in_a_named_function"),
                                       HasSubstr("stacks.test.cpp:"))));
  // Innermost first: the wait is above the function that waits.
  const auto in_fn = std::find_if(s.native.begin(), s.native.end(), [](const std::string& f) {
    return f.find("parked_in_a_named") != f.npos;
  });
  EXPECT_NE(in_fn, s.native.begin());
  EXPECT_THAT(s.python, IsEmpty());
}

TEST(Stacks, EveryThreadOfTheProcessIsListedOnceAndTheAskerSaysItIs) {
  Parked a;
  Parked b;
  const auto stacks = thread_stacks();
  std::vector<int> tids;
  tids.reserve(stacks.size());
  for (const auto& s : stacks) tids.push_back(s.tid);
  EXPECT_THAT(tids, Contains(a.tid()));
  EXPECT_THAT(tids, Contains(b.tid()));
  EXPECT_THAT(tids, Contains(this_thread_id()));
  EXPECT_TRUE(std::is_sorted(tids.begin(), tids.end()));
  EXPECT_EQ(std::adjacent_find(tids.begin(), tids.end()), tids.end());
  const ThreadStack& self = find(stacks, this_thread_id());
  EXPECT_THAT(self.note, HasSubstr("took these stacks"));
  EXPECT_THAT(self.native, Contains(HasSubstr("EveryThreadOfTheProcessIsListedOnce")));
}

TEST(Stacks, AThreadThatBlocksSignalsIsListedWithWhyAndTheOthersStillAnswer) {
  Parked deaf(/*block_the_signal=*/true);
  Parked hearing;
  const auto stacks = thread_stacks(std::chrono::milliseconds(100));
  const ThreadStack& d = find(stacks, deaf.tid());
  EXPECT_THAT(d.native, IsEmpty());
  EXPECT_THAT(d.note, HasSubstr("did not answer in 100 ms"));
  EXPECT_THAT(find(stacks, hearing.tid()).native,
              Contains(HasSubstr("parked_in_a_named_function")));
  // A signal that came late (once the deaf thread unblocks it) disturbs no later capture.
  EXPECT_THAT(find(thread_stacks(), hearing.tid()).native,
              Contains(HasSubstr("parked_in_a_named_function")));
}

// Where the actor below waits, and what lets it go.
struct Gate {
  std::mutex mu;
  std::condition_variable cv;
  int began = 0;
  bool go = false;
};
Gate g_gate;

class Sleeper : public Actor {
 public:
  [[gnu::noinline]] int sleep_in_endpoint(int) {
    std::unique_lock lock(g_gate.mu);
    g_gate.began = this_thread_id();
    g_gate.cv.notify_all();
    g_gate.cv.wait(lock, [] { return g_gate.go; });
    return 1;
  }
  static constexpr auto endpoints = baton::endpoints<&Sleeper::sleep_in_endpoint>();
};

TEST(Stacks, AnActorInsideAnEndpointShowsTheEndpointOnItsThread) {
  Proc proc;
  auto ref = proc.spawn<Sleeper>("sleeper");
  auto reply = ref.call(&Sleeper::sleep_in_endpoint, 1);
  int tid = 0;
  {
    std::unique_lock lock(g_gate.mu);
    g_gate.cv.wait(lock, [] { return g_gate.began != 0; });
    tid = g_gate.began;
  }
  const auto stacks = thread_stacks();
  EXPECT_THAT(find(stacks, tid).native, Contains(HasSubstr("Sleeper::sleep_in_endpoint")));
  {
    std::lock_guard lock(g_gate.mu);
    g_gate.go = true;
  }
  g_gate.cv.notify_all();
  EXPECT_EQ(std::move(reply).get(), 1);
}

TEST(Stacks, PythonStacksFromTheHookGoWithTheirThreads) {
  Parked parked;
  set_python_stacks([&] {
    return std::map<int, std::vector<std::string>>{
        {parked.tid(), {"File \"job.py\", line 3, in main"}}};
  });
  const auto stacks = thread_stacks();
  set_python_stacks(nullptr);
  EXPECT_THAT(find(stacks, parked.tid()).python, Contains(HasSubstr("job.py\", line 3, in main")));
  EXPECT_THAT(find(stacks, this_thread_id()).python, IsEmpty());
}

TEST(Stacks, AHookThatThrowsLeavesTheNativeStacksAndSaysWhy) {
  Parked parked;
  set_python_stacks([]() -> std::map<int, std::vector<std::string>> {
    throw std::runtime_error("interpreter finalizing");
  });
  const auto stacks = thread_stacks();
  set_python_stacks(nullptr);
  EXPECT_THAT(find(stacks, parked.tid()).native, Not(IsEmpty()));
  EXPECT_THAT(find(stacks, ::getpid()).note, HasSubstr("interpreter finalizing"));
}

TEST(Stacks, TheCallingThreadsOwnStackStartsAtItsCaller) {
  const auto frames = this_thread_stack();
  ASSERT_THAT(frames, Not(IsEmpty()));
  EXPECT_THAT(frames.front(), HasSubstr("TheCallingThreadsOwnStackStartsAtItsCaller"));
}

}  // namespace
}  // namespace baton::detail
