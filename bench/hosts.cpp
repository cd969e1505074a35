// `baton-bench hosts`: three hosts with addresses of their own (network namespaces on this
// machine, each with a baton-host; needs root), against the same figures on this host and a raw
// TCP ping-pong between the same namespaces, in the same run.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "baton/baton.hpp"
#include "figures.hpp"
#include "host/netns.test.hpp"
#include "host/runtime_impl.hpp"

namespace baton::bench {
namespace {

using Clock = std::chrono::steady_clock;

class HostEcho : public Actor {
 public:
  int ping(int x) { return x + 1; }
  static constexpr auto endpoints = baton::endpoints<&HostEcho::ping>();
};

/// A process run inside a namespace (`ip netns exec`), killed with the object.
struct InNamespace {
  test::SelfChild child;
  FILE* out = nullptr;
  std::string first_line;
  InNamespace(const std::string& ns, const std::string& program, std::vector<std::string> args,
              std::vector<std::string> env) {
    std::vector<std::string> words{"netns", "exec", ns, program};
    words.insert(words.end(), args.begin(), args.end());
    child = test::start_self_as(test::ip_program(), "ip", words, std::move(env), STDOUT_FILENO);
    out = ::fdopen(child.from, "r");
    char line[256] = {};
    if (std::fgets(line, sizeof line, out) == nullptr) {
      throw std::runtime_error(program + " in " + ns + " said nothing");
    }
    first_line = line;
  }
  ~InNamespace() {
    ::kill(child.pid, SIGTERM);
    ::waitpid(child.pid, nullptr, 0);
    if (out != nullptr) std::fclose(out);
  }
};

/// Median round trip of one byte over a plain TCP connection to `host:port`.
double tcp_pingpong_us(const std::string& host, int port, int rounds) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<std::uint16_t>(port));
  ::inet_pton(AF_INET, host.c_str(), &to.sin_addr);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to) != 0) {
    ::close(fd);
    throw std::runtime_error("cannot reach the echo server at " + host);
  }
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  std::vector<double> us;
  char b = 'x';
  for (int i = 0; i < rounds; ++i) {
    const auto t0 = Clock::now();
    if (::write(fd, &b, 1) != 1 || ::read(fd, &b, 1) != 1) break;
    us.push_back(us_since(t0));
  }
  ::close(fd);
  if (us.empty()) throw std::runtime_error("the echo server hung up");
  return median(us);
}

/// Median call_one round trip to member `rank`.
double call_us(const ActorMesh<HostEcho>& mesh, std::size_t rank, int rounds) {
  std::vector<double> us;
  const ActorRef<HostEcho> member = mesh.at(rank);
  for (int i = 0; i < rounds; ++i) {
    const auto t0 = Clock::now();
    if (member.call(&HostEcho::ping, i).get() != i + 1) throw std::runtime_error("bad reply");
    us.push_back(us_since(t0));
  }
  return median(us);
}

/// Median of a call on the whole mesh, replies gathered.
double cast_ms(const ActorMesh<HostEcho>& mesh, int rounds) {
  std::vector<double> ms;
  for (int i = 0; i < rounds; ++i) {
    const auto t0 = Clock::now();
    if (mesh.call(&HostEcho::ping, i).get().size() != mesh.size()) throw std::runtime_error("bad");
    ms.push_back(us_since(t0) / 1000);
  }
  return median(ms);
}

}  // namespace

