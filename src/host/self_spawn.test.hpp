#pragma once

// Test helper: runs this test binary again as a child process (a controller of its own, or a
// program in some mode), with one of its output streams piped back, so a test can read what it
// printed and see how it ended.

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

extern char** environ;  // NOLINT: the process environment, as POSIX declares it

namespace baton::test {

/// This process's environment, without the entries whose text starts with one of `drop`.
inline std::vector<std::string> environment(std::initializer_list<std::string_view> drop = {}) {
  std::vector<std::string> out;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string_view entry(*e);
    bool keep = true;
    for (auto d : drop) keep = keep && !entry.starts_with(d);
    if (keep) out.emplace_back(entry);
  }
  return out;
}

/// A child running this binary: its pid and the read end of the pipe from its output stream.
struct SelfChild {
  pid_t pid = -1;
  int from = -1;
};

/// Starts the program at `path` as `name` (its argv[0]) with `args` and environment `env`, its
/// `stream` (STDOUT_FILENO or STDERR_FILENO) piped to the returned descriptor. Throws if it
/// cannot.
inline SelfChild start_self_as(const std::string& path, const std::string& name,
                               const std::vector<std::string>& args, std::vector<std::string> env,
                               int stream) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error(std::strerror(errno));
  posix_spawn_file_actions_t actions;
  ::posix_spawn_file_actions_init(&actions);
  ::posix_spawn_file_actions_adddup2(&actions, fds[1], stream);
  std::vector<char*> envp;
  envp.reserve(env.size() + 1);
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::vector<std::string> words{name};
  words.insert(words.end(), args.begin(), args.end());
  std::vector<char*> argv;
  argv.reserve(words.size() + 1);
  for (auto& w : words) argv.push_back(w.data());
  argv.push_back(nullptr);
  SelfChild child;
  const int rc =
      ::posix_spawn(&child.pid, path.c_str(), &actions, nullptr, argv.data(), envp.data());
  ::posix_spawn_file_actions_destroy(&actions);
  ::close(fds[1]);
  if (rc != 0) {
    ::close(fds[0]);
    throw std::runtime_error(std::string("posix_spawn: ") + std::strerror(rc));
  }
  child.from = fds[0];
  return child;
}

/// Starts this binary as `name` (its argv[0]), as start_self_as does.
inline SelfChild start_self(const std::string& name, std::vector<std::string> env, int stream) {
  return start_self_as("/proc/self/exe", name, {}, std::move(env), stream);
}

/// Reads `fd` to its end and closes it.
inline std::string read_to_end(int fd) {
  std::string out;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return out;
}

/// How a child that ran to its end exited, and what it wrote on the piped stream.
struct SelfRun {
  int status = -1;
  std::string text;
};

/// Runs this binary as `name` to its end, reading its `stream`.
inline SelfRun run_self(const std::string& name, std::vector<std::string> env,
                        int stream = STDERR_FILENO) {
  const SelfChild child = start_self(name, std::move(env), stream);
  SelfRun run;
  run.text = read_to_end(child.from);
  if (::waitpid(child.pid, &run.status, 0) != child.pid) {
    throw std::runtime_error(std::string("waitpid: ") + std::strerror(errno));
  }
  return run;
}

}  // namespace baton::test
