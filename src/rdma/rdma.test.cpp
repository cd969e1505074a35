// RdmaBuffer across real worker processes: every backend, both kinds of host memory, and each
// failure (size, drop, dead owner, timeout); device memory is rdma_gpu.test.cpp's. This binary
// is its own worker: main() creates the Runtime first, which in a worker never returns.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "actor/metrics.hpp"
#include "baton/baton.hpp"
#include "rdma/pattern.test.hpp"
#include "rdma/settings.test.hpp"

namespace baton {
namespace {

using rdma_testing::checksum;
using rdma_testing::expected;
using rdma_testing::fill;
using rdma_testing::finish;

using rdma_testing::ScopedRdmaSettings;
using ::testing::HasSubstr;
using namespace std::chrono_literals;

#if defined(__SANITIZE_THREAD__)
// A ThreadSanitizer build has no UCX (see CMakeLists.txt): host memory moves through messages.
constexpr RdmaBackend kHostBackend = RdmaBackend::messages;
#else
constexpr RdmaBackend kHostBackend = RdmaBackend::ucx;
#endif

/// Owns memory in a worker process and registers it.
class Holder : public Actor {
 public:
  enum Kind { user_memory = 0, ucx_memory = 1, device_memory = 2 };
  RdmaBuffer expose(std::uint64_t size, int seed, int kind) {
    std::vector<std::byte> staged(size);
    fill(staged.data(), size, seed);
    if (kind == device_memory) {
      dev_ = gpu::api().allocate(size);
      gpu::api().copy(dev_, staged.data(), size);
      buf_ = RdmaBuffer::register_memory(dev_, size);
    } else if (kind == ucx_memory) {
      buf_ = RdmaBuffer::allocate(size);
      std::memcpy(buf_.data(), staged.data(), size);
    } else {
      mem_ = std::move(staged);
      buf_ = RdmaBuffer::register_memory(mem_.data(), size);
    }
    return buf_;
  }
  std::uint64_t checksum_of_own() {
    std::vector<std::byte> v(buf_.size());
    if (buf_.device()) {
      gpu::api().copy(v.data(), buf_.data(), v.size());
    } else {
      std::memcpy(v.data(), buf_.data(), v.size());
    }
    return checksum(v.data(), v.size());
  }
  Task<void> drop_own() { co_await buf_.drop(); }
  /// Reads another proc's buffer into this process and returns its checksum. The transfer's
  /// own timeout bounds the wait.
  Task<std::uint64_t> pull(RdmaBuffer b) {
    std::vector<std::byte> v(b.size());
    co_await b.read_into(v.data(), v.size());
    co_return checksum(v.data(), v.size());
  }
  int backend_for(const RdmaBuffer& b) {
    std::vector<std::byte> v(1);
    return static_cast<int>(rdma_backend(b, v.data()));
  }
  int pid() { return static_cast<int>(::getpid()); }
  /// Forces a backend in this process; returns the one forced before.
  int force(int backend) {
    const RdmaBackend was = rdma_detail::rdma_state()->settings.backend.load();
    set_rdma_backend(static_cast<RdmaBackend>(backend));
    return static_cast<int>(was);
  }
  static constexpr auto endpoints =
      baton::endpoints<&Holder::expose, &Holder::checksum_of_own, &Holder::drop_own, &Holder::pull,
                       &Holder::backend_for, &Holder::pid, &Holder::force>();

 private:
  std::vector<std::byte> mem_;
  void* dev_ = nullptr;
  RdmaBuffer buf_;
};

/// Forces a backend in a worker for a scope, and puts back the one it had whatever happens, so
/// that a failed ASSERT leaves no worker of the shared mesh changed for the next test.
class ScopedWorkerBackend {
 public:
  ScopedWorkerBackend(ActorMesh<Holder> worker, RdmaBackend backend)
      : worker_(std::move(worker)),
        was_(worker_.call_one(&Holder::force, static_cast<int>(backend)).get(60s)) {}
  ~ScopedWorkerBackend() {
    try {
      worker_.call_one(&Holder::force, was_).get(60s);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "could not restore a worker's rdma backend: " << e.what();
    }
  }
  ScopedWorkerBackend(const ScopedWorkerBackend&) = delete;
  ScopedWorkerBackend& operator=(const ScopedWorkerBackend&) = delete;