[[noreturn]] void run_tcp_echo_server(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in at{};
  at.sin_family = AF_INET;
  at.sin_port = htons(static_cast<std::uint16_t>(port));
  if (::bind(fd, reinterpret_cast<sockaddr*>(&at), sizeof at) != 0 || ::listen(fd, 4) != 0) {
    std::_Exit(1);
  }
  std::printf("echo ready\n");
  std::fflush(stdout);
  for (;;) {
    const int c = ::accept4(fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (c < 0) continue;
    ::setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    char b = 0;
    while (::read(c, &b, 1) == 1) {
      if (::write(c, &b, 1) != 1) break;
    }
    ::close(c);
  }
}

int run_hosts() {
  constexpr int kRounds = 2000;
  constexpr int kCasts = 200;
  if (::geteuid() != 0) {
    std::fprintf(stderr, "baton-bench hosts: needs root, to make network namespaces\n");
    return 1;
  }
  test::NetHosts net(3);
  char self[4096] = {};
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) throw std::runtime_error("cannot find this program");
  const std::string bench(self, static_cast<std::size_t>(n));
  const std::string agent_bin =
      (std::filesystem::path(bench).parent_path() / "baton-host").string();
  std::vector<std::unique_ptr<InNamespace>> agents;
  std::vector<std::string> addresses;
  std::vector<std::filesystem::path> caches;
  for (std::size_t h = 0; h < 3; ++h) {
    auto env = test::environment();
    auto cache = std::filesystem::temp_directory_path() /
                 ("baton-bench-cache-" + std::to_string(::getpid()) + "-" + std::to_string(h));
    std::filesystem::remove_all(cache);
    caches.push_back(cache);
    agents.push_back(std::make_unique<InNamespace>(
        net.ns(h), agent_bin,
        std::vector<std::string>{"--advertise", net.address(h), "--port", "7070", "--cache",
                                 cache.string()},
        env));
    addresses.push_back(net.address(h) + ":7070");
  }
  auto echo_env = test::environment();
  echo_env.push_back("BATON_BENCH_TCP_ECHO=7071");
  InNamespace echo(net.ns(1), bench, {}, echo_env);

  // This host: 12 procs.
  auto local = this_host().spawn_procs({{"procs", 12}});
  auto here = local.spawn<HostEcho>("here");
  const double rtt_here = call_us(here, 5, kRounds);
  const double cast_here = cast_ms(here, kCasts);
  local.stop().get();

  // Three hosts, four procs each: the first spawn ships the program, later ones find it cached.
  HostMesh hosts = job::attach(addresses);
  auto t0 = Clock::now();
  ProcMesh procs = hosts.spawn_procs({{"procs", 4}});
  auto there = procs.spawn<HostEcho>("there");
  (void)there.call(&HostEcho::ping, 0).get();
  const double spawn_cold = us_since(t0) / 1000;
  std::vector<double> warm;
  for (int i = 0; i < 5; ++i) {
    t0 = Clock::now();
    ProcMesh more = hosts.spawn_procs({{"procs", 4}});
    (void)more.spawn<HostEcho>("more").call(&HostEcho::ping, 0).get();
    warm.push_back(us_since(t0) / 1000);
    more.stop().get();
  }
  const double rtt_there = call_us(there, 5, kRounds);  // a proc on host 1
  const double cast_there = cast_ms(there, kCasts);
  const double tcp = tcp_pingpong_us(net.address(1), 7071, kRounds);
  procs.stop().get();

  print_figure("proc_rtt_samehost_p50", rtt_here, "us");
  print_figure("proc_rtt_crosshost_p50", rtt_there, "us");
  print_figure("tcp_pingpong_crosshost_p50", tcp, "us");
  print_figure("proc_rtt_crosshost_ratio_tcp", rtt_there / tcp, "x");
  print_figure("cast_gather_p50_samehost_n12", cast_here, "ms");
  print_figure("cast_gather_p50_hosts3", cast_there, "ms");
  print_figure("cast_hosts3_ratio_samehost", cast_there / cast_here, "x");
  print_figure("spawn_hosts3_procs12_cold", spawn_cold, "ms");
  print_figure("spawn_hosts3_procs12_warm_p50", median(warm), "ms");
  agents.clear();
  for (const auto& c : caches) std::filesystem::remove_all(c);
  return 0;
}

}  // namespace baton::bench
