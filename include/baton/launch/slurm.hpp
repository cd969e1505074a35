#pragma once

// SlurmJob: nodes from a Slurm cluster (see job.hpp for jobs in general).

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "baton/host/runtime.hpp"

namespace baton::job {

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
  /// Each agent serves here; 0: a free port of each node, which the agent reports (two jobs,
  /// or a job and the winding down of the last one, never contend for a port).
  std::uint16_t agent_port = 0;
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
  /// Nodes for `rt`'s job: they get its credentials. Used after `rt` is gone, the job throws
  /// UsageError.
  explicit SlurmJob(Runtime& rt, SlurmOptions options = {});
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
  std::shared_ptr<internal::RuntimeSlot> rt_;  // its runtime, while there is one
  SlurmOptions options_;
  std::unique_ptr<Allocation> allocation_;
  std::optional<HostMesh> mesh_;
};

}  // namespace baton::job