 private:
  ActorMesh<Holder> worker_;
  int was_;
};

class Rdma : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    procs_ = new ProcMesh(this_host().spawn_procs({{"gpus", 2}}));
    holders_ = new ActorMesh<Holder>(procs_->spawn<Holder>("holders"));
  }
  static void TearDownTestSuite() {
    procs_->stop().get();
    delete holders_;
    delete procs_;
  }
  static ActorMesh<Holder> holder(std::size_t rank) { return holders_->slice("gpus", rank); }
  ScopedRdmaSettings settings_;  // whatever a test changes is restored after it
  static ProcMesh* procs_;
  static ActorMesh<Holder>* holders_;
};
ProcMesh* Rdma::procs_ = nullptr;
ActorMesh<Holder>* Rdma::holders_ = nullptr;

std::string error_of(Future<void> f) {
  try {
    f.get(std::chrono::seconds(60));
  } catch (const RdmaError& e) {
    return e.what();
  }
  return "(no error)";
}

struct Case {
  const char* name;
  int kind;
  RdmaBackend forced;
  RdmaBackend expected;
};

/// baton_rdma_bytes_total of this process, for `backend` and `direction`, as /metrics shows it.
double rdma_bytes(RdmaBackend backend, const std::string& direction) {
  const std::string labels =
      detail::label("backend", to_string(backend)) + ",direction=\"" + direction + "\"";
  for (const auto& s : detail::proc_metrics(Runtime::get().proc()).samples) {
    if (s.name == "baton_rdma_bytes_total" && s.labels == labels) return s.value;
  }
  ADD_FAILURE() << "no baton_rdma_bytes_total{" << labels << "}";
  return -1;
}

class RdmaBackends : public Rdma, public ::testing::WithParamInterface<Case> {};

TEST_P(RdmaBackends, ReadAndWriteAnotherProcsMemory) {
  const Case& c = GetParam();
  settings_.backend(c.forced);
  constexpr std::size_t n = (std::size_t{24} << 20) + 13;  // not a multiple of any chunk
  RdmaBuffer b = holder(0).call_one(&Holder::expose, n, 5, c.kind).get();
  EXPECT_EQ(b.size(), n);
  EXPECT_EQ(b.data(), nullptr);  // not this process's memory
  std::vector<std::byte> local(n);
  EXPECT_EQ(rdma_backend(b, local.data()), c.expected);
  RdmaStats before = rdma_stats();
  const double read_before = rdma_bytes(c.expected, "read");
  const double written_before = rdma_bytes(c.expected, "write");
  finish(b.read_into(local.data(), n));
  EXPECT_EQ(checksum(local.data(), n), expected(n, 5));
  // A part in the middle, then a write of the whole with another pattern.
  std::vector<std::byte> part(1000);
  finish(b.read_into(part.data(), part.size(), 12345));
  EXPECT_EQ(0, std::memcmp(part.data(), local.data() + 12345, part.size()));
  fill(local.data(), n, 9);
  finish(b.write_from(local.data(), n));
  EXPECT_EQ(holder(0).call_one(&Holder::checksum_of_own).get(), expected(n, 9));
  RdmaStats after = rdma_stats();
  auto used = [&](RdmaBackend k) {
    switch (k) {
      case RdmaBackend::ucx:
        return after.ucx - before.ucx;
      case RdmaBackend::messages:
        return after.messages - before.messages;
      case RdmaBackend::cma:
        return after.cma - before.cma;
      default:
        return std::uint64_t{0};
    }
  };
  EXPECT_EQ(used(c.expected), 3U);
  // The admin API's metrics count the bytes by backend and direction.
  EXPECT_EQ(rdma_bytes(c.expected, "read") - read_before, static_cast<double>(n + part.size()));
  EXPECT_EQ(rdma_bytes(c.expected, "write") - written_before, static_cast<double>(n));
  // Chunks: through messages, and through UCX where the owner's worker serves (its own heap
  // memory, which UCX does not map here); memory UCX allocated is copied straight.
  const bool chunked = c.expected == RdmaBackend::messages ||
                       (c.expected == RdmaBackend::ucx && c.kind == Holder::user_memory);
  EXPECT_EQ(after.chunks > before.chunks, chunked) << after.chunks - before.chunks;
  b.drop().get();
}

