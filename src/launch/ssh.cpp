// SshJob: hosts reached with OpenSSH. For each host: its baton-host is copied in unless a copy
// with the same hash is there, the job's credentials go in over ssh's standard input, and an
// agent is started for this controller alone (--once); then the controller attaches to them.

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "baton/launch/job.hpp"
#include "host/files.hpp"
#include "host/hosts.hpp"

extern char** environ;

namespace baton::job {
namespace {

/// What a finished command said and how it ended.
struct Ran {
  int status = -1;
  std::string out;
  std::string err;
};

/// Starts `argv` (looked up on PATH) with `in` as its standard input (-1: /dev/null) and its
/// stdout (and stderr, if `err_fd` is given) piped back.
pid_t start(const std::vector<std::string>& argv, int in, int* out_fd, int* err_fd) {
  int out[2];
  int err[2] = {-1, -1};
  if (::pipe2(out, O_CLOEXEC) != 0) throw std::runtime_error("ssh: cannot make a pipe");
  if (err_fd != nullptr && ::pipe2(err, O_CLOEXEC) != 0) {
    ::close(out[0]);
    ::close(out[1]);
    throw std::runtime_error("ssh: cannot make a pipe");
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
  std::vector<std::string> words = argv;
  std::vector<char*> args;
  args.reserve(words.size() + 1);
  for (auto& w : words) args.push_back(w.data());
  args.push_back(nullptr);
  pid_t pid = -1;
  const int rc = ::posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
  ::posix_spawn_file_actions_destroy(&actions);
  ::close(out[1]);
  if (err_fd != nullptr) ::close(err[1]);
  if (rc != 0) {
    ::close(out[0]);
    if (err_fd != nullptr) ::close(err[0]);
    throw std::runtime_error("cannot run " + argv[0] + ": " + std::strerror(rc) +
                             " (is OpenSSH's client installed?)");
  }
  *out_fd = out[0];
  if (err_fd != nullptr) *err_fd = err[0];
  return pid;
}

std::string read_all(int fd) {
  std::string text;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    text.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return text;
}

Ran run(const std::vector<std::string>& argv, int in = -1) {
  int out = -1;
  int err = -1;
  const pid_t pid = start(argv, in, &out, &err);
  Ran r;
  r.out = read_all(out);  // small: the commands here print a line or nothing
  r.err = read_all(err);
  ::waitpid(pid, &r.status, 0);
  return r;
}

/// A pipe whose read end gives `text` (small enough for the pipe's buffer).
int text_input(const std::string& text) {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) throw std::runtime_error("ssh: cannot make a pipe");
  const bool ok = ::write(p[1], text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ::close(p[1]);
  if (!ok) {
    ::close(p[0]);
    throw std::runtime_error("ssh: credentials too large for a pipe");
  }
  return p[0];
}

std::string file_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

/// The baton-host to copy: the options', else beside this program, else on PATH.
std::string local_agent(const SshOptions& o) {
  if (!o.agent.empty()) return o.agent;
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
  throw UsageError("SshJob: no baton-host to copy to the hosts: set SshOptions::agent");
}

}  // namespace

struct SshJob::Session {
  pid_t pid = -1;  // the ssh running the agent
  FILE* out = nullptr;
  ~Session() {
    if (pid > 0) {
      ::kill(pid, SIGTERM);
      ::waitpid(pid, nullptr, 0);
    }
    if (out != nullptr) std::fclose(out);
  }
};

SshJob::SshJob(std::vector<std::string> hosts, SshOptions options)
    : hosts_(std::move(hosts)), options_(std::move(options)) {
  if (hosts_.empty()) throw UsageError("SshJob: no hosts given");
}

SshJob::~SshJob() = default;

HostMesh SshJob::hosts() {
  if (mesh_) return *mesh_;
  const std::string agent = local_agent(options_);
  const auto hash = internal::sha256_file(agent);
  if (!hash) throw UsageError("SshJob: cannot read " + agent);
  const net::LinkOptions link = Runtime::get().link_options();
  if (!link.tls.enabled()) throw UsageError("SshJob: the runtime has no TLS files to send");
  const std::string dir = options_.remote_dir;
  const std::string remote_agent = dir + "/baton-host-" + *hash;
  const std::string job =
      dir + "/job-" + std::to_string(::getpid()) + "-" + link.secret.substr(0, 8);
  std::vector<std::string> addresses;
  for (const auto& host : hosts_) {
    std::vector<std::string> ssh{"ssh", "-o", "BatchMode=yes"};
    if (options_.port != 0) ssh.insert(ssh.end(), {"-p", std::to_string(options_.port)});
    if (!options_.identity_file.empty()) ssh.insert(ssh.end(), {"-i", options_.identity_file});
    if (!options_.user.empty()) ssh.insert(ssh.end(), {"-l", options_.user});
    ssh.insert(ssh.end(), options_.ssh_args.begin(), options_.ssh_args.end());
    ssh.push_back(host);
    const auto remote = [&](const std::string& command, int in = -1) {
      auto argv = ssh;
      argv.push_back(command);
      Ran r = run(argv, in);
      if (in >= 0) ::close(in);
      if (!WIFEXITED(r.status) || WEXITSTATUS(r.status) != 0) {
        throw std::runtime_error("SshJob: on " + host + ", `" + command + "` failed: " +
                                 (r.err.empty() ? std::string("(no message)") : r.err));
      }
      return r;
    };
    // The agent, unless the same bytes are there.
    if (run([&] {
          auto argv = ssh;
          argv.push_back("test -x " + remote_agent);
          return argv;
        }())
            .status != 0) {
      const int in = ::open(agent.c_str(), O_RDONLY | O_CLOEXEC);
      if (in < 0) throw UsageError("SshJob: cannot read " + agent);
      remote("umask 077 && mkdir -p " + dir + " && cat > " + remote_agent + ".part && chmod 700 " +
                 remote_agent + ".part && mv " + remote_agent + ".part " + remote_agent,
             in);
    }
    // The credentials, over standard input into a directory only the user may read.
    remote("umask 077 && mkdir -p " + job);
    remote("umask 077 && cat > " + job + "/secret", text_input(link.secret));
    remote("umask 077 && cat > " + job + "/ca.pem", text_input(file_text(link.tls.ca_file)));
    remote("umask 077 && cat > " + job + "/cert.pem", text_input(file_text(link.tls.cert_file)));
    remote("umask 077 && cat > " + job + "/key.pem", text_input(file_text(link.tls.key_file)));
    // The agent, for this controller alone: it advertises its address on the route back here.
    const std::string ip = internal::resolve_host(host.substr(host.find('@') + 1), host);
    const std::string me = internal::route_address(ip);
    // With a terminal, so that when this session ends the agent gets SIGHUP even if this
    // controller's links to it are still up.
    auto argv = ssh;
    argv.insert(argv.begin() + 1, "-tt");
    argv.push_back("exec " + remote_agent + " --once --credentials " + job +
                   (me.empty() ? std::string() : " --route-to " + me) + " --port " +
                   std::to_string(options_.agent_port));
    auto session = std::make_unique<Session>();
    int out = -1;
    session->pid = start(argv, -1, &out, nullptr);
    session->out = ::fdopen(out, "r");
    char line[512] = {};
    if (std::fgets(line, sizeof line, session->out) == nullptr) {
      throw std::runtime_error("SshJob: the agent on " + host +
                               " did not start (its words, and ssh's, are above)");
    }
    const std::string said(line);
    const auto at = said.find("tcp://");
    if (at == std::string::npos) {
      throw std::runtime_error("SshJob: the agent on " + host + " said: " + said);
    }
    std::string address = said.substr(at + 6);
    while (!address.empty() && (address.back() == '\n' || address.back() == '\r')) {
      address.pop_back();
    }
    addresses.push_back(address);
    sessions_.push_back(std::move(session));
  }
  mesh_ = attach(addresses);
  return *mesh_;
}

}  // namespace baton::job
