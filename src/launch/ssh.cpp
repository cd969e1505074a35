// SshJob: hosts reached with OpenSSH. For each host: its baton-host is copied in unless a copy
// with the same hash is there, the job's credentials go in over ssh's standard input, and an
// agent is started for this controller alone (--once); then the controller attaches to them.

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <optional>
#include <thread>

#include "baton/launch/job.hpp"
#include "host/credentials.hpp"
#include "host/files.hpp"
#include "host/hosts.hpp"
#include "host/runtime_impl.hpp"
#include "launch/command.hpp"
#include "log/log.hpp"

namespace baton::job {

using internal::Ran;

namespace {

/// How long an agent may take to say where it serves, ssh's connection included.
constexpr std::chrono::seconds kAgentStart{120};
constexpr std::size_t kKeptWords = 4096;  // of what an agent said before failing to start

/// The next line from `fd` (buffered in `pending`), without its end; nullopt at the end of the
/// stream or past `deadline` (none: no limit), which then sets `late`.
std::optional<std::string> read_line(int fd, std::string& pending,
                                     std::optional<std::chrono::steady_clock::time_point> deadline,
                                     bool& late) {
  for (;;) {
    if (const auto nl = pending.find('\n'); nl != std::string::npos) {
      std::string line = pending.substr(0, nl);
      pending.erase(0, nl + 1);
      while (!line.empty() && line.back() == '\r') line.pop_back();
      return line;
    }
    int wait_ms = -1;
    if (deadline) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          *deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) {
        late = true;
        return std::nullopt;
      }
      wait_ms = static_cast<int>(left.count());  // at most kAgentStart
    }
    pollfd p{fd, POLLIN, 0};
    const int ready = ::poll(&p, 1, wait_ms);
    if (ready < 0 && errno == EINTR) continue;
    if (ready == 0) continue;  // the deadline, seen above
    char buf[1024];
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return std::nullopt;
    pending.append(buf, static_cast<std::size_t>(n));
  }
}

}  // namespace

struct SshJob::Session {
  pid_t pid = -1;  // the ssh running the agent
  int out = -1;    // its output
  std::thread drain;
  ~Session() {
    if (pid > 0) {
      ::kill(pid, SIGTERM);
      ::waitpid(pid, nullptr, 0);
    }
    if (drain.joinable()) drain.join();  // ends with ssh's output
    if (out >= 0) ::close(out);
  }
  /// After its address, what the agent says goes to this program's standard error, a line at a
  /// time with its host's name, so that it never fills the pipe and stops the agent.
  void forward(const std::string& host, std::string pending) {
    drain = std::thread([this, host, pending = std::move(pending)]() mutable {
      bool late = false;
      while (auto line = read_line(out, pending, std::nullopt, late)) {
        detail::log_warn("agent on {}: {}", host, *line);
      }
    });
  }
};

SshJob::SshJob(Runtime& rt, std::vector<std::string> hosts, SshOptions options)
    : rt_(internal::RuntimeAccess::slot(rt)),
      hosts_(std::move(hosts)),
      options_(std::move(options)) {
  if (hosts_.empty())
    throw UsageError("SshJob: no hosts given; name the hosts to reach, as ssh knows them");
}

SshJob::~SshJob() = default;

HostMesh SshJob::hosts() {
  if (mesh_) return *mesh_;
  const std::string agent = internal::local_agent(options_.agent, "SshJob", "SshOptions::agent");
  const auto hash = internal::sha256_file(agent);
  if (!hash) throw UsageError("SshJob: cannot read " + agent);
  Runtime& rt = internal::RuntimeAccess::live(rt_, "SshJob");
  const net::LinkOptions link = rt.link_options();
  if (!link.tls.enabled()) throw UsageError("SshJob: the runtime has no TLS files to send");
  const std::string dir = options_.remote_dir;
  const std::string remote_agent = dir + "/baton-host-" + *hash;
  const std::string credentials =
      dir + "/credentials-" + std::to_string(::getpid()) + "-" + link.secret.substr(0, 8);
  const std::string text = internal::credentials_text(link.secret, link.tls);
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
      Ran r = internal::run_command(argv, "OpenSSH's client", in);
      if (in >= 0) ::close(in);
      return r;
    };
    const auto failed = [&](const std::string& command, const Ran& r) {
      return std::runtime_error("SshJob: on " + host + ", `" + command +
                                "` failed: " + (r.err.empty() ? "(no message)" : r.err));
    };
    // The credentials, over standard input into a file only the user may read (the agent takes
    // them from it and removes it); then whether the agent's bytes are there already.
    const std::string put =
        "umask 077 && mkdir -p " + dir + " && cat > " + credentials + " && test -x " + remote_agent;
    const Ran checked = remote(put, internal::text_input(text));
    if (!WIFEXITED(checked.status) || WEXITSTATUS(checked.status) > 1 ||
        (WEXITSTATUS(checked.status) == 1 && !checked.err.empty())) {
      throw failed(put, checked);
    }
    if (WEXITSTATUS(checked.status) == 1) {
      const int in = ::open(agent.c_str(), O_RDONLY | O_CLOEXEC);
      if (in < 0) throw UsageError("SshJob: cannot read " + agent);
      const std::string copy = "umask 077 && cat > " + remote_agent + ".part && chmod 700 " +
                               remote_agent + ".part && mv " + remote_agent + ".part " +
                               remote_agent;
      const Ran copied = remote(copy, in);
      if (!internal::succeeded(copied)) throw failed(copy, copied);
    }
    // The agent, for this controller alone: it advertises its address on the route back here.
    const std::string ip = internal::resolve_host(host.substr(host.find('@') + 1), host);
    const std::string me = internal::route_address(ip);
    // With a terminal, so that when this session ends the agent gets SIGHUP even if this
    // controller's links to it are still up.
    auto argv = ssh;
    argv.insert(argv.begin() + 1, "-tt");
    argv.push_back("{ rm -f " + credentials + " && exec " + remote_agent +
                   " --once --credentials -" + (me.empty() ? std::string() : " --route-to " + me) +
                   " --port " + std::to_string(options_.agent_port) + "; } < " + credentials);
    auto session = std::make_unique<Session>();
    session->pid = internal::start_command(argv, -1, &session->out, nullptr, "OpenSSH's client");
    // Its line "baton-host: NAME serving at tcp://ADDRESS", after what it may log first (a sweep
    // of a dead controller's files), which is kept for the error if that line never comes.
    const std::string mark = "serving at tcp://";
    const auto deadline = std::chrono::steady_clock::now() + kAgentStart;
    std::string address;
    std::string said;
    std::string pending;
    bool late = false;
    while (auto line = read_line(session->out, pending, deadline, late)) {
      if (const auto at = line->find(mark); line->starts_with("baton-host: ") && at != line->npos) {
        address = line->substr(at + mark.size());
        break;
      }
      said += *line + "\n";
      if (said.size() > kKeptWords) said.erase(0, said.size() - kKeptWords);
    }
    if (address.empty()) {
      const std::string why = late ? " within " + std::to_string(kAgentStart.count()) +
                                         " s (is the host or its file system stuck?)"
                                   : "";
      throw std::runtime_error(
          "SshJob: the agent on " + host + " did not say where it serves" + why +
          (said.empty() ? " (its words, and ssh's, are above)" : "; it said: " + said));
    }
    session->forward(host, std::move(pending));
    addresses.push_back(address);
    sessions_.push_back(std::move(session));
  }
  mesh_ = internal::attach_hosts(rt, addresses);
  return *mesh_;
}

}  // namespace baton::job