TEST_P(RdmaBackends, ADroppedBufferFailsClearly) {
  const Case& c = GetParam();
  settings_.backend(c.forced);
  RdmaBuffer b = holder(0).call_one(&Holder::expose, 4096, 1, c.kind).get();
  std::vector<std::byte> local(4096);
  finish(b.read_into(local.data(), local.size()));
  holder(0).call_one(&Holder::drop_own).get();
  EXPECT_THAT(error_of(b.read_into(local.data(), local.size())), HasSubstr("was dropped"));
  EXPECT_THAT(error_of(b.write_from(local.data(), local.size())), HasSubstr("was dropped"));
  EXPECT_THAT(error_of(b.drop()), HasSubstr("already dropped"));
}

TEST_P(RdmaBackends, ProcToProcAndBackToTheController) {
  const Case& c = GetParam();
  settings_.backend(c.forced);
  constexpr std::size_t n = std::size_t{3} << 20;
  {
    // Worker 1 reads worker 0's memory, with the same backend forced there.
    ScopedWorkerBackend forced(holder(1), c.forced);
    RdmaBuffer b = holder(0).call_one(&Holder::expose, n, 7, c.kind).get();
    EXPECT_EQ(holder(1).call_one(&Holder::pull, b).get(), expected(n, 7));
    EXPECT_EQ(static_cast<RdmaBackend>(holder(1).call_one(&Holder::backend_for, b).get()),
              c.expected);
    b.drop().get();
  }
  // A worker reads the controller's memory.
  std::vector<std::byte> mine(n);
  fill(mine.data(), n, 8);
  RdmaBuffer m = c.kind == Holder::ucx_memory ? RdmaBuffer::allocate(n)
                                              : RdmaBuffer::register_memory(mine.data(), n);
  if (c.kind == Holder::ucx_memory) std::memcpy(m.data(), mine.data(), n);
  EXPECT_EQ(holder(1).call_one(&Holder::pull, m).get(), expected(n, 8));
  m.drop().get();
}

// Between procs of one host, host memory goes by cross-memory attach unless another backend is
// forced.
INSTANTIATE_TEST_SUITE_P(
    Host, RdmaBackends,
    ::testing::Values(
        Case{"CmaUserMemory", Holder::user_memory, RdmaBackend::automatic, RdmaBackend::cma},
        Case{"CmaAllocatedMemory", Holder::ucx_memory, RdmaBackend::automatic, RdmaBackend::cma},
        Case{"UcxUserMemory", Holder::user_memory, kHostBackend, kHostBackend},
        Case{"UcxAllocatedMemory", Holder::ucx_memory, kHostBackend, kHostBackend},
        Case{"MessagesUserMemory", Holder::user_memory, RdmaBackend::messages,
             RdmaBackend::messages},
        Case{"MessagesAllocatedMemory", Holder::ucx_memory, RdmaBackend::messages,
             RdmaBackend::messages}),
    [](const auto& p) { return std::string(p.param.name); });

TEST_F(Rdma, SizesThatDoNotFitAreRefusedAtOnce) {
  RdmaBuffer b = holder(0).call_one(&Holder::expose, 1000, 1, Holder::user_memory).get();
  std::vector<std::byte> local(2000);
  EXPECT_THAT(error_of(b.read_into(local.data(), 1001)),
              HasSubstr("1001 bytes at offset 0 does not fit RdmaBuffer"));
  EXPECT_THAT(error_of(b.write_from(local.data(), 10, 995)), HasSubstr("size() - offset"));
  EXPECT_THAT(error_of(b.read_into(local.data(), 1, 1000)), HasSubstr("does not fit"));
  EXPECT_THROW((void)b.read_into(nullptr, 10), UsageError);
  finish(b.read_into(local.data(), 0, 1000));  // empty, at the very end: fine
  b.drop().get();
}

TEST_F(Rdma, TheOwnersOwnProcessCopiesLocally) {
  std::vector<std::byte> mine(1 << 16);
  fill(mine.data(), mine.size(), 3);
  RdmaBuffer b = RdmaBuffer::register_memory(mine.data(), mine.size());
  EXPECT_EQ(b.data(), mine.data());
  std::vector<std::byte> out(mine.size());
  EXPECT_EQ(rdma_backend(b, out.data()), RdmaBackend::local);
  finish(b.read_into(out.data(), out.size()));
  EXPECT_EQ(out, mine);
  b.drop().get();
  EXPECT_THAT(error_of(b.read_into(out.data(), out.size())), HasSubstr("was dropped"));
}

