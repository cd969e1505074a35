// Child processes for the jobs: posix_spawn with pipes, and where baton-host is.

#include "launch/command.hpp"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "baton/actor/errors.hpp"
#include "host/files.hpp"

extern char** environ;

namespace baton::internal {

pid_t start_command(const std::vector<std::string>& argv, int in, int* out_fd, int* err_fd,
                    const std::string& what, bool own_group) {
  int out[2];
  int err[2] = {-1, -1};
  if (::pipe2(out, O_CLOEXEC) != 0) throw std::runtime_error("cannot make a pipe for " + argv[0]);
  if (err_fd != nullptr && ::pipe2(err, O_CLOEXEC) != 0) {
    ::close(out[0]);
    ::close(out[1]);
    throw std::runtime_error("cannot make a pipe for " + argv[0]);
  }
  posix_spawn_file_actions_t actions;
  ::posix_spawn_file_actions_init(&actions);
  if (in >= 0) {
    ::posix_spawn_file_actions_adddup2(&actions, in, STDIN_FILENO);
  } else {
    ::posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  }
  ::posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
  if (err_fd != nullptr) ::posix_spawn_file_actions_adddup2(&actions, err[1], STDERR_FILENO);
  posix_spawnattr_t attr;
  ::posix_spawnattr_init(&attr);
  if (own_group) {
    ::posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
    ::posix_spawnattr_setpgroup(&attr, 0);
  }
  std::vector<std::string> words = argv;
  std::vector<char*> args;
  args.reserve(words.size() + 1);
  for (auto& w : words) args.push_back(w.data());
  args.push_back(nullptr);
  pid_t pid = -1;
  const int rc = ::posix_spawnp(&pid, args[0], &actions, &attr, args.data(), environ);
  ::posix_spawn_file_actions_destroy(&actions);
  ::posix_spawnattr_destroy(&attr);
  ::close(out[1]);
  if (err_fd != nullptr) ::close(err[1]);
  if (rc != 0) {
    ::close(out[0]);
    if (err_fd != nullptr) ::close(err[0]);
    throw std::runtime_error("cannot run " + argv[0] + ": " + std::strerror(rc) + " (is " + what +
                             " installed, and on PATH?)");
  }
  *out_fd = out[0];
  if (err_fd != nullptr) *err_fd = err[0];
  return pid;
}

namespace {

std::string read_all(int fd) {
  std::string text = read_fd(fd, SIZE_MAX);
  ::close(fd);
  return text;
}

}  // namespace

Ran run_command(const std::vector<std::string>& argv, const std::string& what, int in) {
  int out = -1;
  int err = -1;
  const pid_t pid = start_command(argv, in, &out, &err, what);
  Ran r;
  r.out = read_all(out);  // small: the commands here print a few lines
  r.err = read_all(err);
  while (::waitpid(pid, &r.status, 0) < 0 && errno == EINTR) {
  }
  return r;
}

std::string said(const Ran& r) {
  const std::string& text = r.err.empty() ? r.out : r.err;
  std::string line = text.substr(0, text.find('\n'));
  return line.empty() ? "(no message)" : line;
}

bool succeeded(const Ran& r) {
  return WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0;
}

int text_input(const std::string& text) {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) throw std::runtime_error("cannot make a pipe");
  const bool ok = ::write(p[1], text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ::close(p[1]);
  if (!ok) {
    ::close(p[0]);
    throw std::runtime_error("input too large for a pipe");
  }
  return p[0];
}

std::string file_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string local_agent(const std::string& given, const std::string& who,
                        const std::string& option) {
  if (!given.empty()) return given;
  char self[PATH_MAX] = {};
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  if (n > 0) {
    const auto beside =
        std::filesystem::path(std::string(self, static_cast<std::size_t>(n))).parent_path() /
        "baton-host";
    if (::access(beside.c_str(), X_OK) == 0) return beside.string();
  }
  if (const char* path = std::getenv("PATH")) {
    std::istringstream dirs(path);
    for (std::string d; std::getline(dirs, d, ':');) {
      const auto candidate = std::filesystem::path(d) / "baton-host";
      if (::access(candidate.c_str(), X_OK) == 0) return candidate.string();
    }
  }
  throw UsageError(who + ": no baton-host beside this program or on PATH: set " + option);
}

}  // namespace baton::internal
