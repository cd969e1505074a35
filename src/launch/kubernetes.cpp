// Kubernetes: the manifests that run baton-host in the pods of a StatefulSet under a headless
// Service, and the controller's attach to those pods by their DNS names.

#include "baton/launch/kubernetes.hpp"

#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <string>
#include <thread>

#include "baton/launch/job.hpp"
#include "host/credentials.hpp"

namespace baton::job {
namespace {

using Clock = std::chrono::steady_clock;
constexpr const char* kMount = "/var/run/baton";  // the Secret, in each pod
constexpr const char* kCache = "/var/cache/baton";

/// Throws unless `name` is a DNS label Kubernetes accepts for `what` (at most `longest`).
void check_label(const std::string& name, const char* what, std::size_t longest) {
  bool ok = !name.empty() && name.size() <= longest && std::isalnum(name.front()) != 0 &&
            std::isalnum(name.back()) != 0;
  for (char c : name) {
    ok = ok && ((std::islower(c) != 0) || (std::isdigit(c) != 0) || c == '-');
  }
  if (!ok) {
    throw UsageError("KubernetesOptions: " + std::string(what) + " '" + name +
                     "' is not a name Kubernetes accepts: lowercase letters, digits and '-', "
                     "starting and ending with a letter or digit, at most " +
                     std::to_string(longest) + " characters");
  }
}

std::string base64(const std::string& bytes) {
  std::string out(4 * ((bytes.size() + 2) / 3) + 1, '\0');
  const int n = ::EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                  reinterpret_cast<const unsigned char*>(bytes.data()),
                                  static_cast<int>(bytes.size()));
  out.resize(static_cast<std::size_t>(n));
  return out;
}

/// A YAML double-quoted string.
std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

}  // namespace

std::string kubernetes_manifests(const Runtime& rt, const KubernetesOptions& o) {
  // A StatefulSet's pods carry a label of its name and a hash: its name may have 52 characters.
  check_label(o.name, "name", 52);
  check_label(o.kube_namespace, "kube_namespace", 63);
  if (o.image.empty()) {
    throw UsageError(
        "KubernetesOptions: no image: give one with baton-host and what your "
        "program needs (the one the controller runs in, say)");
  }
  if (o.pods < 1) throw UsageError("KubernetesOptions: pods must be 1 or more");
  if (o.gpus_per_pod < 0) throw UsageError("KubernetesOptions: gpus_per_pod must be 0 or more");
  const net::LinkOptions link = rt.link_options();
  if (!link.tls.enabled()) {
    throw UsageError("kubernetes_manifests: the runtime has no TLS files to put in the Secret");
  }
  const std::string credentials = internal::credentials_text(link.secret, link.tls);
  const std::string port = std::to_string(o.agent_port);
  // The pods' labels, indented by `n`.
  const auto labels = [&](std::size_t n) {
    const std::string pad(n, ' ');
    return pad + "app.kubernetes.io/name: baton\n" + pad + "app.kubernetes.io/instance: " + o.name +
           "\n";
  };
  const std::string meta = "metadata:\n  name: " + o.name + "\n  namespace: " + o.kube_namespace +
                           "\n  labels:\n" + labels(4);
  std::string y;
  y += "# The hosts of a baton job: " + std::to_string(o.pods) +
       " pods, each running baton-host. Apply with\n# `kubectl apply -f` this file; end with "
       "`kubectl delete -f` it. It holds the job's\n# credentials: keep it private.\n";
  y += "apiVersion: v1\nkind: Secret\n" + meta +
       "type: Opaque\ndata:\n  credentials: " + base64(credentials) + "\n";
  y += "---\napiVersion: v1\nkind: Service\n" + meta +
       "spec:\n  clusterIP: None\n  publishNotReadyAddresses: true\n  selector:\n" + labels(4) +
       "  ports:\n  - name: agent\n    port: " + port + "\n    targetPort: " + port + "\n";
  y += "---\napiVersion: apps/v1\nkind: StatefulSet\n" + meta + "spec:\n  serviceName: " + o.name +
       "\n  replicas: " + std::to_string(o.pods) +
       "\n  podManagementPolicy: Parallel\n  selector:\n    matchLabels:\n" + labels(6) +
       "  template:\n    metadata:\n      labels:\n" + labels(8) +
       "    spec:\n      containers:\n      - name: baton-host\n        image: " + quoted(o.image) +
       "\n        command: [" + quoted(o.agent) + "]\n        args: [\"--credentials\", \"" +
       kMount + "/credentials\", \"--port\", \"" + port + "\", \"--cache\", \"" + kCache + "\"]\n" +
       "        env:\n        - name: BATON_HOST_ADDRESS  # the address the agent advertises\n" +
       "          valueFrom:\n            fieldRef:\n              fieldPath: status.podIP\n" +
       "        ports:\n        - name: agent\n          containerPort: " + port + "\n";
  if (o.gpus_per_pod > 0) {
    y += "        resources:\n          limits:\n            " + o.gpu_resource + ": " +
         std::to_string(o.gpus_per_pod) + "\n";
  }
  y += std::string("        volumeMounts:\n        - name: credentials\n          mountPath: ") +
       kMount +
       "\n          readOnly: true\n        - name: cache\n          mountPath: " + kCache +
       "\n      volumes:\n      - name: credentials\n        secret:\n" +
       "          secretName: " + o.name + "\n          defaultMode: 256  # 0400\n" +
       "      - name: cache\n        emptyDir: {}\n";
  return y;
}