TEST_F(Rdma, ABatchCompletesWhenAllHave) {
  constexpr std::size_t n = 1 << 20;
  RdmaBuffer a = holder(0).call_one(&Holder::expose, n, 1, Holder::ucx_memory).get();
  RdmaBuffer b = holder(1).call_one(&Holder::expose, n, 2, Holder::user_memory).get();
  std::vector<std::byte> x(n), y(n / 2), z(n / 2);
  RdmaBatch batch;
  batch.read(a, x.data(), n).read(b, y.data(), n / 2).read(b, z.data(), n / 2, n / 2);
  batch.submit().get();
  EXPECT_EQ(checksum(x.data(), n), expected(n, 1));
  std::vector<std::byte> joined(y);
  joined.insert(joined.end(), z.begin(), z.end());
  EXPECT_EQ(checksum(joined.data(), n), expected(n, 2));
  // One bad transfer fails the batch, after the others are done.
  RdmaBatch bad;
  bad.read(a, x.data(), n).read(b, y.data(), n + 1);
  EXPECT_THAT(error_of(bad.submit()), HasSubstr("does not fit"));
  a.drop().get();
  b.drop().get();
}

// A kernel that forbids cross-memory attach (a ptrace restriction) is found out once: the
// transfer goes another way, rdma_stats() says why, and later transfers do not try again.
TEST_F(Rdma, RefusedCrossMemoryAttachFallsBackOnceAndSaysSo) {
  constexpr std::size_t n = (std::size_t{5} << 20) + 7;
  RdmaBuffer b = holder(0).call_one(&Holder::expose, n, 3, Holder::user_memory).get();
  std::vector<std::byte> local(n);
  ASSERT_EQ(rdma_backend(b, local.data()), RdmaBackend::cma);
  settings_.refuse_cma();
  const RdmaStats before = rdma_stats();
  finish(b.read_into(local.data(), n));
  EXPECT_EQ(checksum(local.data(), n), expected(n, 3));
  const RdmaStats after = rdma_stats();
  EXPECT_THAT(after.cma_refused, HasSubstr("process_vm_readv"));
  EXPECT_THAT(after.cma_refused, HasSubstr("ptrace"));
  EXPECT_EQ(after.ucx + after.messages, before.ucx + before.messages + 1);
  EXPECT_EQ(rdma_backend(b, local.data()), kHostBackend);
  fill(local.data(), n, 4);
  finish(b.write_from(local.data(), n));
  EXPECT_EQ(holder(0).call_one(&Holder::checksum_of_own).get(), expected(n, 4));
  EXPECT_EQ(rdma_stats().cma, after.cma);  // not tried again
  settings_.backend(RdmaBackend::cma);
  EXPECT_THAT(error_of(b.read_into(local.data(), n)), HasSubstr("refuses it (process_vm_readv"));
  b.drop().get();
}

TEST_F(Rdma, AForcedBackendThatCannotServeSaysWhy) {
  RdmaBuffer b = holder(0).call_one(&Holder::expose, 64, 1, Holder::user_memory).get();
  std::vector<std::byte> local(64);
  settings_.backend(RdmaBackend::gpu_ipc);
  EXPECT_THAT(error_of(b.read_into(local.data(), 64)), HasSubstr("gpu_ipc backend is forced"));
  b.drop().get();
}

/// Tests with meshes of their own (they stop or kill their workers); settings are restored
/// whatever happens.
class RdmaOwner : public ::testing::Test {
 protected:
  ScopedRdmaSettings settings_;
};

/// Stops a child process and returns once every thread of it has stopped (false if it could
/// not): a SIGSTOP takes hold only when a thread of the target next runs, and on a loaded
/// machine its other threads may go on serving for a while. The stop stays reported (WNOWAIT)
/// for whoever else waits.
bool stop_and_wait(int pid) {
  if (::kill(pid, SIGSTOP) != 0) return false;
  siginfo_t info{};
  return ::waitid(P_PID, static_cast<id_t>(pid), &info, WSTOPPED | WNOWAIT) == 0 &&
         info.si_code == CLD_STOPPED;
}

