// Part of `baton-bench rtt`: call round trips (64 bytes) from a proc to an actor in another
// process over TCP on the loopback, with TLS and the job's secret, and plain, in the same run;
// the ratio is TLS's price. Each echo server is this executable, started with
// BATON_BENCH_ECHO_SERVER set (see main.cpp).

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

std::vector<double> round_trips(const std::string& mode, const net::LinkOptions& options, int n) {
  const std::string name = "echo-" + mode;
  auto [pid, address] = start_server(name, options);
  std::vector<double> us;
  {
    Proc client(ProcOptions{.name = "bench-" + mode, .threads = 1, .link = options});
    client.connect(ProcId{name}, Address::parse(address));
    ActorRef<TcpEcho> echo(ActorId{ProcId{name}, "echo", 0});
    const Bytes payload = Bytes::copy(std::string(64, 'p'));
    us.reserve(static_cast<std::size_t>(n));
    for (int i = 0; i < n + n / 10; ++i) {
      const auto t0 = Clock::now();
      const Bytes back = echo.call(&TcpEcho::echo, payload).get();
      const auto t1 = Clock::now();
      if (back.size() != payload.size()) throw std::runtime_error("bad echo");
      if (i >= n / 10) us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    }
  }
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  return us;
}

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

void run_tls_rtt() {
  std::string dir = (std::filesystem::temp_directory_path() / "baton-bench-XXXXXX").string();
  if (::mkdtemp(dir.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  net::LinkOptions plain;
  net::LinkOptions tls;
  tls.secret = net::new_job_secret();
  tls.tls = net::make_job_certificates(dir);
  constexpr int kTrips = 20000;
  const double plain_p50 = percentile(round_trips("tcp", plain, kTrips), 0.5);
  const double tls_p50 = percentile(round_trips("tls", tls, kTrips), 0.5);
  std::filesystem::remove_all(dir);
  print_figure("proc_rtt_tcp_p50", plain_p50, "us");
  print_figure("proc_rtt_tls_p50", tls_p50, "us");
  print_figure("tls_rtt_ratio", tls_p50 / plain_p50, "x");
}

}  // namespace baton::bench
