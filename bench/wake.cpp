// Part of `baton-bench cast`: what waking a sleeping process on another cpu costs on this
// machine, after that cpu was idle briefly and after it was idle a millisecond. Under some
// hypervisors an idle virtual cpu is kept ready only for a while (halt polling): past that, the
// kernel's wake-up of a thread there costs the waker a slow interrupt and the thread tens of
// microseconds before it runs. A cast and the calls it replaces each pay such wake-ups, so these
// figures tell how much of their times is the machine's.

#include <poll.h>
#include <sched.h>
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

/// The sleeper, its descriptors and this thread's cpu, set up and given back whatever happens.
class Pair {
 public:
  explicit Pair(const cpu_set_t& mine) : mine_(mine) {
    std::vector<int> cpus;
    for (int c = 0; c < CPU_SETSIZE && cpus.size() < 2; ++c) {
      if (CPU_ISSET(c, &mine)) cpus.push_back(c);
    }
    void* page =
        ::mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (page != MAP_FAILED) shared_ = new (page) Shared;
    if (bell_ < 0 || back_ < 0 || shared_ == nullptr) {
      throw std::runtime_error("remote_wake: no eventfd or shared page");
    }
    child_ = ::fork();
    if (child_ == 0) sleeper(cpus[1], bell_, back_, shared_);
    // This thread alone goes to the first cpu, and back where it was allowed at the end.
    cpu_set_t first;
    CPU_ZERO(&first);
    CPU_SET(cpus[0], &first);
    ::sched_setaffinity(0, sizeof first, &first);
  }
  ~Pair() {
    if (child_ > 0) {
      shared_->stop.store(1);
      const std::uint64_t v = 1;
      (void)!::write(bell_, &v, sizeof v);
      ::waitpid(child_, nullptr, 0);
    }
    ::sched_setaffinity(0, sizeof mine_, &mine_);
    if (shared_ != nullptr) ::munmap(shared_, sizeof(Shared));
    if (bell_ >= 0) ::close(bell_);
    if (back_ >= 0) ::close(back_);
  }
  Pair(const Pair&) = delete;
  Pair& operator=(const Pair&) = delete;

  /// Keeps this cpu busy `idle_ns` while the sleeper's cpu idles, then wakes the sleeper: the
  /// time until the sleeper ran and the write's own time, in microseconds, into the two vectors
  /// unless they are null (rounds that only settle).
  void round(std::int64_t idle_ns, std::vector<double>* latency_us, std::vector<double>* write_us) {
    const std::int64_t give_up = now_ns() + 2'000'000'000;
    while (shared_->waiting.load() == 0) {
      if (now_ns() > give_up)
        throw std::runtime_error(
            "remote_wake: the process it wakes (a child of this one) stopped waiting; nothing else "
            "is wrong: run it again");
    }
    shared_->waiting.store(0);
    for (const std::int64_t until = now_ns() + idle_ns; now_ns() < until;) {
    }
    const std::uint64_t v = 1;
    const std::int64_t t0 = now_ns();
    const bool wrote = ::write(bell_, &v, sizeof v) == sizeof v;
    const std::int64_t t1 = now_ns();
    pollfd answer{back_, POLLIN, 0};
    std::uint64_t got = 0;
    if (!wrote || ::poll(&answer, 1, 2000) != 1 || ::read(back_, &got, sizeof got) != sizeof got) {
      throw std::runtime_error(
          "remote_wake: the process it wakes (a child of this one) did not answer within 2 s: it "
          "was killed or stopped; run it again");
    }
    if (latency_us != nullptr) {
      latency_us->push_back(static_cast<double>(shared_->woke_ns.load() - t0) / 1e3);
      write_us->push_back(static_cast<double>(t1 - t0) / 1e3);
    }
  }

 private:
  const cpu_set_t mine_;
  const int bell_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  const int back_ = ::eventfd(0, EFD_CLOEXEC);
  Shared* shared_ = nullptr;
  pid_t child_ = -1;
};

}  // namespace

void print_remote_wake_figures() {
  cpu_set_t mine;
  CPU_ZERO(&mine);
  if (::sched_getaffinity(0, sizeof mine, &mine) != 0 || CPU_COUNT(&mine) < 2) {
    std::printf("# remote_wake: skipped, this process may run on one cpu only\n");
    return;
  }
  std::vector<double> warm;
  std::vector<double> warm_write;
  std::vector<double> cold;
  std::vector<double> cold_write;
  {
    Pair pair(mine);
    // One way at a time: a hypervisor that keeps an idle cpu ready does it for a while that it
    // learns from the idle times it saw last (a long one ends it), so taking turns would measure
    // the long idle twice. The first 50 of each let it learn.
    for (int i = 0; i < 50; ++i) pair.round(20'000, nullptr, nullptr);
    for (int i = 0; i < 300; ++i) pair.round(20'000, &warm, &warm_write);
    for (int i = 0; i < 50; ++i) pair.round(1'000'000, nullptr, nullptr);
    for (int i = 0; i < 300; ++i) pair.round(1'000'000, &cold, &cold_write);
  }
  const double after_short = median(warm);
  const double after_long = median(cold);
  print_figure("remote_wake_us_idle20us", after_short, "us");
  print_figure("remote_wake_us_idle1ms", after_long, "us");
  print_figure("remote_wake_idle_ratio", after_long / after_short, "x");
  print_figure("remote_wake_write_us_idle20us", median(warm_write), "us");
  print_figure("remote_wake_write_us_idle1ms", median(cold_write), "us");
}

}  // namespace baton::bench
