#pragma once

// Hosts on Kubernetes: pods of a StatefulSet, each running baton-host as its container's entry
// point, found by their DNS names under a headless Service (see job.hpp for jobs in general).
//
//   job::write_kubernetes_manifests(rt, options, "baton.yaml");   // once, by the controller
//   kubectl apply -f baton.yaml                               // by the user
//   HostMesh hosts = job::KubernetesJob(options).hosts();     // the controller, in the cluster
//
// The manifests hold the job's credentials (a Secret, mounted read-only, mode 0400, into each
// pod), so the file they are written to is private. The agents serve whichever controller has
// the credentials, and stop a controller's procs when it is gone; `kubectl delete -f` ends them.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "baton/host/runtime.hpp"

namespace baton::job {

/// The pods to run and where to find them.
struct KubernetesOptions {
  std::string name = "baton";  // the StatefulSet, Service and Secret; pods NAME-0...
  std::string kube_namespace = "default";
  std::string image;                            // required: an image with baton-host and what the
                                                // controller's program needs to run (its libraries)
  int pods = 1;                                 // the hosts: {hosts: pods}
  int gpus_per_pod = 0;                         // asked of the scheduler as `gpu_resource`
  std::string gpu_resource = "nvidia.com/gpu";  // "amd.com/gpu" on AMD nodes
  std::string agent = "baton-host";             // the entry point, in the image
  std::uint16_t agent_port = 7070;
  std::string cluster_domain = "cluster.local";
  /// How long hosts() waits for every pod's agent to answer (pods being scheduled, images
  /// pulled); past it, hosts() throws naming the pods that did not.
  std::chrono::seconds wait{300};
};

/// The manifests, as one YAML text: a Secret with the job's credentials (this runtime's), a
/// headless Service, and a StatefulSet of `pods` pods (started in parallel) each running
/// `baton-host` with its pod's IP as the address it advertises. Throws UsageError if `options`
/// cannot make a valid manifest (no image, a name Kubernetes refuses).
std::string kubernetes_manifests(const Runtime& rt, const KubernetesOptions& options);
/// Writes kubernetes_manifests() to `path`, readable by this user alone (it holds keys).
void write_kubernetes_manifests(const Runtime& rt, const KubernetesOptions& options,
                                const std::string& path);
/// Where each pod's agent is: "NAME-i.NAME.NAMESPACE.svc.DOMAIN:PORT", in pod order.
std::vector<std::string> kubernetes_addresses(const KubernetesOptions& options);

/// The pods of manifests already applied, as hosts.
class KubernetesJob {
 public:
  explicit KubernetesJob(KubernetesOptions options);
  /// Attaches to every pod's agent by its DNS name, waiting up to `wait` for them; throws
  /// naming the pods that did not answer, with what to look at (`kubectl get pods`, `kubectl
  /// logs`).
  HostMesh hosts();

 private:
  KubernetesOptions options_;
  std::optional<HostMesh> mesh_;
};

}  // namespace baton::job
