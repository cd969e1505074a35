#pragma once

// Jobs: where a program's hosts come from. Each host of a job runs an agent, `baton-host`,
// which starts procs there for the controller; the controller sees the hosts as one HostMesh,
// {"hosts": H}, whose spawn_procs({{"gpus", G}}) gives a {"hosts": H, "gpus": G} proc mesh.
//
// The controller and its agents share the job's credentials: a directory with its secret and
// TLS files that only its owner may read, made once with `baton-host --make-credentials DIR`
// and named by BATON_CREDENTIALS (the agents: --credentials DIR). They are never passed on a
// command line.

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "baton/host/runtime.hpp"

namespace baton::job {

/// The hosts whose agents were started by other means (a person, an MPI launch, a Kubernetes
/// deployment), each at "host:port" (the address it advertises, which it prints when it
/// starts), as one HostMesh in the order given. Links to each agent and checks that it answers;
/// throws naming the host that does not. A host that later dies or cannot be reached is
/// reported like a dead process (naming the host), within the links' heartbeat bound.
HostMesh attach(const std::vector<std::string>& addresses);

/// Writes where the hosts of `hosts` (from attach) are to `path`, one address a line, so that a
/// later run of the controller can attach to the same hosts (attach_file): an allocation kept
/// across edits of the program. Throws UsageError for this_host(), which has nothing to save.
void save(const HostMesh& hosts, const std::string& path);
/// attach() to the hosts a file written by save() names; throws naming the file if it cannot
/// be read or names no host.
HostMesh attach_file(const std::string& path);

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
  std::uint16_t agent_port = 7070;          // each agent serves here
};

/// Hosts reached over SSH: on each, the job's baton-host and credentials are copied in (over
/// ssh's standard input, never on a command line, into a directory only the user may read) and
/// an agent is started for this controller alone (--once: it stops its procs and exits when the
/// controller is gone).
class SshJob {
 public:
  explicit SshJob(std::vector<std::string> hosts, SshOptions options = {});
  /// Stops the ssh sessions; each agent exits once this controller's links to it close.
  ~SshJob();
  SshJob(const SshJob&) = delete;
  SshJob& operator=(const SshJob&) = delete;

  /// Starts the agents (once) and attaches to them: {hosts: H} in the order given. Throws with
  /// ssh's own words, naming the host, if one cannot be reached or its agent does not start.
  HostMesh hosts();

 private:
  struct Session;
  std::vector<std::string> hosts_;
  SshOptions options_;
  std::vector<std::unique_ptr<Session>> sessions_;
  std::optional<HostMesh> mesh_;
};

/// What SlurmJob asks Slurm for, and how its agents run.
struct SlurmOptions {
  int nodes = 1;
  std::string partition;               // empty: the cluster's default partition
  std::string time;                    // the time limit, in Slurm's form ("2:00:00"); empty: the
                                       // partition's default
  int gpus_per_node = 0;               // 0: ask for none (--gpus-per-node)
  std::vector<std::string> srun_args;  // more options for srun, e.g. {"--account=ml"}
  /// The baton-host to run on the nodes: a local file, which srun copies to each node
  /// (--bcast, into its /tmp; no shared filesystem needed) unless `copy_agent` is false (then
  /// it must be at this path on every node). Empty: the one beside this program, else on PATH.
  std::string agent;
  bool copy_agent = true;
  std::string interface;  // the agents advertise this interface's address; empty: the address
                          // of their route to this controller's host
  std::uint16_t agent_port = 7070;  // each agent serves here
  /// How long hosts() waits for the nodes (queued, then starting). Past it, the job is
  /// cancelled and hosts() throws with Slurm's reason for the wait.
  std::chrono::seconds wait{600};
};

/// Nodes from Slurm: hosts() runs `srun` for `nodes` nodes, one baton-host on each, which takes
/// the job's credentials on its standard input (never a command line, never a file others may
/// read). The allocation is this controller's alone: it is cancelled (`scancel`) when the job
/// is destroyed, and when this controller dies its agents (--once) exit, which ends the
/// allocation. For an allocation that outlives the controller, see the README (attach_file).
/// Slurm's own commands must be on PATH, with SLURM_CONF set where the cluster needs it.
class SlurmJob {
 public:
  explicit SlurmJob(SlurmOptions options = {});
  /// Cancels the job (scancel) and waits for srun to end.
  ~SlurmJob();
  SlurmJob(const SlurmJob&) = delete;
  SlurmJob& operator=(const SlurmJob&) = delete;

  /// Allocates the nodes and starts the agents (once), then attaches to them: {hosts: nodes},
  /// in Slurm's node order. Throws with Slurm's own words (no such partition, allocation
  /// refused, still pending after `wait`) and what to do; nothing is left queued.
  HostMesh hosts();
  /// The Slurm job id (empty before hosts()).
  std::string id() const;
  /// Cancels the job now (scancel): the agents stop their procs and exit. Idempotent.
  void cancel();

 private:
  struct Allocation;
  SlurmOptions options_;
  std::unique_ptr<Allocation> allocation_;
  std::optional<HostMesh> mesh_;
};

/// The job of one host, this one, with no cluster: what programs use unless told otherwise.
class LocalJob {
 public:
  /// this_host().
  HostMesh hosts() const { return this_host(); }
};

}  // namespace baton::job
