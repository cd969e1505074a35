#pragma once

// Internal: the job's directory (its sockets, CA and key) and the controller's SIGINT/SIGTERM
// handling (job_dir.cpp).

#include <signal.h>

#include <filesystem>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace baton::internal {

/// Makes the job's directory (only this user may enter it) and records who made it.
std::filesystem::path make_job_dir();

/// A job of this user whose controller runs: its directory, the controller's pid, and the URL
/// of its admin API ("" if it serves none).
struct RunningJob {
  std::filesystem::path dir;
  int pid = 0;
  std::string admin_url;
};
/// The running jobs of this user on this host (their directories in the temporary directory),
/// by controller pid.
std::vector<RunningJob> running_jobs();
/// Removes the directory tree at `path`; false if some of it stayed. Not
/// std::filesystem::remove_all: a library loaded beside the runtime may export its own copy of
/// that symbol, built against another libstdc++ (PyTorch's pip wheels do, and a call through it
/// crashed).
bool remove_tree(const std::string& path);

/// "SIGINT".
std::string signal_name(int sig);

/// Turns SIGINT and SIGTERM into calls on a thread of its own: the first signal runs `first`
/// (on one more thread, so that a second signal is heard while it runs), later ones `again`.
/// Both end the process. The handlers that were there before come back when it is destroyed.
class StopSignals {
 public:
  StopSignals(std::function<void(int)> first, std::function<void(int)> again);
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

 private:
  void run();

  std::function<void(int)> first_;
  std::function<void(int)> again_;
  int pipe_[2] = {-1, -1};
  struct sigaction old_int_ {};
  struct sigaction old_term_ {};
  std::thread thread_;
  std::thread stopping_;
};

}  // namespace baton::internal
