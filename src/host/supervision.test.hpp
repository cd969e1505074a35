#pragma once

// What the supervision tests (supervision.test.cpp, cast_failures.test.cpp) share: a worker
// actor that fails in each way a worker can, one that releases its blocked calls, and the
// failures that reached the controller's supervise hook. Each test program is its own worker:
// its main() creates the Runtime first (with record_failures()), which in a worker never returns.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "baton/baton.hpp"

namespace baton::test {

// A bound on every wait below, so a broken build fails instead of hanging; never reached when
// things work, and nothing is asserted about time.
inline constexpr std::chrono::seconds kBound{30};

inline int my_rank() {
  const char* r = std::getenv("BATON_RANK");
  return r != nullptr ? std::atoi(r) : -1;
}

// What a blocked endpoint waits for, in its worker process; a Releaser there sets it.
inline std::mutex g_mu;
inline std::condition_variable g_cv;
inline bool g_released = false;

class Worker : public Actor {
 public:
  explicit Worker(int refuse_rank) {
    if (my_rank() == refuse_rank) {
      throw std::runtime_error("cannot load shard " + std::to_string(refuse_rank));
    }
  }
  int value() { return value_; }
  void incr(int by) { value_ += by; }
  int pid() { return static_cast<int>(::getpid()); }
  int refuse(const std::string& why) { throw std::runtime_error(why); }
  void boom(int rank) {
    if (my_rank() == rank) throw std::runtime_error("boom on rank " + std::to_string(rank));
  }
  int crash(int how) {
    rlimit none{0, 0};
    ::setrlimit(RLIMIT_CORE, &none);  // no core files from these tests
    std::fprintf(stderr, "rank %d going down (%d)\n", my_rank(), how);
    std::fflush(stderr);
    if (how == 0) std::_Exit(7);
    if (how == 1) {
      ::signal(SIGSEGV, SIG_DFL);  // the default action, even under a sanitizer's handler
      ::raise(SIGSEGV);
    }
    std::abort();
  }
  int block() {
    std::unique_lock lock(g_mu);
    g_cv.wait(lock, [] { return g_released; });
    return value_;
  }
  void ignore_sigterm() { ::signal(SIGTERM, SIG_IGN); }
  /// Takes memory a page at a time until the kernel's out-of-memory killer ends this process.
  int hog() {
    std::vector<std::unique_ptr<char[]>> held;
    for (;;) {
      held.emplace_back(new char[16 << 20]);
      for (std::size_t i = 0; i < (16 << 20); i += 4096) held.back()[i] = 1;
    }
  }
  static constexpr auto endpoints =
      baton::endpoints<&Worker::value, &Worker::incr, &Worker::pid, &Worker::refuse, &Worker::boom,
                       &Worker::crash, &Worker::block, &Worker::ignore_sigterm, &Worker::hog>();

 private:
  int value_ = 0;
};

class Releaser : public Actor {
 public:
  void release() {
    {
      std::lock_guard lock(g_mu);
      g_released = true;
    }
    g_cv.notify_all();
  }
  static constexpr auto endpoints = baton::endpoints<&Releaser::release>();
};

/// Failures that reached the controller's supervise hook (installed in main()).
struct Seen {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<MeshFailure> events;

  MeshFailure next() {
    std::unique_lock lock(mu);
    if (!cv.wait_for(lock, kBound, [&] { return !events.empty(); })) {
      throw std::runtime_error("no supervision event reached the controller");
    }
    MeshFailure f = std::move(events.front());
    events.erase(events.begin());
    return f;
  }
  /// The next `n` events (one per actor mesh a dead proc hosted), sorted by mesh name.
  std::vector<MeshFailure> next(std::size_t n) {
    std::vector<MeshFailure> out;
    for (std::size_t i = 0; i < n; ++i) out.push_back(next());
    std::sort(out.begin(), out.end(),
              [](const MeshFailure& a, const MeshFailure& b) { return a.mesh < b.mesh; });
    return out;
  }
  std::size_t count() {
    std::lock_guard lock(mu);
    return events.size();
  }
};

/// Checks that `f` reports the death of the proc that hosted member `rank` of the actor mesh
/// `mesh`, naming that member (its actor, rank and point), not the runtime's agent.
inline void expect_member_died(const MeshFailure& f, const std::string& mesh, std::int64_t rank,
                               const std::string& point) {
  EXPECT_EQ(f.mesh, mesh);
  EXPECT_EQ(f.rank, rank);
  EXPECT_THAT(f.actor.to_string(),
              ::testing::MatchesRegex("procs[0-9]+\\.[0-9]+/" + mesh + "\\[0\\]"));
  EXPECT_THAT(f.message, ::testing::HasSubstr("member " + point + " lost: its proc procs"));
  EXPECT_THAT(f.to_string(), ::testing::HasSubstr("(rank " + std::to_string(rank) + " of mesh '" +
                                                  mesh + "'): member " + point));
  EXPECT_THAT(f.to_string(), ::testing::Not(::testing::HasSubstr("agent")));
}
inline Seen& seen() {
  static Seen s;
  return s;
}

/// The supervise hook a test program's Runtime gets: each failure goes to seen(), handled.
inline RuntimeOptions record_failures(RuntimeOptions options = {}) {
  options.supervise = [](const MeshFailure& f) {
    auto& s = seen();
    {
      std::lock_guard lock(s.mu);
      s.events.push_back(f);
    }
    s.cv.notify_all();
    return true;
  };
  return options;
}

}  // namespace baton::test
