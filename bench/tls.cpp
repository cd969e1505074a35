// Part of `baton-bench rtt`: round trips of a 64-byte envelope over a TCP link on the loopback,
// plain and with TLS (and the job's secret), in the same run; the ratio is TLS's price.

#include <stdlib.h>

#include <algorithm>

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "baton/net/link.hpp"
#include "figures.hpp"

namespace baton::bench {
namespace {

using Clock = std::chrono::steady_clock;

double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[static_cast<std::size_t>(p * static_cast<double>(v.size() - 1))];
}

/// Microseconds per round trip: the client sends, the server echoes, the client waits.
std::vector<double> link_round_trips(const net::LinkOptions& options, int n) {
  net::IoThread io;
  std::mutex mu;
  std::condition_variable cv;
  std::uint64_t got = 0;
  auto listener = net::Listener::listen(
      io, Address::parse("tcp://127.0.0.1:0"),
      [](const std::shared_ptr<net::Link>& link) {
        return net::LinkHandler{[weak = std::weak_ptr<net::Link>(link)](Envelope env) {
                                  if (auto l = weak.lock()) l->send(std::move(env));
                                },
                                nullptr};
      },
      options);
  auto client = net::Link::connect(io, listener->address(),
                                   net::LinkHandler{[&](Envelope) {
                                                      std::lock_guard lock(mu);
                                                      ++got;
                                                      cv.notify_one();
                                                    },
                                                    nullptr},
                                   options);
  Envelope env;
  env.sender = ActorId::parse("ctl/client[0]");
  env.dest = PortId{ActorId::parse("w.1/echo[0]"), 1};
  env.body = encode(std::string(64, 'x'));
  std::vector<double> us;
  us.reserve(static_cast<std::size_t>(n));
  for (int i = 0; i < n + n / 10; ++i) {
    const auto t0 = Clock::now();
    client->send(env);
    std::unique_lock lock(mu);
    if (!cv.wait_for(lock, std::chrono::seconds(10),
                     [&] { return got == static_cast<std::uint64_t>(i) + 1; })) {
      throw std::runtime_error("no echo within 10 s");
    }
    if (i >= n / 10) {
      us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    }
  }
  client->close_and_wait("done");
  return us;
}

}  // namespace

void run_tls_rtt() {
  std::string dir = (std::filesystem::temp_directory_path() / "baton-bench-XXXXXX").string();
  if (::mkdtemp(dir.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  net::LinkOptions plain;
  net::LinkOptions tls;
  tls.secret = net::new_job_secret();
  tls.tls = net::make_job_certificates(dir);
  constexpr int kTrips = 20000;
  const double plain_p50 = percentile(link_round_trips(plain, kTrips), 0.5);
  const double tls_p50 = percentile(link_round_trips(tls, kTrips), 0.5);
  std::filesystem::remove_all(dir);
  print_figure("link_rtt_tcp_p50", plain_p50, "us");
  print_figure("link_rtt_tls_p50", tls_p50, "us");
  print_figure("tls_rtt_ratio", tls_p50 / plain_p50, "x");
}

}  // namespace baton::bench
