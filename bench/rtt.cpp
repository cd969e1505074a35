// `baton-bench rtt`: controller call_one round trips to an actor in another process on this
// host (over shared memory, and again over the unix socket alone), beside a raw unix-socket
// ping-pong and a raw futex ping-pong between two processes measured in the same run; one-way
// sends per second; what each costs in CPU time (caller and callee, every thread), and what an
// idle proc burns.

#include <linux/futex.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "actor/metrics.hpp"
#include "actor/trace.hpp"
#include "baton/baton.hpp"
#include "figures.hpp"
#include "mesh/agent.hpp"

namespace baton::bench {
namespace {

using Clock = std::chrono::steady_clock;

class Echo : public Actor {
 public:
  Bytes echo(const Bytes& b) { return b; }
  int pid() { return static_cast<int>(::getpid()); }
  void hit(int n) { hits_ += n; }
  long hits() { return hits_; }
  static constexpr auto endpoints =
      baton::endpoints<&Echo::echo, &Echo::pid, &Echo::hit, &Echo::hits>();

 private:
  long hits_ = 0;
};

/// The links of process `pid` that run over shared memory (its mappings of memfds named
/// baton-link).
int shm_links(pid_t pid) {
  std::ifstream maps("/proc/" + std::to_string(pid) + "/maps");
  int n = 0;
  for (std::string line; std::getline(maps, line);) {
    if (line.find("/memfd:baton-link") != std::string::npos) ++n;
  }
  return n;
}

/// CPU time a process has used so far, every thread of it, in nanoseconds (the scheduler's
/// own accounting: /proc/PID/task/*/schedstat).
double process_cpu_ns(pid_t pid) {
  double ns = 0;
  std::error_code ec;
  for (const auto& task :
       std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/task", ec)) {
    std::ifstream in(task.path() / "schedstat");
    double run = 0;
    if (in >> run) ns += run;
  }
  return ns;
}

/// CPU time of the calling thread, in nanoseconds.
double thread_cpu_ns() {
  timespec t{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) * 1e9 + static_cast<double>(t.tv_nsec);
}

double percentile(std::vector<double> v, double p) {
  const auto k = static_cast<std::size_t>(p * static_cast<double>(v.size() - 1));
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
  return v[k];
}

std::vector<double> time_calls(const ActorMesh<Echo>& echo, std::size_t bytes, int n) {
  const Bytes payload = Bytes::copy(std::string(bytes, 'p'));
  std::vector<double> us;
  us.reserve(static_cast<std::size_t>(n));
  for (int i = 0; i < n + n / 10; ++i) {
    const auto t0 = Clock::now();
    const Bytes back = echo.call_one(&Echo::echo, payload).get();
    const auto t1 = Clock::now();
    if (back.size() != bytes) throw std::runtime_error("echo returned the wrong size");
    if (i >= n / 10) us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
  }
  return us;
}

// The baseline: 64-byte ping-pong over a unix socketpair between this process and a child.
// `cpu_ns` gets the CPU time both sides used (this thread and the child).
std::vector<double> socket_ping_pong(int n, double& cpu_ns) {
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0) throw std::runtime_error("socketpair");
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    char buf[64];
    for (;;) {
      std::size_t got = 0;
      while (got < sizeof(buf)) {
        const ssize_t r = ::read(fds[1], buf + got, sizeof(buf) - got);
        if (r <= 0) ::_exit(0);
        got += static_cast<std::size_t>(r);
      }
      if (::write(fds[1], buf, sizeof(buf)) != static_cast<ssize_t>(sizeof(buf))) ::_exit(1);
    }
  }
  ::close(fds[1]);
  char buf[64] = {};
  std::vector<double> us;
  const double mine0 = thread_cpu_ns();
  const double child0 = process_cpu_ns(pid);
  for (int i = 0; i < n + n / 10; ++i) {
    const auto t0 = Clock::now();
    if (::write(fds[0], buf, sizeof(buf)) != static_cast<ssize_t>(sizeof(buf))) break;
    std::size_t got = 0;
    while (got < sizeof(buf)) {
      const ssize_t r = ::read(fds[0], buf + got, sizeof(buf) - got);
      if (r <= 0) throw std::runtime_error("ping-pong peer died");
      got += static_cast<std::size_t>(r);
    }
    const auto t1 = Clock::now();
    if (i >= n / 10) us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
  }
  cpu_ns = (thread_cpu_ns() - mine0) + (process_cpu_ns(pid) - child0);
  ::close(fds[0]);
  ::waitpid(pid, nullptr, 0);
  return us;
}

