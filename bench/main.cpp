// baton-bench NAME: runs one benchmark and prints `name value unit` lines, each figure next to
// a baseline measured in the same run.

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <string>
#include <string_view>

#include "baton/host/runtime.hpp"
#include "figures.hpp"
#include "host/runtime_impl.hpp"

namespace {

int run_inproc() {
  using namespace baton::bench;
  constexpr std::size_t kRtt = 20000;
  constexpr std::size_t kMessages = 2000000;
  const InprocFigures ours = baton_inproc(kRtt, kMessages);
  const InprocFigures caf = caf_inproc(kRtt, kMessages);
  print_figure("inproc_rtt_p50", ours.rtt_p50_us, "us");
  print_figure("inproc_throughput", ours.throughput_msgs, "msg/s");
  print_figure("caf_inproc_rtt_p50", caf.rtt_p50_us, "us");
  print_figure("caf_inproc_throughput", caf.throughput_msgs, "msg/s");
  print_figure("inproc_rtt_ratio", ours.rtt_p50_us / caf.rtt_p50_us, "x");
  print_figure("inproc_throughput_ratio", ours.throughput_msgs / caf.throughput_msgs, "x");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // The `spawn` baseline starts this executable and wants it gone at once.
  if (std::getenv("BATON_BENCH_EXIT_AT_ONCE") != nullptr) return 0;
  // The TLS round trips of `rtt` start it as an echo server of their own.
  if (const char* name = std::getenv("BATON_BENCH_ECHO_SERVER")) {
    baton::bench::run_echo_server(name);
  }
  if (const char* port = std::getenv("BATON_BENCH_TCP_ECHO")) {
    baton::bench::run_tcp_echo_server(std::atoi(port));
  }
  // `hosts` shares a job's credentials with the agents it starts.
  static std::string credentials;
  if (argc > 1 && std::string_view(argv[1]) == "hosts" && std::getenv("BATON_PROC") == nullptr &&
      std::getenv("BATON_CREDENTIALS") == nullptr) {
    credentials = (std::filesystem::temp_directory_path() /
                   ("baton-bench-credentials-" + std::to_string(::getpid())))
                      .string();
    baton::internal::make_credentials(credentials);
    ::setenv("BATON_CREDENTIALS", credentials.c_str(), 1);
  }
  // The `failure` baselines start it and want it idle until they kill it.
  if (std::getenv("BATON_BENCH_PAUSE") != nullptr) {
    for (;;) ::pause();
  }
  baton::RuntimeOptions options;
  options.supervise = [](const baton::MeshFailure&) { return true; };  // `failure` kills workers
  baton::Runtime rt(argc, argv, options);  // worker processes serve here
  const std::string_view which = argc > 1 ? argv[1] : "";
  try {
    if (which == "inproc") return run_inproc();
    if (which == "rtt") return baton::bench::run_rtt();
    if (which == "calls") return baton::bench::run_calls();
    if (which == "throughput") return baton::bench::run_throughput();
    if (which == "tls") {  // the TLS part of `rtt` alone
      baton::bench::run_tls_rtt();
      return 0;
    }
    if (which == "cast") return baton::bench::run_cast();
    if (which == "spawn") return baton::bench::run_spawn();
    if (which == "failure") return baton::bench::run_failure();
    if (which == "rdma") return baton::bench::run_rdma();
    if (which == "allreduce") return baton::bench::run_allreduce();
    if (which == "ddp") return baton::bench::run_ddp();
    if (which == "scale") return baton::bench::run_scale(rt);
    if (which == "store") return baton::bench::run_store();
    if (which == "hosts") {
      const int rc = baton::bench::run_hosts();
      std::filesystem::remove_all(credentials);
      return rc;
    }
    if (which == "all") {
      return run_inproc() | baton::bench::run_rtt() | baton::bench::run_cast() |
             baton::bench::run_spawn() | baton::bench::run_failure() | baton::bench::run_rdma() |
             baton::bench::run_allreduce();
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "baton-bench: %s\n", e.what());
    return 1;
  }
  std::fprintf(stderr,
               "usage: baton-bench "
               "inproc|rtt|calls|throughput|tls|cast|spawn|failure|rdma|allreduce|ddp|hosts|scale|"
               "store|all\n");
  return 2;
}
