#pragma once

// Figures the benchmarks print, one per line: `name value unit`.

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <string_view>
#include <vector>

namespace baton {
class Runtime;
class ProcMesh;
namespace store {
class Store;
}  // namespace store
}  // namespace baton

namespace baton::bench {

struct InprocFigures {
  double rtt_p50_us;       // median request/reply round trip between two actors in one process
  double throughput_msgs;  // messages per second, one sender actor to one receiver actor
};

/// baton: two actors in one Proc.
InprocFigures baton_inproc(std::size_t rtt_iterations, std::size_t throughput_messages);
/// The C++ Actor Framework doing the same, in the same run.
InprocFigures caf_inproc(std::size_t rtt_iterations, std::size_t throughput_messages);

/// `baton-bench rtt`: cross-process call_one round trips against a raw socket ping-pong.
int run_rtt();
/// The call loop of `rtt` alone, for profiling (perf, strace, uprobes): BATON_BENCH_CALLS
/// (100000 by default) 64-byte calls to an actor in another proc of this host, no baseline.
int run_calls();
/// One-way sends to an actor in another proc of this host, three times (for profiling).
int run_throughput();
/// Part of `rtt`: a call's round trip over TCP with TLS against the same without it.
void run_tls_rtt();
/// The echo server `run_tls_rtt` starts (this executable with BATON_BENCH_ECHO_SERVER set).
[[noreturn]] void run_echo_server(const char* name);
/// `baton-bench cast`: a call on a whole mesh against N direct calls, for N = 4, 16, 64.
int run_cast();
/// Part of `cast`: a wake-up of a sleeping process on another cpu, after that cpu idled 20 us
/// and 1 ms (what the machine charges the wake-ups that casts and calls make).
void print_remote_wake_figures();
/// `baton-bench spawn`: spawn_procs(16) to an answering actor mesh, against bare process starts.
int run_spawn();
/// `baton-bench failure`: kill to failed future, and stop of 16 procs, against the kernel's floor.
int run_failure();
/// `baton-bench rdma`: RdmaBuffer reads from another proc against a single-thread memcpy.
int run_rdma();
/// `baton-bench allreduce`: 64 MiB over 4 procs through baton, against Gloo set up directly.
int run_allreduce();
/// `baton-bench ddp`: ddp_train's samples/s per trainer against one plain libtorch process.
int run_ddp();
/// `baton-bench scale`: a call and a reduce over 10^3 .. 10^6 actors in simulated procs.
int run_scale(Runtime& rt);
int run_store();
/// Part of `store`, where there is a GPU: the store's device-memory paths against the GPU's
/// own copies.
void run_store_device(const ProcMesh& procs, const store::Store& s);
/// `baton-bench hosts`: three namespace hosts against this host and raw TCP (needs root).
int run_hosts();
/// The TCP echo server `run_hosts` starts in a namespace (BATON_BENCH_TCP_ECHO=port).
[[noreturn]] void run_tcp_echo_server(int port);

/// Milliseconds and microseconds since `t0` (a steady_clock time).
inline double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}
inline double us_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
}

/// Seconds since `t0` (a steady_clock time).
inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

/// `bytes` moved in `seconds`, in GB/s.
inline double gbps(std::size_t bytes, double seconds) {
  return static_cast<double>(bytes) / seconds / 1e9;
}

/// The best of `reps` runs of `f`, as GB/s for `bytes` a run.
template <class F>
double best_gbps(std::size_t bytes, int reps, F f) {
  double best = 1e300;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    best = std::min(best, seconds_since(t0));
  }
  return gbps(bytes, best);
}

/// The median of `v` (which it reorders).
inline double median(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

inline void print_figure(std::string_view name, double value, std::string_view unit) {
  std::printf("%.*s %.3f %.*s\n", static_cast<int>(name.size()), name.data(), value,
              static_cast<int>(unit.size()), unit.data());
  std::fflush(stdout);
}

}  // namespace baton::bench
