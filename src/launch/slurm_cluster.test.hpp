#pragma once

// A one-node Slurm cluster on loopback for tests, this host its node: munged, slurmctld and
// slurmd from Debian's munge and slurm-wlm, their files in a temporary directory, stopped by
// their pids. Needs root and those packages (make deps). The C++ tests start one in-process;
// the Python tests run slurm_cluster (slurm_cluster.tool.cpp), which holds one up for them.

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/syscall.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "host/hosts.test.hpp"
#include "launch/command.hpp"

namespace baton::test {

/// A TCP port nothing on this host listens on now.
inline int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    throw std::runtime_error("cannot find a free port");
  }
  ::close(fd);
  return ntohs(a.sin_port);
}

/// A daemon of the test's cluster: its output goes to `log`; stopped by its pid (SIGTERM, then
/// SIGKILL if it lingers).
class Daemon {
 public:
  Daemon(const std::vector<std::string>& argv, const std::filesystem::path& log) : log_(log) {
    posix_spawn_file_actions_t actions;
    ::posix_spawn_file_actions_init(&actions);
    ::posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
    ::posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log.c_str(),
                                       O_WRONLY | O_CREAT | O_APPEND, 0644);
    ::posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
    std::vector<std::string> words = argv;
    std::vector<char*> args;
    args.reserve(words.size() + 1);
    for (auto& w : words) args.push_back(w.data());
    args.push_back(nullptr);
    const int rc = ::posix_spawnp(&pid_, args[0], &actions, nullptr, args.data(), environ);
    ::posix_spawn_file_actions_destroy(&actions);
    if (rc != 0) {
      throw std::runtime_error("cannot run " + argv[0] + ": " + std::strerror(rc) +
                               " (make deps installs slurm-wlm and munge)");
    }
  }
  ~Daemon() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGTERM);
    const int fd = static_cast<int>(::syscall(SYS_pidfd_open, pid_, 0));
    pollfd p{fd, POLLIN, 0};
    if (fd < 0 || ::poll(&p, 1, 10000) != 1) ::kill(pid_, SIGKILL);
    if (fd >= 0) ::close(fd);
    ::waitpid(pid_, nullptr, 0);
  }
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;
  /// Whether it is still running.
  bool running() const { return ::waitpid(pid_, nullptr, WNOHANG) == 0; }
  std::string log() const { return internal::file_text(log_.string()); }

 private:
  pid_t pid_ = -1;
  std::filesystem::path log_;
};

/// Runs `argv` to its end: what it printed, or throws with its words.
inline std::string must(const std::vector<std::string>& argv) {
  const internal::Ran r = internal::run_command(argv, argv[0]);
  if (!internal::succeeded(r)) {
    throw std::runtime_error(argv[0] + " failed: " + r.err + r.out);
  }
  return r.out;
}

/// Retries `probe` until it holds, for at most `limit`: for daemons the test starts, which say
/// nothing when they are ready.
template <class P>
bool eventually(P probe, std::chrono::seconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!probe()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return true;
}

