// Spawning procs without blocking: spawn_procs_async's future comes before the workers are up,
// a worker that exits during start-up fails it (and the blocking form) once the others are
// stopped, and a host stopped meanwhile fails it. The workers wait at a gate (a fifo) before
// their runtime starts. This binary is its own worker: main() creates the Runtime first, which
// in a worker never returns.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "baton/baton.hpp"
#include "host/children.test.hpp"

namespace baton {
namespace {

using test::children;
using ::testing::HasSubstr;

class Counter : public Actor {
 public:
  explicit Counter(int start) : value_(start) {}
  int value() { return value_; }
  int rank() { return std::atoi(std::getenv("BATON_RANK")); }
  static constexpr auto endpoints = baton::endpoints<&Counter::value, &Counter::rank>();

 private:
  int value_;
};

/// Where the workers of a Spawn test wait before their runtime starts (so before they can link):
/// a fifo named in their environment, from which each reads one byte (see hold_start()).
class StartGate {
 public:
  StartGate() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "baton-gate-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    dir_ = tmpl;
    fifo_ = (dir_ / "gate").string();
    if (::mkfifo(fifo_.c_str(), 0600) != 0) throw std::runtime_error("mkfifo failed");
  }
  ~StartGate() {
    if (fd_ >= 0) ::close(fd_);
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
  StartGate(const StartGate&) = delete;
  StartGate& operator=(const StartGate&) = delete;

  /// spawn_procs_async, with workers that wait at the gate.
  Future<ProcMesh> spawn(const std::vector<std::pair<std::string, std::size_t>>& dims) {
    ::setenv(kVar, fifo_.c_str(), 1);
    auto f = this_host().spawn_procs_async(dims);
    ::unsetenv(kVar);
    return f;
  }
  /// spawn_procs, with workers that wait at the gate (open it first).
  ProcMesh spawn_blocking(const std::vector<std::pair<std::string, std::size_t>>& dims) {
    ::setenv(kVar, fifo_.c_str(), 1);
    try {
      ProcMesh procs = this_host().spawn_procs(dims);
      ::unsetenv(kVar);
      return procs;
    } catch (...) {
      ::unsetenv(kVar);
      throw;
    }
  }
  /// One byte per worker: 'x' makes it exit with status 3, anything else lets it go on.
  void open(const std::string& bytes) {
    fd_ = ::open(fifo_.c_str(), O_RDWR | O_CLOEXEC);  // never blocks, keeps the bytes
    if (fd_ < 0 || ::write(fd_, bytes.data(), bytes.size()) != static_cast<ssize_t>(bytes.size())) {
      throw std::runtime_error("cannot write to the gate");
    }
  }

  static constexpr const char* kVar = "BATON_TEST_START_GATE";

 private:
  std::filesystem::path dir_;
  std::string fifo_;
  int fd_ = -1;
};

/// In a worker of a Spawn test, before its runtime: waits at the gate, and exits with status 3
/// if told so.
void hold_start() {
  const char* fifo = std::getenv(StartGate::kVar);
  if (fifo == nullptr) return;
  const int fd = ::open(fifo, O_RDONLY | O_CLOEXEC);
  char byte = 0;
  if (fd < 0 || ::read(fd, &byte, 1) != 1) std::_Exit(4);
  ::close(fd);
  if (byte == 'x') std::_Exit(3);
}

TEST(Spawn, SpawnProcsAsyncReturnsBeforeTheWorkersAreUpThenGivesAWorkingMesh) {
  StartGate gate;
  Future<ProcMesh> starting = gate.spawn({{"gpus", 2}});
  EXPECT_FALSE(starting.ready());  // its workers wait at the gate, unlinked
  gate.open("gg");
  ProcMesh procs = std::move(starting).get(std::chrono::seconds(30));
  ASSERT_EQ(procs.size(), 2u);
  auto counters = procs.spawn<Counter>("late", 4);
  EXPECT_EQ(counters.call(&Counter::value).get().values(), (std::vector<int>{4, 4}));
  EXPECT_EQ(counters.call(&Counter::rank).get().values(), (std::vector<int>{0, 1}));
  procs.stop().get();
}

TEST(Spawn, AWorkerThatExitsDuringStartUpFailsTheFutureOnceTheOthersAreStopped) {
  const std::size_t before = children().size();
  StartGate gate;
  Future<ProcMesh> starting = gate.spawn({{"gpus", 3}});
  gate.open("gxg");  // one of them exits, the others link
  try {
    (void)std::move(starting).get(std::chrono::seconds(30));
    FAIL() << "expected the spawn to fail";
  } catch (const std::runtime_error& e) {
    EXPECT_THAT(e.what(), ::testing::MatchesRegex(
                              "worker procs[0-9]+\\.[0-2] exited with status 3 during start-up.*"));
  }
  EXPECT_EQ(children().size(), before);  // the future failed once every worker of it was gone
  // The blocking form throws the same.
  StartGate again;
  again.open("x");
  try {
    (void)again.spawn_blocking({{"gpus", 1}});
    FAIL() << "expected the spawn to fail";
  } catch (const std::runtime_error& e) {
    EXPECT_THAT(e.what(), ::testing::MatchesRegex(
                              "worker procs[0-9]+\\.0 exited with status 3 during start-up.*"));
  }
  EXPECT_EQ(children().size(), before);
}

TEST(Spawn, StoppingTheHostWhileASpawnIsUnderWayFailsIt) {
  StartGate gate;
  Future<ProcMesh> starting = gate.spawn({{"gpus", 2}});
  this_host().stop().get(std::chrono::seconds(30));  // its workers still wait at the gate
  try {
    (void)std::move(starting).get(std::chrono::seconds(30));
    FAIL() << "expected the spawn to fail";
  } catch (const std::runtime_error& e) {
    EXPECT_THAT(e.what(), HasSubstr("its procs were stopped (HostMesh::stop(), or the runtime's "
                                    "end) before every worker was up"));
  }
  // The host can start procs again.
  auto procs = this_host().spawn_procs({{"gpus", 1}});
  EXPECT_EQ(procs.spawn<Counter>("after", 2).call_one(&Counter::value).get(), 2);
  procs.stop().get();
}

}  // namespace
}  // namespace baton

int main(int argc, char** argv) {
  baton::hold_start();            // a worker waits here, before its runtime
  baton::Runtime rt(argc, argv);  // a worker serves here and never returns
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
