#pragma once

// Test helper for procs on other hosts: agents (baton-host) started by the test, the job's
// credentials they share with the controller, what the controller's hooks see, and an actor to
// spawn there. A test binary's main() calls run_hosts_test().

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "baton/baton.hpp"
#include "host/hosts.hpp"
#include "host/netns.test.hpp"
#include "host/runtime_impl.hpp"
#include "host/self_spawn.test.hpp"

namespace baton::test {

#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
inline constexpr bool kSanitized = true;  // several times slower: see run_hosts_test
#else
inline constexpr bool kSanitized = false;
#endif

/// A temporary directory, removed with everything in it.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    std::string t = (std::filesystem::temp_directory_path() / "baton-hosts-XXXXXX").string();
    if (::mkdtemp(t.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path = t;
  }
  ~TempDir() { std::filesystem::remove_all(path); }
};

/// The job's credentials, shared by this controller and its agents (set in main()).
inline std::filesystem::path& credentials() {
  static std::filesystem::path p;
  return p;
}

/// One baton-host process, stopped with SIGTERM when the test is done with it. It advertises
/// `address` and serves there at `port`; in the network namespace `netns` if one is named.
class Agent {
 public:
  explicit Agent(int port, const std::string& address = "127.0.0.1", const std::string& netns = "",
                 std::vector<std::string> extra = {}) {
    auto env = environment({"BATON_"});
    env.push_back("BATON_CREDENTIALS=" + credentials().string());
    std::vector<std::string> args{"--advertise",        address,   "--port",
                                  std::to_string(port), "--cache", cache_.path.string()};
    args.insert(args.end(), extra.begin(), extra.end());
    if (netns.empty()) {
      child_ = start_self_as(BATON_HOST_BIN, "baton-host", args, std::move(env), STDOUT_FILENO);
    } else {
      std::vector<std::string> in_ns{"netns", "exec", netns, BATON_HOST_BIN};
      in_ns.insert(in_ns.end(), args.begin(), args.end());
      child_ = start_self_as(ip_program(), "ip", in_ns, std::move(env), STDOUT_FILENO);
    }
    out_ = ::fdopen(child_.from, "r");
    char line[256] = {};
    if (std::fgets(line, sizeof line, out_) == nullptr) {
      throw std::runtime_error("baton-host at " + address + ":" + std::to_string(port) +
                               " said nothing (see its stderr above)");
    }
    said_ = line;
    address_ = address + ":" + std::to_string(port);
  }
  ~Agent() { end(); }
  const std::string& address() const { return address_; }
  /// Where it keeps shipped programs (empty when it starts).
  const std::filesystem::path& cache_dir() const { return cache_.path; }
  /// Its actor, to ask it things directly.
  ActorRef<internal::HostAgent> ref() const {
    Address a = Address::parse("tcp://" + address_);
    return ActorRef<internal::HostAgent>(ActorId{ProcId{internal::agent_name(a)}, "host", 0});
  }
  const std::string& said() const { return said_; }
  pid_t pid() const { return child_.pid; }
  /// Whether it exits by itself within `limit`.
  bool wait_exit(std::chrono::seconds limit) {
    const int fd = static_cast<int>(::syscall(SYS_pidfd_open, child_.pid, 0));
    if (fd < 0) return false;
    pollfd p{fd, POLLIN, 0};
    const bool exited = ::poll(&p, 1, static_cast<int>(limit.count() * 1000)) == 1;
    ::close(fd);
    if (exited) {
      ::waitpid(child_.pid, nullptr, 0);
      child_.pid = -1;
    }
    return exited;
  }
  /// SIGKILL: the agent dies at once, its workers with it.
  void kill() { end(SIGKILL); }
  /// SIGTERM: the agent stops its procs in order and exits.
  void end(int sig = SIGTERM) {
    if (child_.pid > 0) {
      ::kill(child_.pid, sig);
      ::waitpid(child_.pid, nullptr, 0);
      child_.pid = -1;
    }
    if (out_ != nullptr) std::fclose(out_);
    out_ = nullptr;
  }

 private:
  TempDir cache_;
  SelfChild child_;
  FILE* out_ = nullptr;
  std::string said_;
  std::string address_;
};

/// What the controller's hooks saw: worker lines and failures nobody below handled.
struct Seen {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<OutputLine> lines;
  std::vector<MeshFailure> failures;

  /// Waits (up to `limit`) until `pred` holds over what was seen; returns whether it did.
  template <class P>
  bool wait_for(P pred, std::chrono::seconds limit = std::chrono::seconds(30)) {
    std::unique_lock lock(mu);
    return cv.wait_for(lock, limit, [&] { return pred(*this); });
  }
};
inline Seen& seen() {
  static Seen s;
  return s;
}

class Member : public Actor {
 public:
  std::string where() { return id().proc.name + " " + context().point.to_string(); }
  int pid() { return static_cast<int>(::getpid()); }
  int twice(int x) { return 2 * x; }
  /// Calls another member, on whichever host it is.
  Task<int> ask(ActorRef<Member> other, int x) { co_return co_await other.call(&Member::twice, x); }
  int say(const std::string& text) {
    std::printf("%s\n", text.c_str());
    std::fflush(stdout);
    return 0;
  }
  static constexpr auto endpoints =
      baton::endpoints<&Member::where, &Member::pid, &Member::twice, &Member::ask, &Member::say>();
};

/// Whether a failure reported to the controller names `what`.
inline bool failure_named(Seen& s, const std::string& what) {
  for (const auto& f : s.failures) {
    if (f.to_string().find(what) != std::string::npos) return true;
  }
  return false;
}

/// Makes the job's credentials (unless this is a controller or worker the test started, which
/// has its parent's), records what the controller's hooks see, and runs the tests; `instead`
/// runs in place of the tests when given (a controller of the test's own).
inline int run_hosts_test(int argc, char** argv, const std::function<void()>& instead = {}) {
  if (const char* c = std::getenv("BATON_CREDENTIALS")) {
    credentials() = c;
  } else if (std::getenv("BATON_PROC") == nullptr) {
    // Made here only: a worker ends without static destructors, and would leave its own behind.
    static TempDir dir;
    credentials() = dir.path / "credentials";
    internal::make_credentials(credentials());
    ::setenv("BATON_CREDENTIALS", credentials().c_str(), 1);
  }
  RuntimeOptions options;
  options.output.sink = [](const OutputLine& line) {
    std::lock_guard lock(seen().mu);
    seen().lines.push_back(line);
    seen().cv.notify_all();
  };
  options.supervise = [](const MeshFailure& f) {
    std::lock_guard lock(seen().mu);
    seen().failures.push_back(f);
    seen().cv.notify_all();
    return true;
  };
  // Quick to notice a host that went silent, for the tests that cut links. Under a sanitizer
  // the event loop itself can go that long without turning: decoding three replies of 2.4 MB
  // took 2-5 s there under ThreadSanitizer, most of it faulting in shadow memory, with another
  // test alongside on 2 cores. The heartbeats it owes wait for it, and a peer would take the
  // silence for a dead link.
  options.link.dead_after = std::chrono::milliseconds(kSanitized ? 15000 : 3000);
  options.link.reconnect_for = std::chrono::milliseconds(3000);
  Runtime rt(argc, argv, options);  // a worker serves here and never returns
  if (instead) {
    instead();
    return 0;
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}

}  // namespace baton::test
