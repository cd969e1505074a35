// Kubernetes: the manifests, read back by a YAML parser (Debian's python3-yaml), and pods run
// as the manifests say without a cluster: each pod is a network namespace host whose
// container command and arguments are taken from the StatefulSet as written, run in a mount
// namespace of its own with the Secret's bytes mounted where the manifest mounts them, its pod
// IP where the downward API puts it; the controller finds the pods by their DNS names, which
// this test's own /etc/hosts (bind-mounted in a mount namespace of its own) resolves, as a
// cluster's DNS would. Needs root, iproute2, util-linux and python3-yaml (make deps).

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "baton/launch/kubernetes.hpp"
#include "host/hosts.test.hpp"
#include "host/netns.test.hpp"
#include "launch/command.hpp"

namespace baton {
namespace {

using test::Member;
using ::testing::HasSubstr;

/// Why this process could not have a private /etc/hosts (empty: it has one).
std::string& private_hosts_failure() {
  static std::string why;
  return why;
}

/// Gives this process (still single-threaded) a mount namespace of its own in which /etc/hosts
/// is a copy the tests may add pods' names to.
void make_private_hosts() {
  const std::string copy = "/tmp/baton-k8s-hosts-" + std::to_string(::getpid());
  std::error_code ec;
  std::filesystem::copy_file("/etc/hosts", copy, std::filesystem::copy_options::overwrite_existing,
                             ec);
  if (ec) {
    private_hosts_failure() = "cannot copy /etc/hosts: " + ec.message();
  } else if (::unshare(CLONE_NEWNS) != 0) {
    private_hosts_failure() = std::string("unshare(CLONE_NEWNS): ") + std::strerror(errno);
  } else if (::mount("none", "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
             ::mount(copy.c_str(), "/etc/hosts", nullptr, MS_BIND, nullptr) != 0) {
    private_hosts_failure() = std::string("mount: ") + std::strerror(errno);
  }
  ::unlink(copy.c_str());  // the bind mount keeps it while this process runs
}

/// What the manifests say, flattened: "2.spec.replicas" -> "3" (document index first), and
/// the Secret's credentials, decoded, written to `secret`.
std::map<std::string, std::string> read_back(const std::string& yaml, const std::string& secret) {
  static const char* const kFlatten = R"(
import base64, sys, yaml
docs = list(yaml.safe_load_all(open(sys.argv[1])))
def walk(path, v):
    if isinstance(v, dict):
        for k, x in v.items(): walk(path + [str(k)], x)
    elif isinstance(v, list):
        for i, x in enumerate(v): walk(path + [str(i)], x)
    else:
        print(".".join(path) + "=" + str(v))
for i, d in enumerate(docs): walk([str(i)], d)
for d in docs:
    if d["kind"] == "Secret":
        open(sys.argv[2], "wb").write(base64.b64decode(d["data"]["credentials"]))
)";
  const internal::Ran r =
      internal::run_command({"/usr/bin/python3", "-c", kFlatten, yaml, secret}, "python3-yaml");
  if (!internal::succeeded(r)) throw std::runtime_error("the YAML did not parse: " + r.err);
  std::map<std::string, std::string> out;
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);) {
    const auto eq = line.find('=');
    out[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return out;
}

job::KubernetesOptions trainer() {
  job::KubernetesOptions o;
  o.name = "trainer";
  o.kube_namespace = "ml";
  o.image = "registry.example/baton:1";
  o.pods = 2;
  o.agent_port = 17160;
  return o;
}

TEST(Kubernetes, TheManifestsAreASecretAHeadlessServiceAndAStatefulSetRunningBatonHost) {
  test::TempDir dir;
  auto o = trainer();
  o.pods = 3;
  o.gpus_per_pod = 2;
  const std::string path = (dir.path / "baton.yaml").string();
  job::write_kubernetes_manifests(Runtime::get(), o, path);
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u) << "the manifests hold the job's keys";
  auto m = read_back(path, (dir.path / "secret").string());
  EXPECT_EQ(m["0.kind"], "Secret");
  EXPECT_EQ(m["1.kind"], "Service");
  EXPECT_EQ(m["1.spec.clusterIP"], "None");
  EXPECT_EQ(m["2.kind"], "StatefulSet");
  EXPECT_EQ(m["2.metadata.namespace"], "ml");
  EXPECT_EQ(m["2.spec.serviceName"], "trainer");
  EXPECT_EQ(m["2.spec.replicas"], "3");
  // The selectors find the pods the StatefulSet makes.
  for (const char* key : {"app.kubernetes.io/name", "app.kubernetes.io/instance"}) {
    const std::string label = m[std::string("2.spec.template.metadata.labels.") + key];
    EXPECT_FALSE(label.empty()) << key;
    EXPECT_EQ(m[std::string("1.spec.selector.") + key], label) << key;
    EXPECT_EQ(m[std::string("2.spec.selector.matchLabels.") + key], label) << key;
  }
  const std::string c = "2.spec.template.spec.containers.0.";
  EXPECT_EQ(m[c + "image"], "registry.example/baton:1");
  EXPECT_EQ(m[c + "command.0"], "baton-host");
  EXPECT_EQ(m[c + "resources.limits.nvidia.com/gpu"], "2");
  EXPECT_EQ(m[c + "env.0.name"], "BATON_HOST_ADDRESS");
  EXPECT_EQ(m[c + "env.0.valueFrom.fieldRef.fieldPath"], "status.podIP");
  EXPECT_EQ(m["2.spec.template.spec.volumes.0.secret.secretName"], m["0.metadata.name"]);
  EXPECT_EQ(m["2.spec.template.spec.volumes.0.secret.defaultMode"], "256");  // 0400
  // The Secret carries this job's credentials, byte for byte.
  const net::LinkOptions link = Runtime::get().link_options();
  EXPECT_EQ(internal::file_text((dir.path / "secret").string()),
            internal::credentials_text(link.secret, link.tls));
  EXPECT_EQ(job::kubernetes_addresses(o).at(2), "trainer-2.trainer.ml.svc.cluster.local:17160");
}

TEST(Kubernetes, OptionsKubernetesWouldRefuseAreErrorsSayingWhy) {
  auto o = trainer();
  o.name = "Trainer_1";
  try {
    (void)job::kubernetes_manifests(Runtime::get(), o);
    ADD_FAILURE() << "a name Kubernetes refuses was accepted";
  } catch (const UsageError& e) {
    EXPECT_THAT(e.what(), HasSubstr("lowercase letters"));
  }
  o = trainer();
  o.image.clear();
  EXPECT_THROW((void)job::kubernetes_manifests(Runtime::get(), o), UsageError);
  o = trainer();
  o.pods = 0;
  EXPECT_THROW(job::KubernetesJob{o}, UsageError);
}

/// One pod: the container's command and arguments from the manifest, in the namespace host's
/// network, in a mount namespace of its own where the Secret is mounted as the manifest says.
class Pod {
 public:
  Pod(const std::map<std::string, std::string>& m, test::NetHosts& net, std::size_t i,
      const std::filesystem::path& secret, const std::filesystem::path& dir)
      : volume_(dir / ("pod-" + std::to_string(i))) {
    const std::string c = "2.spec.template.spec.containers.0.";
    const std::string mount = m.at(c + "volumeMounts.0.mountPath");
    const std::string cache = m.at(c + "volumeMounts.1.mountPath");
    std::string file;  // the Secret's key: its file in the volume
    for (const auto& [key, value] : m) {
      if (key.starts_with("0.data.")) file = key.substr(7);
    }
    std::filesystem::create_directories(volume_);
    std::filesystem::copy_file(secret, volume_ / file);
    ::chmod(
        (volume_ / file).c_str(),
        static_cast<mode_t>(std::stoi(m.at("2.spec.template.spec.volumes.0.secret.defaultMode"))));
    // The mount points, on tmpfs so nothing is made outside; then the container's entry point.
    const std::string script =
        "set -e; mount -t tmpfs tmpfs " + std::filesystem::path(mount).parent_path().string() +
        "; mkdir -p " + mount + "; mount --bind " + volume_.string() + " " + mount +
        "; mount -t tmpfs tmpfs " + std::filesystem::path(cache).parent_path().string() +
        "; mkdir -p " + cache + "; exec \"$@\"";
    std::vector<std::string> argv{"netns", "exec", net.ns(i), "unshare", "--mount",
                                  "sh",    "-c",   script,    "sh",      BATON_HOST_BIN};
    for (int a = 0; m.count(c + "args." + std::to_string(a)) != 0; ++a) {
      argv.push_back(m.at(c + "args." + std::to_string(a)));
    }
    auto env = test::environment({"BATON_"});
    EXPECT_EQ(m.at(c + "env.0.valueFrom.fieldRef.fieldPath"), "status.podIP");
    env.push_back(m.at(c + "env.0.name") + "=" + net.address(i));
    child_ = test::start_self_as(test::ip_program(), "ip", argv, std::move(env), STDOUT_FILENO);
    out_ = ::fdopen(child_.from, "r");
    char line[256] = {};
    if (std::fgets(line, sizeof line, out_) == nullptr) {
      throw std::runtime_error("pod " + std::to_string(i) + " said nothing (see above)");
    }
    said_ = line;
  }
  ~Pod() {
    ::kill(child_.pid, SIGTERM);
    ::waitpid(child_.pid, nullptr, 0);
    if (out_ != nullptr) std::fclose(out_);
  }
  Pod(const Pod&) = delete;
  Pod& operator=(const Pod&) = delete;
  const std::string& said() const { return said_; }

