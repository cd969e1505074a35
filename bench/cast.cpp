// `baton-bench cast`: one call on a whole mesh of N worker procs (the cast tree down, replies
// gathered on the way up) against N direct calls issued together and then awaited, in the same
// run; then the same call streamed (each reply read as it comes) against the direct calls, in
// rounds of their own (a stream's members also tell their parent when they are done, and those
// messages, still coming as the stream's last item is read, would land in the next round); and
// `baton-bench spawn`: spawn_procs with 16 procs to an actor mesh answering a call, against
// starting 16 copies of this executable that exit at once.

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "baton/baton.hpp"
#include "figures.hpp"

extern char** environ;

namespace baton::bench {
namespace {

using Clock = std::chrono::steady_clock;

class CastMember : public Actor {
 public:
  int ping(int x) { return x + 1; }
  static constexpr auto endpoints = baton::endpoints<&CastMember::ping>();
};

}  // namespace

int run_cast() {
  for (std::size_t n : {4u, 16u, 64u}) {
    auto procs = this_host().spawn_procs({{"procs", n}});
    auto mesh = procs.spawn<CastMember>("pinger");
    const int rounds = n >= 64 ? 100 : 200;
    // N direct calls issued together and then awaited: their time, in ms.
    const auto unicasts = [&](int i) {
      const auto t0 = Clock::now();
      std::vector<Future<int>> each;
      each.reserve(n);
      for (std::size_t r = 0; r < n; ++r) each.push_back(mesh.at(r).call(&CastMember::ping, i));
      for (auto& f : each) {
        if (std::move(f).get() != i + 1) throw std::runtime_error("bad unicast reply");
      }
      return ms_since(t0);
    };
    std::vector<double> cast_ms;
    std::vector<double> unicast_ms;
    for (int i = 0; i < rounds + rounds / 10; ++i) {
      // Interleaved, so both see the same machine state.
      const auto t0 = Clock::now();
      ValueMesh<int> all = mesh.call(&CastMember::ping, i).get();
      const double c = ms_since(t0);
      if (all.size() != n || all[n - 1] != i + 1) throw std::runtime_error("bad cast reply");
      const double u = unicasts(i);
      if (i >= rounds / 10) {
        cast_ms.push_back(c);
        unicast_ms.push_back(u);
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
