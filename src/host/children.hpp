#pragma once

// Internal: starting worker processes (the spawner thread) and reaping them (the child
// watcher) (children.cpp).

#include <spawn.h>
#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>

#include "net/work_queue.hpp"

namespace baton::internal {

/// Starts processes from one thread that lives as long as the runtime. A worker's
/// PR_SET_PDEATHSIG follows the thread that started it, not the process: started from a
/// short-lived thread, it would die when that thread ends.
class Spawner {
 public:
  /// posix_spawn, run on the spawner's thread (ECANCELED once the spawner is going).
  int spawn(pid_t* pid, const char* path, const posix_spawn_file_actions_t* actions,
            char* const argv[], char* const envp[]);

 private:
  net::JobQueue queue_;  // its thread starts with the first spawn and ends with the runtime
};

/// Reaps child processes as they exit, on a thread of its own: one poll over their pidfds.
/// A child killed by SIGKILL is said to be the out-of-memory killer's only if the kernel's
/// count of such kills in the child's cgroup rose since it was last read.
class ChildWatcher {
 public:
  using OnExit = std::function<void(pid_t pid, const std::string& what)>;

  explicit ChildWatcher(OnExit on_exit);
  ~ChildWatcher();
  ChildWatcher(const ChildWatcher&) = delete;
  ChildWatcher& operator=(const ChildWatcher&) = delete;

  void add(pid_t pid);

  /// Sends `sig` to every child still running (through its pidfd: never to a reused pid).
  void signal_all(int sig);

  /// What became of `pid` once it exited, waiting until `deadline`; nullopt if still running.
  std::optional<std::string> wait(pid_t pid, std::chrono::steady_clock::time_point deadline);

  /// Forgets what became of `pid` (its group is gone).
  void forget(pid_t pid);

 private:
  void poke() const;
  void run();
  /// Whether the out-of-memory killer acted in `pid`'s cgroup since its count was last read.
  bool oom_killed(pid_t pid);

  OnExit on_exit_;
  int wake_ = -1;
  std::mutex mu_;
  std::condition_variable cv_;
  std::unordered_map<pid_t, int> running_;  // pidfd of each child still running
  std::unordered_map<pid_t, std::string> exited_;
  std::unordered_map<pid_t, std::string> oom_file_;          // each running child's events file
  std::unordered_map<std::string, std::uint64_t> oom_seen_;  // oom_kill count last read, by file
  bool quit_ = false;
  std::once_flag started_;
  std::thread thread_;  // started by the first add()
};

}  // namespace baton::internal