 private:
  std::filesystem::path volume_;
  test::SelfChild child_;
  FILE* out_ = nullptr;
  std::string said_;
};

TEST(Kubernetes, PodsRunAsTheManifestsSayAreFoundByTheirDnsNamesAndRunProcs) {
  ASSERT_TRUE(private_hosts_failure().empty())
      << "cannot give this test a private /etc/hosts (it needs root): " << private_hosts_failure();
  std::unique_ptr<test::NetHosts> net;
  try {
    net = std::make_unique<test::NetHosts>(2);
  } catch (const std::exception& e) {
    FAIL() << "cannot make network namespaces (this test needs root and iproute2): " << e.what();
  }
  test::TempDir dir;
  const auto o = trainer();
  job::write_kubernetes_manifests(Runtime::get(), o, (dir.path / "baton.yaml").string());
  const auto m = read_back((dir.path / "baton.yaml").string(), (dir.path / "secret").string());
  std::vector<std::unique_ptr<Pod>> pods;
  std::ofstream hosts("/etc/hosts", std::ios::app);  // this test's own copy
  for (std::size_t i = 0; i < 2; ++i) {
    pods.push_back(std::make_unique<Pod>(m, *net, i, dir.path / "secret", dir.path));
    EXPECT_THAT(pods.back()->said(), HasSubstr("tcp://" + net->address(i) + ":17160"));
    // What the cluster's DNS says for a pod of a headless Service.
    const std::string name = job::kubernetes_addresses(o).at(i);
    hosts << net->address(i) << " " << name.substr(0, name.find(':')) << "\n";
  }
  hosts.close();
  ProcMesh procs = job::KubernetesJob(o).hosts().spawn_procs({{"gpus", 2}});
  EXPECT_EQ(procs.shape(), Shape::of({{"hosts", 2}, {"gpus", 2}}));
  auto members = procs.spawn<Member>("members");
  EXPECT_EQ(members.call(&Member::twice, 4).get().values(), (std::vector<int>{8, 8, 8, 8}));
  EXPECT_EQ(members.slice("hosts", 1).call(&Member::twice, 5).get().values(),
            (std::vector<int>{10, 10}));
  procs.stop().get();
}

TEST(Kubernetes, PodsThatNeverAnswerAreAnErrorNamingThemAndWhatToLookAt) {
  auto o = trainer();
  o.name = "absent";
  o.wait = std::chrono::seconds(2);
  try {
    (void)job::KubernetesJob(o).hosts();
    ADD_FAILURE() << "pods that do not exist answered";
  } catch (const std::exception& e) {
    EXPECT_THAT(e.what(), HasSubstr("absent-0.absent.ml.svc.cluster.local"));
    EXPECT_THAT(e.what(), HasSubstr("kubectl get pods -n ml"));
  }
}

}  // namespace
}  // namespace baton

int main(int argc, char** argv) {
  if (::getenv("BATON_PROC") == nullptr) baton::make_private_hosts();
  return baton::test::run_hosts_test(argc, argv);
}
