// `baton-bench cast`: one call on a whole mesh of N worker procs (the cast tree down, replies
// gathered on the way up) against N direct calls issued together and then awaited, in the same
// run; then the same call streamed (each reply read as it comes) against the direct calls, in
// rounds of their own (a stream's members also tell their parent when they are done, and those
// messages, still coming as the stream's last item is read, would land in the next round), with
// the calling thread's CPU time for each way (what the cast's bookkeeping costs the caller); and
// `baton-bench spawn`: spawn_procs with 16 procs to an actor mesh answering a call, against
// starting 16 copies of this executable that exit at once.

#include <dirent.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "baton/baton.hpp"
#include "figures.hpp"

extern char** environ;

namespace baton::bench {
namespace {

using Clock = std::chrono::steady_clock;

/// The calling thread's CPU time so far, in microseconds.
double thread_cpu_us() {
  timespec t{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) * 1e6 + static_cast<double>(t.tv_nsec) / 1e3;
}

/// Binds every thread of this process to `cpu` (threads started later inherit it from their
/// starter): the number bound.
int bind_process(int cpu) {
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  int bound = 0;
  if (DIR* tasks = ::opendir("/proc/self/task")) {
    while (const dirent* e = ::readdir(tasks)) {
      const int tid = std::atoi(e->d_name);
      if (tid > 0 && ::sched_setaffinity(tid, sizeof one, &one) == 0) ++bound;
    }
    ::closedir(tasks);
  }
  if (bound == 0) {
    throw std::runtime_error("cannot bind this process to cpu " + std::to_string(cpu) +
                             " (this machine's cpus: 0 to " +
                             std::to_string(std::thread::hardware_concurrency() - 1) + ")");
  }
  return bound;
}

class CastMember : public Actor {
 public:
  int ping(int x) { return x + 1; }
  int bind(int cpu) { return bind_process(cpu); }
  static constexpr auto endpoints = baton::endpoints<&CastMember::ping, &CastMember::bind>();
};

/// BATON_BENCH_CAST_CPUS=C:M1,M2,...: the cpu this process runs on, then each member's, the
/// list repeated over the members (unset: where the scheduler puts them).
struct Placement {
  int caller = -1;
  std::vector<int> members;
};
Placement placement() {
  Placement p;
  const char* text = std::getenv("BATON_BENCH_CAST_CPUS");
  if (text == nullptr) return p;
  const std::string all(text);
  const auto bad = [&] {
    return std::runtime_error("BATON_BENCH_CAST_CPUS=" + all +
                              " is not CALLER:MEMBER,MEMBER,... (cpu numbers, e.g. 0:1,1,0,1)");
  };
  const auto colon = all.find(':');
  if (colon == std::string::npos) throw bad();
  const auto number = [&](const std::string& s) {
    if (s.empty() || s.size() > 4 || s.find_first_not_of("0123456789") != std::string::npos) {
      throw bad();
    }
    return std::stoi(s);
  };
  p.caller = number(all.substr(0, colon));
  for (std::size_t at = colon + 1; at <= all.size();) {
    const auto comma = std::min(all.find(',', at), all.size());
    p.members.push_back(number(all.substr(at, comma - at)));
    at = comma + 1;
  }
  return p;
}

}  // namespace

int run_cast() {
  // BATON_BENCH_CAST_SIZES=4,16 measures only those sizes (4, 16 and 64 by default).
  std::vector<std::size_t> sizes{4, 16, 64};
  if (const char* only = std::getenv("BATON_BENCH_CAST_SIZES")) {
    sizes.clear();
    for (const char* at = only; *at != '\0';) {
      char* end = nullptr;
      const unsigned long n = std::strtoul(at, &end, 10);
      if (end == at || n == 0) {
        throw std::runtime_error("BATON_BENCH_CAST_SIZES: not a list of sizes: " +
                                 std::string(only));
      }
      sizes.push_back(n);
      at = *end == ',' ? end + 1 : end;
    }
  }
  print_remote_wake_figures();
  const Placement where = placement();
  if (where.caller >= 0) bind_process(where.caller);
  for (const std::size_t n : sizes) {
    auto procs = this_host().spawn_procs({{"procs", n}});
    auto mesh = procs.spawn<CastMember>("pinger");
    for (std::size_t r = 0; r < n && !where.members.empty(); ++r) {
      mesh.at(r).call(&CastMember::bind, where.members[r % where.members.size()]).get();
    }
    // Enough rounds for a median steady to a percent or two: a round takes 0.1 ms at 4 members.
    const int rounds = n >= 64 ? 300 : 1000;
    double last_unicast_cpu = 0;
    // N direct calls issued together and then awaited: their time, in ms.
    const auto unicasts = [&](int i) {
      const auto t0 = Clock::now();
      const double c0 = thread_cpu_us();
      std::vector<Future<int>> each;
      each.reserve(n);
      for (std::size_t r = 0; r < n; ++r) each.push_back(mesh.at(r).call(&CastMember::ping, i));
      for (auto& f : each) {
        if (std::move(f).get() != i + 1) throw std::runtime_error("bad unicast reply");
      }
      last_unicast_cpu = thread_cpu_us() - c0;
      return ms_since(t0);
    };
    std::vector<double> cast_ms;
    std::vector<double> unicast_ms;
    std::vector<double> cast_cpu;  // the calling thread's CPU time, us
    std::vector<double> unicast_cpu;
    for (int i = 0; i < rounds + rounds / 10; ++i) {
      // Interleaved, so both see the same machine state, and each goes first every other
      // round: the members the one before woke may still be awake when the next one sends.
      const bool unicasts_first = i % 2 == 1;
      const double u_first = unicasts_first ? unicasts(i) : 0;
      const auto t0 = Clock::now();
      const double c0 = thread_cpu_us();
      ValueMesh<int> all = mesh.call(&CastMember::ping, i).get();
      const double c = ms_since(t0);
      const double c_cpu = thread_cpu_us() - c0;
      if (all.size() != n || all[n - 1] != i + 1) throw std::runtime_error("bad cast reply");
      const double u = unicasts_first ? u_first : unicasts(i);
      if (i >= rounds / 10) {
        cast_ms.push_back(c);
        unicast_ms.push_back(u);
        cast_cpu.push_back(c_cpu);
        unicast_cpu.push_back(last_unicast_cpu);
      }
    }
    std::vector<double> stream_ms;
    std::vector<double> stream_unicast_ms;
    for (int i = 0; i < rounds + rounds / 10; ++i) {
      const auto t0 = Clock::now();
      auto stream = mesh.stream(&CastMember::ping, i);
      std::size_t items = 0;
      while (auto item = stream.next()) {
        if (item->second != i + 1) throw std::runtime_error("bad streamed reply");
        ++items;
      }
      const double s = ms_since(t0);
      if (items != n) throw std::runtime_error("a stream ended short");
      const double u = unicasts(i);
      if (i >= rounds / 10) {
        stream_ms.push_back(s);
        stream_unicast_ms.push_back(u);
      }
    }
    const double cast = median(cast_ms);
    const double unicast = median(unicast_ms);
    print_figure("cast_gather_p50_n" + std::to_string(n), cast, "ms");
    print_figure("unicast_gather_p50_n" + std::to_string(n), unicast, "ms");
    print_figure("cast_ratio_n" + std::to_string(n), cast / unicast, "x");
    print_figure("cast_caller_cpu_us_n" + std::to_string(n), median(cast_cpu), "us");
    print_figure("unicast_caller_cpu_us_n" + std::to_string(n), median(unicast_cpu), "us");
    print_figure("stream_ratio_n" + std::to_string(n),
                 median(stream_ms) / median(stream_unicast_ms), "x");
    print_figure("cast_gather_per_member_us_n" + std::to_string(n),
                 cast * 1e3 / static_cast<double>(n), "us");
    procs.stop().get();
  }
  return 0;
}

int run_spawn() {
  constexpr std::size_t kProcs = 16;
  constexpr int kRounds = 7;
  std::vector<double> ours;
  std::vector<double> raw;
  for (int i = 0; i < kRounds; ++i) {
    auto t0 = Clock::now();
    auto procs = this_host().spawn_procs({{"procs", kProcs}});
    auto mesh = procs.spawn<CastMember>("pinger");
    if (mesh.call(&CastMember::ping, 1).get().size() != kProcs)
      throw std::runtime_error("bad reply");
    ours.push_back(ms_since(t0));
    procs.stop().get();

    // The floor: start 16 copies of this executable that exit as soon as main() begins.
    std::vector<std::string> env_s;
    for (char** e = environ; *e != nullptr; ++e) env_s.emplace_back(*e);
    env_s.emplace_back("BATON_BENCH_EXIT_AT_ONCE=1");
    std::vector<char*> envp;
    envp.reserve(env_s.size() + 1);
    for (auto& e : env_s) envp.push_back(e.data());
    envp.push_back(nullptr);
    std::string self = "baton-bench";
    char* argv[] = {self.data(), nullptr};
    t0 = Clock::now();
    std::vector<pid_t> pids;
    for (std::size_t p = 0; p < kProcs; ++p) {
      pid_t pid = -1;
      if (::posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, argv, envp.data()) != 0) {
        throw std::runtime_error("posix_spawn failed");
      }
      pids.push_back(pid);
    }
    for (pid_t pid : pids) ::waitpid(pid, nullptr, 0);
    raw.push_back(ms_since(t0));
  }
  const double spawn = median(ours);
  const double floor = median(raw);
  print_figure("spawn_procs16_p50", spawn, "ms");
  print_figure("exec16_p50", floor, "ms");
  print_figure("spawn_ratio", spawn / floor, "x");
  return 0;
}

}  // namespace baton::bench