long futex(std::atomic<std::uint32_t>* word, int op, std::uint32_t value) {
  return ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), op, value, nullptr, nullptr,
                   0);
}

/// Turns between this process (side 0) and a child (side 1) through two words of shared memory:
/// side 0 raises `ping` to i and wakes side 1, which waits for it, raises `pong` and wakes side 0.
/// `Wakes` says how: wake(peer, word) after a word is raised, wait(me, word, i) until it is i.
/// The round trips of side 0, the first tenth left out.
template <class Wakes>
std::vector<double> turns(int n, Wakes& wakes) {
  void* mem = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) throw std::runtime_error("mmap");
  auto* ping = new (mem) std::atomic<std::uint32_t>(0);
  auto* pong = new (static_cast<char*>(mem) + 128) std::atomic<std::uint32_t>(0);
  const int total = n + n / 10;
  const pid_t pid = ::fork();
  if (pid == 0) {
    wakes.start(1);
    for (std::uint32_t i = 1; i <= static_cast<std::uint32_t>(total); ++i) {
      wakes.wait(1, ping, i);
      pong->store(i);
      wakes.wake(0, pong);
    }
    ::_exit(0);
  }
  wakes.start(0);
  std::vector<double> us;
  for (std::uint32_t i = 1; i <= static_cast<std::uint32_t>(total); ++i) {
    const auto t0 = Clock::now();
    ping->store(i);
    wakes.wake(1, ping);
    wakes.wait(0, pong, i);
    const auto t1 = Clock::now();
    if (static_cast<int>(i) > n / 10) {
      us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    }
  }
  ::waitpid(pid, nullptr, 0);
  ::munmap(mem, 4096);
  return us;
}

/// The floor for shared memory: each side sleeps in the kernel (FUTEX_WAIT) on the word it waits
/// for until the other wakes it.
struct FutexWakes {
  void start(int /*me*/) {}
  void wake(int /*peer*/, std::atomic<std::uint32_t>* word) { futex(word, FUTEX_WAKE, INT_MAX); }
  void wait(int /*me*/, std::atomic<std::uint32_t>* word, std::uint32_t i) {
    while (word->load() < i) futex(word, FUTEX_WAIT, i - 1);
  }
};

std::vector<double> futex_ping_pong(int n) {
  FutexWakes wakes;
  return turns(n, wakes);
}

/// Each side woken as a shared-memory link's reader is: the peer writes its eventfd, and it waits
/// in an edge-triggered epoll_wait, then reads the count and reads again as Asio does when it
/// waits once more (which finds the count taken). What a call costs beyond this is the runtime's
/// own path, not its wake-ups.
struct EventfdWakes {
  EventfdWakes()
      : bells{::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC), ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)} {
    if (bells[0] < 0 || bells[1] < 0) throw std::runtime_error("eventfd");
  }
  ~EventfdWakes() {
    if (ep >= 0) ::close(ep);
    for (const int fd : bells) {
      if (fd >= 0) ::close(fd);
    }
  }
  EventfdWakes(const EventfdWakes&) = delete;
  EventfdWakes& operator=(const EventfdWakes&) = delete;
  /// After the fork: this side's epoll, watching its own bell.
  void start(int me) {
    ep = ::epoll_create1(EPOLL_CLOEXEC);
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLET;
    if (ep < 0 || ::epoll_ctl(ep, EPOLL_CTL_ADD, bells[me], &ev) != 0) {
      throw std::runtime_error("epoll");
    }
  }
  void wake(int peer, std::atomic<std::uint32_t>* /*word*/) {
    const std::uint64_t one = 1;
    if (::write(bells[peer], &one, sizeof one) != sizeof one) throw std::runtime_error("ring");
  }
  void wait(int me, std::atomic<std::uint32_t>* word, std::uint32_t i) {
    while (word->load() < i) {
      epoll_event ev{};
      ::epoll_wait(ep, &ev, 1, -1);
      std::uint64_t count = 0;
      while (::read(bells[me], &count, sizeof count) > 0) {
      }
    }
  }
  int bells[2];
  int ep = -1;
};

