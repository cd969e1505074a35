// SshJob: hosts reached with OpenSSH. For each host: its baton-host is copied in unless a copy
// with the same hash is there, the job's credentials go in over ssh's standard input, and an
// agent is started for this controller alone (--once); then the controller attaches to them.

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>

#include "baton/launch/job.hpp"
#include "host/files.hpp"
#include "host/hosts.hpp"
#include "host/runtime_impl.hpp"
#include "launch/command.hpp"

namespace baton::job {

using internal::Ran;

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
  const std::string agent = internal::local_agent(options_.agent, "SshJob", "SshOptions::agent");
  const auto hash = internal::sha256_file(agent);
  if (!hash) throw UsageError("SshJob: cannot read " + agent);
  const net::LinkOptions link = Runtime::get().link_options();
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
    int out = -1;
    session->pid = internal::start_command(argv, -1, &out, nullptr, "OpenSSH's client");
    session->out = ::fdopen(out, "r");
    // Its line "baton-host: NAME serving at tcp://ADDRESS", after what it may log first (a sweep
    // of a dead controller's files), which is kept for the error if that line never comes.
    const std::string mark = "serving at tcp://";
    std::string address;
    std::string said;
    char line[512] = {};
    while (std::fgets(line, sizeof line, session->out) != nullptr) {
      const std::string got(line);
      if (const auto at = got.find(mark); got.starts_with("baton-host: ") && at != got.npos) {
        address = got.substr(at + mark.size());
        break;
      }
      said += got;
    }
    while (!address.empty() && (address.back() == '\n' || address.back() == '\r')) {
      address.pop_back();
    }
    if (address.empty()) {
      throw std::runtime_error("SshJob: the agent on " + host + " did not start" +
                               (said.empty() ? " (its words, and ssh's, are above)" : ": " + said));
    }
    addresses.push_back(address);
    sessions_.push_back(std::move(session));
  }
  mesh_ = attach(addresses);
  return *mesh_;
}

}  // namespace baton::job