/// A one-node Slurm cluster on loopback, this host its node, with a partition "debug".
/// SLURM_CONF points at it while it runs, for srun, squeue and scancel.
class SlurmCluster {
 public:
  SlurmCluster() {
    std::filesystem::permissions(
        dir_.path, std::filesystem::perms::owner_all | std::filesystem::perms::group_read |
                       std::filesystem::perms::group_exec | std::filesystem::perms::others_read |
                       std::filesystem::perms::others_exec);
    // munged, as the munge user: its socket in a directory all may enter, its key in one
    // only it may.
    const auto munge = dir_.path / "munge";
    std::filesystem::create_directories(munge / "private");
    must({"mungekey", "--create", "--keyfile=" + (munge / "private" / "key").string()});
    must({"chown", "-R", "munge:munge", munge.string()});
    must({"chmod", "0755", munge.string()});
    must({"chmod", "0700", (munge / "private").string()});
    must({"chmod", "0400", (munge / "private" / "key").string()});
    socket_ = (munge / "socket").string();
    munged_ = std::make_unique<Daemon>(
        std::vector<std::string>{"setpriv", "--reuid=munge", "--regid=munge", "--clear-groups",
                                 "munged", "--foreground", "--socket=" + socket_,
                                 "--key-file=" + (munge / "private" / "key").string(),
                                 "--pid-file=" + (munge / "private" / "pid").string(),
                                 "--log-file=" + (munge / "private" / "log").string(),
                                 "--seed-file=" + (munge / "private" / "seed").string()},
        dir_.path / "munged.out");
    if (!eventually(
            [&] {
              return internal::succeeded(
                  internal::run_command({"munge", "--socket=" + socket_, "--no-input"}, "munge"));
            },
            std::chrono::seconds(20))) {
      throw std::runtime_error("munged did not start: " + munged_->log());
    }
    // slurmctld and slurmd, as root, with this host (by its short name) the one node.
    char name[256] = {};
    ::gethostname(name, sizeof name - 1);
    node_ = std::string(name).substr(0, std::string(name).find('.'));
    for (const char* d : {"state", "spool"}) std::filesystem::create_directories(dir_.path / d);
    conf_ = dir_.path / "slurm.conf";
    std::ofstream(conf_) << "ClusterName=batontest\nSlurmctldHost=" << node_
                         << "(127.0.0.1)\nSlurmUser=root\nSlurmdUser=root\n"
                         << "AuthType=auth/munge\nCredType=cred/munge\nAuthInfo=socket=" << socket_
                         << "\nSlurmctldPort=" << free_port() << "\nSlurmdPort=" << free_port()
                         << "\nStateSaveLocation=" << (dir_.path / "state").string()
                         << "\nSlurmdSpoolDir=" << (dir_.path / "spool").string()
                         << "\nSlurmctldPidFile=" << (dir_.path / "slurmctld.pid").string()
                         << "\nSlurmdPidFile=" << (dir_.path / "slurmd.pid").string()
                         << "\nProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\n"
                            "SelectType=select/cons_tres\nSchedulerType=sched/backfill\n"
                            "ReturnToService=2\nMpiDefault=none\nKillWait=2\n"
                            "NodeName="
                         << node_ << " NodeAddr=127.0.0.1 CPUs=2 State=UNKNOWN\n"
                         << "PartitionName=debug Nodes=" << node_
                         << " Default=YES MaxTime=INFINITE State=UP\n";
    ::setenv("SLURM_CONF", conf_.c_str(), 1);
    slurmctld_ = std::make_unique<Daemon>(
        std::vector<std::string>{"slurmctld", "-D", "-L", (dir_.path / "slurmctld.log").string()},
        dir_.path / "slurmctld.out");
    slurmd_ = std::make_unique<Daemon>(
        std::vector<std::string>{"slurmd", "-D", "-L", (dir_.path / "slurmd.log").string()},
        dir_.path / "slurmd.out");
    if (!eventually(
            [&] {
              const auto r = internal::run_command({"sinfo", "-h", "-o", "%t"}, "sinfo");
              return internal::succeeded(r) && r.out.starts_with("idle");
            },
            std::chrono::seconds(60))) {
      throw std::runtime_error("the Slurm node did not come up: " +
                               internal::file_text((dir_.path / "slurmctld.log").string()) +
                               internal::file_text((dir_.path / "slurmd.log").string()));
    }
  }
  ~SlurmCluster() {
    slurmd_.reset();
    slurmctld_.reset();
    munged_.reset();
    ::unsetenv("SLURM_CONF");
  }

  /// squeue's lines for all jobs ("id state reason"), empty when none is queued or running.
  static std::string queue() { return must({"squeue", "-h", "-o", "%i %T %r"}); }
  /// Waits (up to `limit`) for the queue to empty; says whether it did.
  static bool drains(std::chrono::seconds limit) {
    return eventually([] { return queue().empty(); }, limit);
  }

 private:
  TempDir dir_;
  std::string socket_;
  std::string node_;
  std::filesystem::path conf_;
  std::unique_ptr<Daemon> munged_;
  std::unique_ptr<Daemon> slurmctld_;
  std::unique_ptr<Daemon> slurmd_;
};

}  // namespace baton::test