// A stopped owner answers nothing: the transfer times out, with the bound in the message. A
// mesh of its own, so that nothing else waits on the stopped process.
TEST_F(RdmaOwner, AnUnansweredTransferTimesOut) {
  for (RdmaBackend forced : {RdmaBackend::automatic, RdmaBackend::messages}) {
    settings_.backend(forced);
    auto procs = this_host().spawn_procs({{"gpus", 1}});
    auto h = procs.spawn<Holder>("stopped");
    RdmaBuffer b = h.call_one(&Holder::expose, 1 << 20, 1, Holder::user_memory).get();
    int pid = h.call_one(&Holder::pid).get();
    std::string error;
    {
      ScopedRdmaSettings timed;
      timed.timeout(300ms);
      const bool stopped = stop_and_wait(pid);
      std::vector<std::byte> local(1 << 20);
      if (stopped) error = error_of(b.read_into(local.data(), local.size()));
      ASSERT_EQ(::kill(pid, SIGCONT), 0);
      ASSERT_TRUE(stopped) << "could not stop the owner, pid " << pid;
    }
    EXPECT_THAT(error, HasSubstr("timed out after 300 ms")) << to_string(forced);
    procs.stop().get();
  }
}

// The owner stops (SIGSTOP) in the middle of a large transfer that its worker must serve: the
// transfer fails at its timeout, and what the owner does once it runs again never reaches the
// destination. The owner is stopped from the hook that runs when the first chunk
// lands, before the transfer asks for the next one: the transfer is under way, and it cannot
// finish, since it has more chunks than either backend keeps in flight. No timing decides it.
TEST_F(RdmaOwner, AnOwnerStoppedMidTransferTimesOut) {
  constexpr std::size_t n = std::size_t{128} << 20;
  auto procs = this_host().spawn_procs({{"gpus", 1}});
  auto h = procs.spawn<Holder>("stopped");
  const int pid = h.call_one(&Holder::pid).get();
  // The backends that move it in chunks (cross-memory attach copies it at once, alone).
  for (RdmaBackend forced : {kHostBackend, RdmaBackend::messages}) {
    settings_.backend(forced);
    RdmaBuffer b = h.call_one(&Holder::expose, n, 1, Holder::user_memory).get();
    std::vector<std::byte> local(n, std::byte{0});
    // A first read readies the way (links, UCX endpoints, staging memory), so that the first
    // chunk of the timed read lands well within its timeout.
    finish(b.read_into(local.data(), n));
    ASSERT_EQ(checksum(local.data(), n), expected(n, 1));
    std::fill(local.begin(), local.end(), std::byte{0});
    // The hook runs one chunk at a time; the owner stays stopped until SIGCONT below.
    auto stopped = std::make_shared<std::atomic<bool>>(false);
    std::string error;
    {
      ScopedRdmaSettings timed;
      // A UCX chunk unanswered for an hour would move through messages: far beyond the
      // timeout, so that the UCX chunks in flight are the ones that must not land.
      timed.timeout(1500ms).ucx_stall(1h).on_chunk([stopped, pid] {
        if (!stopped->load()) stopped->store(stop_and_wait(pid));
      });
      error = error_of(b.read_into(local.data(), n));  // a hang fails there with TimeoutError
    }                                                  // no hook runs from here on
    const std::uint64_t sum = checksum(local.data(), n);
    ASSERT_EQ(::kill(pid, SIGCONT), 0);
    ASSERT_TRUE(stopped->load()) << "the owner was not stopped mid-transfer: " << error;
    EXPECT_THAT(error, HasSubstr("timed out after 1500 ms")) << to_string(forced);
    // The owner serves what it was asked before it stopped, then this read: by then nothing of
    // the failed transfer is left to land, and none of it landed in `local`.
    std::vector<std::byte> again(n);
    finish(b.read_into(again.data(), n));
    EXPECT_EQ(checksum(again.data(), n), expected(n, 1));
    EXPECT_EQ(checksum(local.data(), n), sum) << to_string(forced);
    b.drop().get();
  }
  procs.stop().get();
}

