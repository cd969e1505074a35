// `baton-bench rtt`: controller call_one round trips to an actor in another process on this
// host, beside a raw unix-socket ping-pong between two processes measured in the same run.

#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <vector>

#include "baton/baton.hpp"
#include "figures.hpp"

namespace baton::bench {
namespace {

using Clock = std::chrono::steady_clock;

class Echo : public Actor {
 public:
  Bytes echo(const Bytes& b) { return b; }
  static constexpr auto endpoints = baton::endpoints<&Echo::echo>();
};

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
std::vector<double> socket_ping_pong(int n) {
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
  ::close(fds[0]);
  ::waitpid(pid, nullptr, 0);
  return us;
}

}  // namespace

int run_rtt() {
  const std::vector<double> socket = socket_ping_pong(20000);
  auto procs = this_host().spawn_procs({{"procs", 1}});
  auto echo = procs.spawn<Echo>("echo");
  const std::vector<double> small = time_calls(echo, 64, 20000);
  const std::vector<double> large = time_calls(echo, 1 << 20, 300);
  procs.stop().get();
  const double socket_p50 = percentile(socket, 0.5);
  const double p50 = percentile(small, 0.5);
  print_figure("proc_rtt_p50", p50, "us");
  print_figure("proc_rtt_p99", percentile(small, 0.99), "us");
  print_figure("proc_rtt_1mib_p50", percentile(large, 0.5), "us");
  print_figure("socket_rtt_p50", socket_p50, "us");
  print_figure("proc_rtt_ratio", p50 / socket_p50, "x");
  run_tls_rtt();
  return 0;
}

}  // namespace baton::bench
