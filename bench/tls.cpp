// Part of `baton-bench rtt`: call round trips (64 bytes) from a proc to an actor in another
// process over TCP on the loopback, with TLS and the job's secret, and plain, in the same run;
// the ratio is TLS's price, measured on one core and again wherever the scheduler puts them. Each
// echo server is this executable, started with BATON_BENCH_ECHO_SERVER set (see main.cpp).

#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "baton/baton.hpp"
#include "figures.hpp"

extern char** environ;

namespace baton::bench {
namespace {

using Clock = std::chrono::steady_clock;

class TcpEcho : public Actor {
 public:
  Bytes echo(const Bytes& b) { return b; }
  static constexpr auto endpoints = baton::endpoints<&TcpEcho::echo>();
};

double percentile(std::vector<double> v, double p) {
  const auto k = static_cast<std::size_t>(p * static_cast<double>(v.size() - 1));
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
  return v[k];
}

const char* env_or_empty(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : "";
}

/// Starts an echo server process for `options`; returns its pid and the address it serves.
std::pair<pid_t, std::string> start_server(const std::string& name,
                                           const net::LinkOptions& options) {
  std::vector<std::string> env_s;
  for (char** e = environ; *e != nullptr; ++e) env_s.emplace_back(*e);
  env_s.push_back("BATON_BENCH_ECHO_SERVER=" + name);
  env_s.push_back("BATON_BENCH_SECRET=" + options.secret);
  if (options.tls.enabled()) {
    env_s.push_back("BATON_BENCH_TLS_CERT=" + options.tls.cert_file);
    env_s.push_back("BATON_BENCH_TLS_KEY=" + options.tls.key_file);
    env_s.push_back("BATON_BENCH_TLS_CA=" + options.tls.ca_file);
  }
  std::vector<char*> envp;
  envp.reserve(env_s.size() + 1);
  for (auto& e : env_s) envp.push_back(e.data());
  envp.push_back(nullptr);
  int out[2];
  if (::pipe(out) != 0) throw std::runtime_error("pipe failed");
  posix_spawn_file_actions_t actions;
  ::posix_spawn_file_actions_init(&actions);
  ::posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
  std::string self = "baton-bench-echo";
  char* argv[] = {self.data(), nullptr};
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, "/proc/self/exe", &actions, nullptr, argv, envp.data());
  ::posix_spawn_file_actions_destroy(&actions);
  ::close(out[1]);
  if (rc != 0) throw std::runtime_error("cannot start the echo server");
  std::string address;
  char c = 0;
  while (::read(out[0], &c, 1) == 1 && c != '\n') address += c;
  ::close(out[0]);
  if (address.empty()) throw std::runtime_error("the echo server said nothing");
  return {pid, address};
}

/// An echo server and a proc linked to it, for one kind of link.
struct Echoing {
  Echoing(const std::string& mode, const net::LinkOptions& options)
      : name("echo-" + mode),
        server(start_server(name, options)),
        client(ProcOptions{.name = "bench-" + mode, .threads = 1, .link = options}),
        echo(ActorId{ProcId{name}, "echo", 0}) {
    client.connect(ProcId{name}, Address::parse(server.second));
  }
  ~Echoing() {
    ::kill(server.first, SIGKILL);
    ::waitpid(server.first, nullptr, 0);
  }
  Echoing(const Echoing&) = delete;
  Echoing& operator=(const Echoing&) = delete;

  /// `n` round trips of 64 bytes, each in microseconds.
  void round_trips(int n, std::vector<double>& us) {
    const Bytes payload = Bytes::copy(std::string(64, 'p'));
    for (int i = 0; i < n; ++i) {
      const auto t0 = Clock::now();
      const Bytes back = echo.call(&TcpEcho::echo, payload).get();
      const auto t1 = Clock::now();
      if (back.size() != payload.size()) throw std::runtime_error("bad echo");
      us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    }
  }

  std::string name;
  std::pair<pid_t, std::string> server;
  Proc client;
  ActorRef<TcpEcho> echo;
};

}  // namespace

void run_echo_server(const char* name) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  net::LinkOptions options;
  options.secret = env_or_empty("BATON_BENCH_SECRET");
  options.tls =
      net::TlsOptions{env_or_empty("BATON_BENCH_TLS_CERT"), env_or_empty("BATON_BENCH_TLS_KEY"),
                      env_or_empty("BATON_BENCH_TLS_CA")};
  Proc proc(ProcOptions{.name = name, .threads = 1, .link = options});
  const Address bound = proc.serve(Address::parse("tcp://127.0.0.1:0"));
  proc.spawn<TcpEcho>("echo");
  std::printf("%s\n", bound.to_string().c_str());
  std::fflush(stdout);
  for (;;) ::pause();  // until the benchmark kills this process
}

namespace {

/// Median round trips over TCP and over TLS, alternating in short rounds so both see the same
/// machine; the first round of each warms up.
std::pair<double, double> alternating_p50(const net::LinkOptions& plain,
                                          const net::LinkOptions& tls) {
  Echoing tcp("tcp", plain);
  Echoing secure("tls", tls);
  constexpr int kRounds = 20;
  constexpr int kTrips = 1000;
  std::vector<double> tcp_us;
  std::vector<double> tls_us;
  for (int r = 0; r <= kRounds; ++r) {
    std::vector<double> warm;
    tcp.round_trips(kTrips, r == 0 ? warm : tcp_us);
    secure.round_trips(kTrips, r == 0 ? warm : tls_us);
  }
  return {percentile(tcp_us, 0.5), percentile(tls_us, 0.5)};
}

}  // namespace

void run_tls_rtt() {
  std::string dir = (std::filesystem::temp_directory_path() / "baton-bench-XXXXXX").string();
  if (::mkdtemp(dir.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  net::LinkOptions plain;
  net::LinkOptions tls;
  tls.secret = net::new_job_secret();
  tls.tls = net::make_job_certificates(dir);
  // First with the client and both servers on one core. Where the threads of a ping-pong run is
  // otherwise the scheduler's choice, and on a small idle machine it does not choose alike for
  // two pairs that make the same system calls: one pair's wake-ups stay on one core (about
  // 12 us a round trip here), the other's cross cores (about 70 us), and which pair gets which
  // does not follow the transport (with a busy loop on the other core, both stay on one core).
  // On one core both pay the same hand-offs, and the ratio is what TLS itself costs.
  cpu_set_t all;
  CPU_ZERO(&all);
  ::sched_getaffinity(0, sizeof all, &all);
  int first = 0;
  while (first < CPU_SETSIZE && !CPU_ISSET(first, &all)) ++first;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(first, &one);
  ::sched_setaffinity(0, sizeof one, &one);  // this thread, and the threads and servers it starts
  const auto [tcp_one, tls_one] = alternating_p50(plain, tls);
  ::sched_setaffinity(0, sizeof all, &all);
  const auto [tcp_free, tls_free] = alternating_p50(plain, tls);
  std::filesystem::remove_all(dir);
  print_figure("proc_rtt_tcp_p50", tcp_one, "us");
  print_figure("proc_rtt_tls_p50", tls_one, "us");
  print_figure("tls_rtt_ratio", tls_one / tcp_one, "x");
  print_figure("proc_rtt_tcp_any_core_p50", tcp_free, "us");
  print_figure("proc_rtt_tls_any_core_p50", tls_free, "us");
  print_figure("tls_rtt_any_core_ratio", tls_free / tcp_free, "x");
}

}  // namespace baton::bench
