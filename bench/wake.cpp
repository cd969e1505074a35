// Part of `baton-bench cast`: what waking a sleeping process on another cpu costs on this
// machine, after that cpu was idle briefly and after it was idle a millisecond. Under some
// hypervisors an idle virtual cpu is kept ready only for a while (halt polling): past that, the
// kernel's wake-up of a thread there costs the waker a slow interrupt and the thread tens of
// microseconds before it runs. A cast and the calls it replaces each pay such wake-ups, so these
// figures tell how much of their times is the machine's.

#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "figures.hpp"

namespace baton::bench {
namespace {

std::int64_t now_ns() {
  timespec t{};
  ::clock_gettime(CLOCK_MONOTONIC, &t);
  return std::int64_t{t.tv_sec} * 1'000'000'000 + t.tv_nsec;
}

/// What the two processes share: the sleeper says it is about to wait, and when it woke.
struct Shared {
  std::atomic<int> waiting{0};
  std::atomic<int> stop{0};
  std::atomic<std::int64_t> woke_ns{0};
};

/// The sleeper (a forked child, bound to `cpu`): waits in epoll for each write of `bell`,
/// watched edge-triggered and never read, as a link's event loop waits; notes when it runs;
/// answers on `back`.
[[noreturn]] void sleeper(int cpu, int bell, int back, Shared* shared) {
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  ::sched_setaffinity(0, sizeof one, &one);
  const int ep = ::epoll_create1(0);
  epoll_event want{};
  want.events = EPOLLIN | EPOLLET;
  if (ep < 0 || ::epoll_ctl(ep, EPOLL_CTL_ADD, bell, &want) != 0) ::_exit(1);
  for (;;) {
    shared->waiting.store(1);
    epoll_event got{};
    if (::epoll_wait(ep, &got, 1, 5000) <= 0) ::_exit(1);  // the waker is gone
    shared->woke_ns.store(now_ns());
    if (shared->stop.load() != 0) ::_exit(0);
    const std::uint64_t v = 1;
    if (::write(back, &v, sizeof v) != sizeof v) ::_exit(1);
  }
}

struct Wake {
  std::vector<double> latency_us;  // from the write's start to the sleeper running
  std::vector<double> write_us;    // the write itself
};

}  // namespace

void print_remote_wake_figures() {
  cpu_set_t mine;
  CPU_ZERO(&mine);
  if (::sched_getaffinity(0, sizeof mine, &mine) != 0 || CPU_COUNT(&mine) < 2) {
    std::printf("# remote_wake: skipped, this process may run on one cpu only\n");
    return;
  }
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE && cpus.size() < 2; ++c) {
    if (CPU_ISSET(c, &mine)) cpus.push_back(c);
  }
  const int bell = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  const int back = ::eventfd(0, EFD_CLOEXEC);
  void* page =
      ::mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (bell < 0 || back < 0 || page == MAP_FAILED) throw std::runtime_error("remote_wake: setup");
  auto* shared = new (page) Shared;
  const pid_t child = ::fork();
  if (child == 0) sleeper(cpus[1], bell, back, shared);
  // This thread alone goes to the first cpu, and back where it was allowed after.
  cpu_set_t first;
  CPU_ZERO(&first);
  CPU_SET(cpus[0], &first);
  ::sched_setaffinity(0, sizeof first, &first);
  const auto round = [&](std::int64_t idle_ns, Wake& into) {
    const std::int64_t give_up = now_ns() + 2'000'000'000;
    while (shared->waiting.load() == 0) {
      if (now_ns() > give_up) throw std::runtime_error("remote_wake: the sleeper stopped");
    }
    shared->waiting.store(0);
    // Keep this cpu busy while the other one idles (and the sleeper settles into its wait).
    for (const std::int64_t until = now_ns() + idle_ns; now_ns() < until;) {
    }
    const std::uint64_t v = 1;
    const std::int64_t t0 = now_ns();
    const bool wrote = ::write(bell, &v, sizeof v) == sizeof v;
    const std::int64_t t1 = now_ns();
    pollfd answer{back, POLLIN, 0};
    std::uint64_t got = 0;
    if (!wrote || ::poll(&answer, 1, 2000) != 1 || ::read(back, &got, sizeof got) != sizeof got) {
      throw std::runtime_error("remote_wake: no answer from the sleeper");
    }
    into.latency_us.push_back(static_cast<double>(shared->woke_ns.load() - t0) / 1e3);
    into.write_us.push_back(static_cast<double>(t1 - t0) / 1e3);
  };
  Wake warm;
  Wake cold;
  std::string failed;
  try {
    // One way at a time: a hypervisor that keeps an idle cpu ready does it for a while that it
    // learns from the idle times it saw last (a long one ends it), so taking turns would measure
    // the long idle twice. The first 50 of each let it learn.
    Wake settle;
    for (int i = 0; i < 50; ++i) round(20'000, settle);
    for (int i = 0; i < 300; ++i) round(20'000, warm);
    for (int i = 0; i < 50; ++i) round(1'000'000, settle);
    for (int i = 0; i < 300; ++i) round(1'000'000, cold);
  } catch (const std::exception& e) {
    failed = e.what();
  }
  shared->stop.store(1);
  const std::uint64_t v = 1;
  (void)!::write(bell, &v, sizeof v);
  int status = 0;
  ::waitpid(child, &status, 0);
  ::sched_setaffinity(0, sizeof mine, &mine);
  ::close(bell);
  ::close(back);
  ::munmap(page, sizeof(Shared));
  if (!failed.empty()) throw std::runtime_error(failed);
  print_figure("remote_wake_us_idle20us", median(warm.latency_us), "us");
  print_figure("remote_wake_us_idle1ms", median(cold.latency_us), "us");
  print_figure("remote_wake_write_us_idle20us", median(warm.write_us), "us");
  print_figure("remote_wake_write_us_idle1ms", median(cold.write_us), "us");
}

}  // namespace baton::bench
