#pragma once

// SshJob: hosts reached with OpenSSH (see job.hpp for jobs in general).

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "baton/host/runtime.hpp"

namespace baton::job {

/// How SshJob reaches its hosts: OpenSSH's `ssh` with the user's own keys and configuration.
struct SshOptions {
  std::string user;                   // empty: ssh's default (the local user, or ~/.ssh/config's)
  int port = 0;                       // 0: ssh's default
  std::string identity_file;          // empty: ssh's default keys and agent
  std::vector<std::string> ssh_args;  // more options for ssh, e.g. {"-o", "ProxyJump=gw"}
  /// The baton-host to run there: a local file, copied to each host that lacks it (by hash).
  /// Empty: baton-host beside this program, else the one on PATH.
  std::string agent;
  std::string remote_dir = ".cache/baton";  // on each host, relative to its home
  /// Each agent serves here; 0: a free port of each host, which the agent reports (two jobs,
  /// or a job and the winding down of the last one, never contend for a port).
  std::uint16_t agent_port = 0;
};

/// Hosts reached over SSH: on each, the job's baton-host is copied in (unless the same bytes are
/// there) and its credentials too (over ssh's standard input, never on a command line, into a
/// file only the user may read, which the agent takes them from and removes), and an agent is
/// started for this controller alone (--once: it stops its procs and exits when the
/// controller is gone).
class SshJob {
 public:
  /// Hosts of `rt`'s job: they get its credentials. Used after `rt` is gone, the job throws
  /// UsageError.
  SshJob(Runtime& rt, std::vector<std::string> hosts, SshOptions options = {});
  /// Stops the ssh sessions; each agent exits once this controller's links to it close.
  ~SshJob();
  SshJob(const SshJob&) = delete;
  SshJob& operator=(const SshJob&) = delete;

  /// Starts the agents (once) and attaches to them: {hosts: H} in the order given. Throws with
  /// ssh's own words, naming the host, if one cannot be reached or its agent does not start.
  HostMesh hosts();

 private:
  struct Session;
  std::shared_ptr<internal::RuntimeSlot> rt_;  // its runtime, while there is one
  std::vector<std::string> hosts_;
  SshOptions options_;
  std::vector<std::unique_ptr<Session>> sessions_;
  std::optional<HostMesh> mesh_;
};

}  // namespace baton::job
