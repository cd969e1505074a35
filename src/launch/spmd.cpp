// SPMD programs: one SpmdRank actor on every proc starts the program as a child of its proc
// (dying with it), with torchrun's environment, and waits for it on a thread of its own.

#include "baton/launch/spmd.hpp"

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>
#include <thread>

#include "baton/host/runtime.hpp"
#include "baton/mesh/mesh.hpp"
#include "host/hosts.hpp"

extern char** environ;

namespace baton {
namespace {

/// One rank's program and environment.
struct SpmdSpec {
  std::vector<std::string> argv;
  std::vector<std::string> env;  // added to (and overriding) the proc's own

  template <class Ar>
  void serialize(Ar& ar) {
    ar(argv, env);
  }
};

/// "exited with status 3", "was killed by signal 9 (Killed)".
std::string how_it_ended(int status) {
  if (WIFSIGNALED(status)) {
    return "was killed by signal " + std::to_string(WTERMSIG(status)) + " (" +
           strsignal(WTERMSIG(status)) + ")";
  }
  return "exited with status " + std::to_string(WEXITSTATUS(status));
}

class SpmdRank : public Actor {
 public:
  /// A TCP port free on this host now (for MASTER_PORT, asked of rank 0).
  int free_port() {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    socklen_t len = sizeof a;
    int port = 0;
    if (fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
      port = ntohs(a.sin_port);
    }
    if (fd >= 0) ::close(fd);
    if (port == 0) throw std::runtime_error("no free TCP port on this host");
    return port;
  }

  /// Runs the program to its end; its exit status (128 + signal if killed).
  Task<int> run(SpmdSpec spec) {
    std::vector<std::string> env;
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string entry(*e);
      bool replaced = false;
      for (const auto& mine : spec.env) {
        replaced =
            replaced || entry.substr(0, entry.find('=') + 1) == mine.substr(0, mine.find('=') + 1);
      }
      // The worker's own bootstrap stays behind: the program is not a baton proc.
      if (!replaced && !entry.starts_with("BATON_")) env.push_back(entry);
    }
    env.insert(env.end(), spec.env.begin(), spec.env.end());
    std::vector<char*> argv;
    std::vector<char*> envp;
    argv.reserve(spec.argv.size() + 1);
    envp.reserve(env.size() + 1);
    for (auto& a : spec.argv) argv.push_back(a.data());
    for (auto& e : env) envp.push_back(e.data());
    argv.push_back(nullptr);
    envp.push_back(nullptr);
    int ready[2];
    if (::pipe2(ready, O_CLOEXEC) != 0) throw std::runtime_error("cannot make a pipe");
    const pid_t parent = ::getpid();
    const pid_t pid = ::fork();
    if (pid == 0) {
      // The child: it dies with its proc; stdout and stderr are the proc's (forwarded).
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(127);
      ::execvpe(argv[0], argv.data(), envp.data());
      const int err = errno;
      (void)::write(ready[1], &err, sizeof err);
      ::_exit(127);
    }
    ::close(ready[1]);
    if (pid < 0) {
      ::close(ready[0]);
      throw std::runtime_error(std::string("cannot fork: ") + std::strerror(errno));
    }
    int err = 0;
    const bool failed = ::read(ready[0], &err, sizeof err) == static_cast<ssize_t>(sizeof err);
    ::close(ready[0]);
    if (failed) {
      ::waitpid(pid, nullptr, 0);
      throw std::runtime_error("cannot run " + spec.argv[0] + ": " + std::strerror(err) +
                               " (is it installed, and on PATH on this host?)");
    }
    Promise<int> ended;
    std::thread([pid, ended] {
      int status = 0;
      while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
      ended.set_value(status);
    }).detach();
    const int status = co_await ended.get_future();
    if (status != 0) self<SpmdRank>().send(&SpmdRank::failed, spec.argv[0], status);
    co_return exit_code(status);
  }

  /// A rank that ended badly fails this actor: its owner hears of it through supervision.
  void failed(const std::string& program, int status) {
    throw std::runtime_error("the SPMD program " + program + " " + how_it_ended(status) +
                             " on rank " + std::to_string(context().rank));
  }

  static constexpr auto endpoints =
      baton::endpoints<&SpmdRank::free_port, &SpmdRank::run, &SpmdRank::failed>();

 private:
  static int exit_code(int status) {
    return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
  }
};

}  // namespace

Future<std::vector<int>> run_spmd(const ProcMesh& procs, const SpmdOptions& options) {
  if (options.argv.empty()) throw UsageError("run_spmd: no program given (SpmdOptions::argv)");
  auto ranks = procs.spawn<SpmdRank>("spmd-" + std::to_string(std::random_device{}()));
  const std::size_t world = ranks.size();
  const Shape& shape = procs.shape();
  std::size_t per_host = world;
  for (std::size_t d = 0; d < shape.num_dims(); ++d) {
    if (shape.labels()[d] == "hosts") per_host = world / shape.size(shape.labels()[d]);
  }
  // Rank 0's host, as the others reach it.
  std::vector<std::string> addresses;
  addresses.reserve(world);
  for (std::size_t r = 0; r < world; ++r) {
    addresses.push_back(detail::address_text(ranks.at(r).id().proc));
  }
  const std::string master = internal::reachable_hosts(addresses).front();
  const int port =
      options.master_port != 0 ? options.master_port : ranks.at(0).call(&SpmdRank::free_port).get();
  std::vector<Future<int>> parts;
  parts.reserve(world);
  for (std::size_t r = 0; r < world; ++r) {
    SpmdSpec spec{options.argv, options.env};
    spec.env.insert(spec.env.end(),
                    {"RANK=" + std::to_string(r), "WORLD_SIZE=" + std::to_string(world),
                     "LOCAL_RANK=" + std::to_string(r % per_host),
                     "LOCAL_WORLD_SIZE=" + std::to_string(per_host), "MASTER_ADDR=" + master,
                     "MASTER_PORT=" + std::to_string(port)});
    parts.push_back(ranks.at(r).call(&SpmdRank::run, spec));
  }
  return detail::gather<int>(Shape::of({{"ranks", world}}), std::move(parts))
      .then([](const ValueMesh<int>& codes) { return codes.values(); });
}

}  // namespace baton