// A proc stops while transfers from its memory are queued at its rdma actor, and the actor that
// owned the memory (and never dropped it) frees it as it stops: the proc unregisters every
// region before any actor stops, so the transfers fail as dropped or lost, and the proc stops
// cleanly instead of copying freed memory.
TEST_F(RdmaOwner, AProcStoppingWithTransfersQueuedStopsCleanly) {
  constexpr std::size_t n = std::size_t{32} << 20;
  std::vector<std::byte> local(n);
  settings_.backend(RdmaBackend::messages);  // transfers wait in the owner's rdma actor
  for (int round = 0; round < 5; ++round) {
    auto procs = this_host().spawn_procs({{"gpus", 1}});
    auto h = procs.spawn<Holder>("leaky");
    RdmaBuffer b = h.call_one(&Holder::expose, n, 1, Holder::user_memory).get();
    Future<void> f = b.read_into(local.data(), n);
    procs.stop().get();
    try {
      finish(std::move(f));
    } catch (const RdmaError& e) {
      // Not "cannot be reached": a proc that crashed on freed memory loses its link first.
      EXPECT_THAT(std::string(e.what()), HasSubstr("was dropped: its owner's proc is stopping"));
    }
  }
}

/// A mesh of its own, since this test kills its worker.
TEST_F(RdmaOwner, ADeadOwnerFailsTransfersInBoundedTime) {
  for (int kind : {Holder::user_memory, Holder::ucx_memory}) {
    for (RdmaBackend forced : {RdmaBackend::automatic, RdmaBackend::messages}) {
      settings_.backend(forced);
      auto procs = this_host().spawn_procs({{"gpus", 1}});
      auto h = procs.spawn<Holder>("mortal");
      RdmaBuffer b = h.call_one(&Holder::expose, 1 << 20, 1, kind).get();
      std::vector<std::byte> local(1 << 20);
      finish(b.read_into(local.data(), local.size()));
      ASSERT_EQ(::kill(h.call_one(&Holder::pid).get(), SIGKILL), 0);
      auto t0 = std::chrono::steady_clock::now();
      std::string error = error_of(b.read_into(local.data(), local.size()));
      auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                    std::chrono::steady_clock::now() - t0)
                    .count();
      std::printf("kind %d, %s: failed after %lld ms: %s\n", kind,
                  std::string(to_string(forced)).c_str(), static_cast<long long>(ms),
                  error.c_str());
      // Which comes first, the watcher's report of the death or the link's end, is a race.
      EXPECT_THAT(error, ::testing::AnyOf(HasSubstr("is gone"), HasSubstr("cannot be reached")));
      procs.stop().get();
    }
  }
}

// The owner dies while a large transfer runs: it ends (done or failed) in bounded time, and
// never hangs, whichever side was copying.
TEST_F(RdmaOwner, AnOwnerDyingMidTransferEndsItInBoundedTime) {
  constexpr std::size_t n = std::size_t{128} << 20;
  std::vector<std::byte> local(n);
  for (int kind : {Holder::user_memory, Holder::ucx_memory}) {
    for (RdmaBackend forced : {RdmaBackend::automatic, RdmaBackend::messages}) {
      settings_.backend(forced);
      auto procs = this_host().spawn_procs({{"gpus", 1}});
      auto h = procs.spawn<Holder>("mortal");
      RdmaBuffer b = h.call_one(&Holder::expose, n, 1, kind).get();
      const int pid = h.call_one(&Holder::pid).get();
      Future<void> f = b.read_into(local.data(), n);
      ASSERT_EQ(::kill(pid, SIGKILL), 0);
      std::string outcome = "done";
      try {
        f.get(std::chrono::seconds(30));  // a hang fails here with TimeoutError
      } catch (const RdmaError& e) {
        outcome = e.what();
        EXPECT_THAT(outcome,
                    ::testing::AnyOf(HasSubstr("is gone"), HasSubstr("cannot be reached")));
      }
      std::printf("kind %d, %s: %s\n", kind, std::string(to_string(forced)).c_str(),
                  outcome.c_str());
      procs.stop().get();
    }
  }
}

}  // namespace
}  // namespace baton

int main(int argc, char** argv) {
  baton::RuntimeOptions options;
  options.supervise = [](const baton::MeshFailure&) { return true; };  // the kill test's own
  baton::Runtime rt(argc, argv, options);  // a worker serves here and never returns
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
