#pragma once

// The admin API's tests' own client: this test's job, raw HTTP requests to its API, and the
// `baton` command this build made, run against it.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "baton/baton.hpp"
#include "host/admin.hpp"
#include "host/job_dir.hpp"
#include "host/self_spawn.test.hpp"

namespace baton {

/// This test's own job (its controller is this process).
inline internal::RunningJob this_job() {
  for (auto& job : internal::running_jobs()) {
    if (job.pid == static_cast<int>(::getpid())) return job;
  }
  throw std::runtime_error("this process's job is not among the running jobs");
}

inline std::string token_of(const internal::RunningJob& job) {
  std::ifstream in(job.dir / internal::kAdminTokenFile);
  std::string token;
  std::getline(in, token);
  return token;
}

/// A connection to the admin API of `job` (its URL is http://127.0.0.1:PORT).
inline int connect_to(const internal::RunningJob& job) {
  const auto colon = job.admin_url.rfind(':');
  const int port = std::stoi(job.admin_url.substr(colon + 1));
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in at{};
  at.sin_family = AF_INET;
  at.sin_port = htons(static_cast<std::uint16_t>(port));
  at.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&at), sizeof at) != 0) {
    ::close(fd);
    throw std::runtime_error("cannot connect to " + job.admin_url);
  }
  return fd;
}

inline void send_all(int fd, const std::string& bytes) {
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::send(fd, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
    if (n <= 0) return;  // the server hung up: what it said is still there to read
    done += static_cast<std::size_t>(n);
  }
}

inline std::string read_to_end(int fd) {
  std::string out;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  return out;
}

struct Reply {
  int status = 0;
  std::string body;
};

/// `method` `path` with `headers` (each ending "\r\n"); the connection closes after it.
inline Reply request(const internal::RunningJob& job, const std::string& method,
                     const std::string& path, const std::string& headers) {
  const int fd = connect_to(job);
  send_all(fd, method + " " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n" +
                   headers + "\r\n");
  const std::string text = read_to_end(fd);
  ::close(fd);
  Reply r;
  const auto sp = text.find(' ');
  if (sp != std::string::npos) r.status = std::atoi(text.c_str() + sp + 1);
  const auto split = text.find("\r\n\r\n");
  if (split != std::string::npos) r.body = text.substr(split + 4);
  return r;
}

/// GET `path` with `headers` (each ending "\r\n").
inline Reply get(const internal::RunningJob& job, const std::string& path,
                 const std::string& headers) {
  return request(job, "GET", path, headers);
}

/// GET `path` with the job's token.
inline Reply get(const internal::RunningJob& job, const std::string& path) {
  return get(job, path, "Authorization: Bearer " + token_of(job) + "\r\n");
}

/// The failures that reach the controller while it lives (its supervise hook, set and taken
/// back), for tests that kill a worker on purpose.
class HeardFailures {
 public:
  HeardFailures() {
    Runtime::get().set_supervise([this](const MeshFailure& e) {
      std::lock_guard lock(mu_);
      heard_.push_back(e.to_string());
      cv_.notify_all();
      return true;
    });
  }
  ~HeardFailures() { Runtime::get().set_supervise(nullptr); }
  HeardFailures(const HeardFailures&) = delete;
  HeardFailures& operator=(const HeardFailures&) = delete;

  /// The first failure heard, waiting up to `wait` for it; "" if none came.
  std::string first(std::chrono::seconds wait = std::chrono::seconds(30)) {
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, wait, [this] { return !heard_.empty(); });
    return heard_.empty() ? std::string() : heard_.front();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::string> heard_;
};

/// Runs `command` through the shell; its standard output.
inline std::string shell(const std::string& command) {
  std::string out;
  FILE* p = ::popen(command.c_str(), "r");
  if (p == nullptr) return out;
  char buf[4096];
  std::size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  ::pclose(p);
  return out;
}

#ifdef BATON_CLI_BIN  // a test that runs the `baton` command (its build defines where it is)
/// Runs the `baton` command with `args` to its end: its exit status and what it wrote on
/// `stream`.
inline test::SelfRun baton_cli(const std::vector<std::string>& args, int stream = STDOUT_FILENO) {
  const test::SelfChild child =
      test::start_self_as(BATON_CLI_BIN, "baton", args, test::environment(), stream);
  test::SelfRun run;
  run.text = test::read_to_end(child.from);
  ::waitpid(child.pid, &run.status, 0);
  return run;
}
#endif

}  // namespace baton
