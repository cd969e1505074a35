#pragma once

// Test helper: the child processes of this process, from /proc.

#include <dirent.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace baton::test {

/// Whether process `pid` exists (a zombie included).
inline bool running(int pid) {
  return ::kill(pid, 0) == 0;
}

/// Child processes of `parent` (this process by default; zombies included), from /proc.
inline std::vector<int> children(int parent = ::getpid()) {
  std::vector<int> out;
  DIR* d = ::opendir("/proc");
  if (d == nullptr) return out;
  while (dirent* e = ::readdir(d)) {
    const int pid = std::atoi(e->d_name);
    if (pid <= 0) continue;
    std::ifstream stat("/proc/" + std::string(e->d_name) + "/stat");
    std::string text;
    std::getline(stat, text);
    const auto close = text.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(text.substr(close + 1));
    std::string state;
    int ppid = 0;
    rest >> state >> ppid;
    if (ppid == parent) out.push_back(pid);
  }
  ::closedir(d);
  return out;
}

/// Whether process `pid` (any process, not only a child) has ended by `deadline`: waits on a
/// pidfd, no polling.
inline bool ends_by(int pid, std::chrono::steady_clock::time_point deadline) {
  const int fd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  if (fd < 0) return true;  // gone already
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
  pollfd p{fd, POLLIN, 0};
  const bool ended = ::poll(&p, 1, static_cast<int>(std::max<std::int64_t>(left.count(), 0))) == 1;
  ::close(fd);
  return ended;
}

}  // namespace baton::test