void write_kubernetes_manifests(const Runtime& rt, const KubernetesOptions& options,
                                const std::string& path) {
  const std::string text = kubernetes_manifests(rt, options);
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) throw UsageError("write_kubernetes_manifests: cannot write " + path);
  ::fchmod(fd, 0600);  // an existing file too: it holds the job's keys
  const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ::close(fd);
  if (!ok) throw UsageError("write_kubernetes_manifests: cannot write " + path);
}

std::vector<std::string> kubernetes_addresses(const KubernetesOptions& o) {
  std::vector<std::string> out;
  out.reserve(static_cast<std::size_t>(std::max(o.pods, 0)));
  for (int i = 0; i < o.pods; ++i) {
    out.push_back(o.name + "-" + std::to_string(i) + "." + o.name + "." + o.kube_namespace +
                  ".svc." + o.cluster_domain + ":" + std::to_string(o.agent_port));
  }
  return out;
}

KubernetesJob::KubernetesJob(KubernetesOptions options) : options_(std::move(options)) {
  check_label(options_.name, "name", 52);
  check_label(options_.kube_namespace, "kube_namespace", 63);
  if (options_.pods < 1) throw UsageError("KubernetesOptions: pods must be 1 or more");
}

HostMesh KubernetesJob::hosts() {
  if (mesh_) return *mesh_;
  const auto addresses = kubernetes_addresses(options_);
  const auto deadline = Clock::now() + options_.wait;
  // Pods come as Kubernetes schedules them and pulls their image: each try attaches to all.
  for (;;) {
    try {
      mesh_ = attach(addresses);
      return *mesh_;
    } catch (const UsageError&) {
      throw;
    } catch (const std::exception& e) {
      if (Clock::now() >= deadline) {
        throw std::runtime_error(
            "KubernetesJob: the pods of " + options_.name + " did not all answer within " +
            std::to_string(options_.wait.count()) + " s: " + e.what() +
            " (see `kubectl get pods -n " + options_.kube_namespace +
            " -l app.kubernetes.io/instance=" + options_.name + "` and `kubectl logs -n " +
            options_.kube_namespace + " " + options_.name + "-0`)");
      }
    }
    std::this_thread::sleep_for(std::chrono::seconds(1));  // then ask the cluster again
  }
}

}  // namespace baton::job