std::vector<double> eventfd_ping_pong(int n) {
  EventfdWakes wakes;
  return turns(n, wakes);
}

/// One-way sends per second from the controller to `echo`, in order, until the last is handled.
/// One-way sends to the actor (its ActorRef's send), or broadcasts to its one-member mesh (each a
/// cast), per second.
double one_way_per_second(const ActorMesh<Echo>& echo, int n, bool broadcast = false) {
  const long before = echo.call_one(&Echo::hits).get();
  const auto t0 = Clock::now();
  if (broadcast) {
    for (int i = 0; i < n; ++i) echo.broadcast(&Echo::hit, 1);
  } else {
    const ActorRef<Echo> actor = echo.at(0);
    for (int i = 0; i < n; ++i) actor.send(&Echo::hit, 1);
  }
  const long after = echo.call_one(&Echo::hits).get();  // behind every send (per-sender FIFO)
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  if (after - before != n) throw std::runtime_error("one-way sends went missing");
  return n / s;
}

}  // namespace

int run_throughput() {
  auto procs = this_host().spawn_procs({{"procs", 1}});
  auto echo = procs.spawn<Echo>("echo");
  std::vector<double> shm;
  for (int i = 0; i < 3; ++i) {
    shm.push_back(one_way_per_second(echo, 500000));
    print_figure("proc_throughput_shm", shm.back(), "msg/s");
  }
  // The same as broadcasts to the actor's mesh: each send is a cast of one member.
  print_figure("proc_throughput_shm_broadcast", one_way_per_second(echo, 500000, true), "msg/s");
  procs.stop().get();
  // The baseline: the same over the unix socket alone.
  ::setenv("BATON_SHM", "0", 1);
  auto unix_procs = this_host().spawn_procs({{"procs", 1}});
  ::unsetenv("BATON_SHM");
  auto unix_echo = unix_procs.spawn<Echo>("echo");
  const double unix = one_way_per_second(unix_echo, 200000);
  unix_procs.stop().get();
  print_figure("proc_throughput_unix", unix, "msg/s");
  print_figure("proc_throughput_shm_ratio", percentile(shm, 0.5) / unix, "x");
  return 0;
}

/// What looking inside the job costs a call: the same calls to the same actor with everything
/// observed (call histograms, each handler's activity, the admin API served) and with nothing
/// (observing turned off in this controller and in the callee's process), and with a trace
/// recording, in alternating rounds so that all see the same machine.
void observed_rtt(const ActorMesh<Echo>& echo) {
  auto agent = detail::agent_of(echo.at(0).id().proc);
  auto observe = [&agent](bool on) {
    detail::set_observing(on);
    (void)agent.call(&detail::ProcAgent::observe, on).get();
  };
  auto trace = [&agent](bool on) {
    detail::set_tracing(on);
    (void)agent.call(&detail::ProcAgent::trace_on, on).get();
  };
  std::vector<double> on;
  std::vector<double> off;
  std::vector<double> traced;
  for (int round = 0; round < 40; ++round) {
    observe(true);
    const auto a = time_calls(echo, 64, 500);
    trace(true);
    const auto c = time_calls(echo, 64, 500);
    trace(false);
    observe(false);
    const auto b = time_calls(echo, 64, 500);
    on.insert(on.end(), a.begin(), a.end());
    off.insert(off.end(), b.begin(), b.end());
    traced.insert(traced.end(), c.begin(), c.end());
  }
  observe(true);
  (void)detail::take_trace();  // what the traced rounds recorded, dropped
  (void)agent.call(&detail::ProcAgent::trace_take).get();
  print_figure("proc_rtt_observed_p50", percentile(on, 0.5), "us");
  print_figure("proc_rtt_unobserved_p50", percentile(off, 0.5), "us");
  print_figure("proc_rtt_observed_ratio", percentile(on, 0.5) / percentile(off, 0.5), "x");
  print_figure("proc_rtt_traced_p50", percentile(traced, 0.5), "us");
  print_figure("proc_rtt_traced_ratio", percentile(traced, 0.5) / percentile(off, 0.5), "x");
}

