#pragma once

// Jobs: where a program's hosts come from. Each host of a job runs an agent, `baton-host`,
// which starts procs there for the controller; the controller sees the hosts as one HostMesh,
// {"hosts": H}, whose spawn_procs({{"gpus", G}}) gives a {"hosts": H, "gpus": G} proc mesh.
//
// The controller and its agents share the job's credentials: a directory with its secret and
// TLS files that only its owner may read, made once with `baton-host --make-credentials DIR`
// and named by BATON_CREDENTIALS (the agents: --credentials DIR). They are never passed on a
// command line.

#include <string>
#include <vector>

#include "baton/host/runtime.hpp"
#include "baton/launch/kubernetes.hpp"
#include "baton/launch/slurm.hpp"
#include "baton/launch/ssh.hpp"

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

/// The job of one host, this one, with no cluster: what programs use unless told otherwise.
class LocalJob {
 public:
  /// this_host().
  HostMesh hosts() const { return this_host(); }
};

}  // namespace baton::job