int run_calls() {
  int n = 100000;
  if (const char* v = std::getenv("BATON_BENCH_CALLS")) {
    const std::string_view text(v);
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
    if (ec != std::errc() || end != text.data() + text.size() || n <= 0) {
      throw std::runtime_error("BATON_BENCH_CALLS=" + std::string(text) +
                               " is not a number of calls above 0 (unset: 100000)");
    }
  }
  auto procs = this_host().spawn_procs({{"procs", 1}});
  auto echo = procs.spawn<Echo>("echo");
  const auto callee = static_cast<pid_t>(echo.call_one(&Echo::pid).get());
  std::fprintf(stderr, "baton-bench calls: this process is %d, the callee %d\n",
               static_cast<int>(::getpid()), static_cast<int>(callee));
  const std::vector<double> us = time_calls(echo, 64, n);
  procs.stop().get();
  print_figure("proc_rtt_p50", percentile(us, 0.5), "us");
  print_figure("proc_rtt_p99", percentile(us, 0.99), "us");
  return 0;
}

int run_rtt() {
  constexpr int kCalls = 20000;
  double socket_cpu_ns = 0;
  const std::vector<double> socket = socket_ping_pong(kCalls, socket_cpu_ns);
  const std::vector<double> futexes = futex_ping_pong(kCalls);
  const std::vector<double> eventfds = eventfd_ping_pong(kCalls);
  auto procs = this_host().spawn_procs({{"procs", 1}});
  auto echo = procs.spawn<Echo>("echo");
  const auto callee = static_cast<pid_t>(echo.call_one(&Echo::pid).get());
  const double cpu0 = process_cpu_ns(::getpid()) + process_cpu_ns(callee);
  const std::vector<double> small = time_calls(echo, 64, kCalls);
  const double cpu_ns = process_cpu_ns(::getpid()) + process_cpu_ns(callee) - cpu0;
  const std::vector<double> large = time_calls(echo, 1 << 20, 300);
  // 256 MiB there and back, beside one memcpy of 256 MiB into memory already touched. The
  // argument is made once, before the calls, as a program makes its data once and sends it.
  constexpr std::size_t kHuge = std::size_t{256} << 20;
  const std::vector<double> huge = time_calls(echo, kHuge, 10);
  double memcpy_us = 1e300;
  {
    std::vector<char> from(kHuge, 'x');
    std::vector<char> to(kHuge, 'y');
    for (int i = 0; i < 5; ++i) {
      const auto t0 = Clock::now();
      std::memcpy(to.data(), from.data(), kHuge);
      memcpy_us =
          std::min(memcpy_us, std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    }
  }
  // What making the 256 MiB argument cost (Bytes::copy into memory other procs can map),
  // beside a copy into fresh heap memory, as a std::vector copy does.
  double make_us = 1e300;
  double heap_us = 1e300;
  {
    const std::string from(kHuge, 'm');
    for (int i = 0; i < 3; ++i) {
      const auto t0 = Clock::now();
      const Bytes made = Bytes::copy(from);
      const auto t1 = Clock::now();
      const std::vector<char> heap(from.begin(), from.end());
      const auto t2 = Clock::now();
      if (made.size() != heap.size()) throw std::runtime_error("copies of another size");
      make_us = std::min(make_us, std::chrono::duration<double, std::micro>(t1 - t0).count());
      heap_us = std::min(heap_us, std::chrono::duration<double, std::micro>(t2 - t1).count());
    }
  }
  const int links_shm = shm_links(callee);
  observed_rtt(echo);
  const double throughput = one_way_per_second(echo, 200000);
  // An idle proc: what its threads use in two seconds without a message.
  const double idle0 = process_cpu_ns(callee);
  const auto t0 = Clock::now();
  std::this_thread::sleep_for(std::chrono::seconds(2));
  const double idle_ns = process_cpu_ns(callee) - idle0;
  const double idle_wall_ns = std::chrono::duration<double, std::nano>(Clock::now() - t0).count();
  procs.stop().get();
  // The same over the unix socket alone: a proc whose links do not offer shared memory.
  ::setenv("BATON_SHM", "0", 1);
  auto unix_procs = this_host().spawn_procs({{"procs", 1}});
  ::unsetenv("BATON_SHM");
  auto unix_echo = unix_procs.spawn<Echo>("echo");
  const auto unix_callee = static_cast<pid_t>(unix_echo.call_one(&Echo::pid).get());
  const std::vector<double> unix_small = time_calls(unix_echo, 64, kCalls / 2);
  const int unix_links_shm = shm_links(unix_callee);
  const double unix_throughput = one_way_per_second(unix_echo, 100000);
  unix_procs.stop().get();
  const double socket_p50 = percentile(socket, 0.5);
  const double futex_p50 = percentile(futexes, 0.5);
  const double p50 = percentile(small, 0.5);
  const double unix_p50 = percentile(unix_small, 0.5);
  print_figure("proc_shm_links", links_shm, "links");
  print_figure("proc_shm_links_unix_run", unix_links_shm, "links");
  print_figure("futex_rtt_p50", futex_p50, "us");
  print_figure("proc_rtt_shm_p50", p50, "us");
  print_figure("proc_rtt_shm_futex_ratio", p50 / futex_p50, "x");
  print_figure("eventfd_rtt_p50", percentile(eventfds, 0.5), "us");
  print_figure("proc_rtt_shm_eventfd_ratio", p50 / percentile(eventfds, 0.5), "x");
  print_figure("proc_rtt_unix_p50", unix_p50, "us");
  print_figure("proc_throughput_shm", throughput, "msg/s");
  print_figure("proc_throughput_unix", unix_throughput, "msg/s");
  print_figure("proc_throughput_shm_ratio", throughput / unix_throughput, "x");
  print_figure("proc_rtt_p50", p50, "us");
  print_figure("proc_rtt_p99", percentile(small, 0.99), "us");
  print_figure("proc_rtt_1mib_p50", percentile(large, 0.5), "us");
  print_figure("proc_rtt_256mib_p50", percentile(huge, 0.5), "us");
  print_figure("memcpy_256mib", memcpy_us, "us");
  print_figure("proc_rtt_256mib_ratio", percentile(huge, 0.5) / memcpy_us, "x");
  print_figure("bytes_copy_256mib", make_us, "us");
  print_figure("heap_copy_256mib", heap_us, "us");
  print_figure("bytes_copy_256mib_ratio", make_us / heap_us, "x");
  print_figure("socket_rtt_p50", socket_p50, "us");
  print_figure("proc_rtt_ratio", p50 / socket_p50, "x");
  // Both sides, every thread, per round trip (the warm-up tenth included, as in the socket's).
  const double calls = kCalls + kCalls / 10;
  print_figure("cpu_per_call_us", cpu_ns / calls / 1e3, "us");
  print_figure("socket_cpu_per_call_us", socket_cpu_ns / calls / 1e3, "us");
  print_figure("cpu_per_call_ratio", cpu_ns / socket_cpu_ns, "x");
  print_figure("idle_proc_cpu_pct", 100.0 * idle_ns / idle_wall_ns, "%");
  run_tls_rtt();
  return 0;
}

}  // namespace baton::bench
