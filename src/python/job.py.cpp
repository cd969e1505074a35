// Hosts from Python: host meshes, attach, and the jobs that give them (SSH, Slurm, Kubernetes),
// their options set by name from the baton package, their failures raised as baton.JobError.

#include <pybind11/stl.h>
#include <unistd.h>

#include "baton/launch/job.hpp"
#include "baton/launch/spmd.hpp"
#include "host/credentials.hpp"
#include "python/bindings.hpp"

namespace baton::python {
namespace {

/// Runs `f` with the GIL released. A job's own failures (a host ssh cannot reach, a scheduler
/// that refuses or never gives the nodes: runtime errors) are raised as baton.JobError, in the
/// tool's words; baton's other errors keep their classes, and a wrong argument, a slice out of
/// range or memory running out keep theirs (ValueError, MemoryError...).
template <class F>
auto job_call(F f) {
  try {
    py::gil_scoped_release unlocked;
    return f();
  } catch (const ActorError&) {
    throw;
  } catch (const SupervisionError&) {
    throw;
  } catch (const UndeliverableError&) {
    throw;
  } catch (const TimeoutError&) {
    throw;
  } catch (const std::runtime_error& e) {
    PyErr_SetString(py::module_::import("baton._errors").attr("JobError").ptr(), e.what());
    throw py::error_already_set();
  }
}

/// Writes this runtime's credentials (the job's secret, CA and certificate) to `dir` (made, only
/// this user may read it): agents started with `--credentials DIR` serve this controller, and a
/// later run with BATON_CREDENTIALS=DIR too. They go through a pipe, never a shared file.
void save_credentials(const Runtime& rt, const std::string& dir) {
  const net::LinkOptions link = rt.link_options();
  const std::string text = internal::credentials_text(link.secret, link.tls);
  int fds[2];
  if (::pipe(fds) != 0) throw std::runtime_error("save_credentials: no pipe");
  std::size_t sent = 0;
  while (sent < text.size()) {  // credentials are a few kB: less than a pipe holds
    const ssize_t n = ::write(fds[1], text.data() + sent, text.size() - sent);
    if (n <= 0) break;
    sent += static_cast<std::size_t>(n);
  }
  ::close(fds[1]);
  try {
    (void)internal::receive_credentials(fds[0], dir);
  } catch (...) {
    ::close(fds[0]);
    throw;
  }
  ::close(fds[0]);
}

/// A job owned by Python until close(), which ends it (with the GIL released: ending a Slurm
/// job waits for its srun) rather than whenever the collector gets to it. A call in progress on
/// another thread (hosts() waiting for its nodes) holds the job until it returns, so a close()
/// meanwhile ends the job once that call is done, never under it.
template <class Job>
class Owned {
 public:
  explicit Owned(std::unique_ptr<Job> job) : job_(std::move(job)) {}
  Owned(Owned&&) noexcept = default;
  Owned& operator=(Owned&&) = delete;
  Owned(const Owned&) = delete;
  Owned& operator=(const Owned&) = delete;
  ~Owned() { close(); }

  /// Runs f(job) with the GIL released.
  template <class F>
  auto with_job(F f) {
    if (!job_) throw UsageError("this job was closed; make a new one");
    return job_call([f = std::move(f), job = job_]() mutable {
      const std::shared_ptr<Job> held = std::move(job);  // let go here, with the GIL released
      return f(*held);
    });
  }
  HostMesh hosts() {
    return with_job([](Job& job) { return job.hosts(); });
  }
  void close() {
    if (!job_) return;
    std::shared_ptr<Job> job = std::move(job_);
    py::gil_scoped_release unlocked;
    job.reset();
  }

 private:
  std::shared_ptr<Job> job_;
};

void bind_options(py::module_& m) {
  py::class_<job::SshOptions>(m, "SshOptions")
      .def(py::init<>())
      .def_readwrite("user", &job::SshOptions::user)
      .def_readwrite("port", &job::SshOptions::port)
      .def_readwrite("identity_file", &job::SshOptions::identity_file)
      .def_readwrite("ssh_args", &job::SshOptions::ssh_args)
      .def_readwrite("agent", &job::SshOptions::agent)
      .def_readwrite("remote_dir", &job::SshOptions::remote_dir)
      .def_readwrite("agent_port", &job::SshOptions::agent_port);
  py::class_<job::SlurmOptions>(m, "SlurmOptions")
      .def(py::init<>())
      .def_readwrite("nodes", &job::SlurmOptions::nodes)
      .def_readwrite("partition", &job::SlurmOptions::partition)
      .def_readwrite("time", &job::SlurmOptions::time)
      .def_readwrite("gpus_per_node", &job::SlurmOptions::gpus_per_node)
      .def_readwrite("srun_args", &job::SlurmOptions::srun_args)
      .def_readwrite("agent", &job::SlurmOptions::agent)
      .def_readwrite("copy_agent", &job::SlurmOptions::copy_agent)
      .def_readwrite("interface", &job::SlurmOptions::interface)
      .def_readwrite("agent_port", &job::SlurmOptions::agent_port)
      .def_property(
          "wait", [](const job::SlurmOptions& o) { return o.wait.count(); },
          [](job::SlurmOptions& o, std::int64_t s) { o.wait = std::chrono::seconds(s); });
  py::class_<job::KubernetesOptions>(m, "KubernetesOptions")
      .def(py::init<>())
      .def_readwrite("name", &job::KubernetesOptions::name)
      .def_readwrite("namespace", &job::KubernetesOptions::kube_namespace)
      .def_readwrite("image", &job::KubernetesOptions::image)
      .def_readwrite("pods", &job::KubernetesOptions::pods)
      .def_readwrite("gpus_per_pod", &job::KubernetesOptions::gpus_per_pod)
      .def_readwrite("gpu_resource", &job::KubernetesOptions::gpu_resource)
      .def_readwrite("agent", &job::KubernetesOptions::agent)
      .def_readwrite("agent_port", &job::KubernetesOptions::agent_port)
      .def_readwrite("cluster_domain", &job::KubernetesOptions::cluster_domain)
      .def_property(
          "wait", [](const job::KubernetesOptions& o) { return o.wait.count(); },
          [](job::KubernetesOptions& o, std::int64_t s) { o.wait = std::chrono::seconds(s); });
}

}  // namespace

void bind_jobs(py::module_& m) {
  // Hosts of a job, each running an agent (baton-host): their procs run this interpreter there.
  py::class_<HostMesh>(m, "HostMesh")
      .def("size", &HostMesh::size)
      .def("spawn_procs_async",
           [](const HostMesh& h, const Dims& dims) {
             return wrap(h.spawn_procs_async(dims),
                         [](const ProcMesh& procs) { return py::cast(procs); });
           })
      .def("stop", [](const HostMesh& h) { return wrap(h.stop()); });
  m.def("attach", [](const std::vector<std::string>& addresses) {
    return job_call([&] { return job::attach(addresses); });
  });
  m.def("attach_file",
        [](const std::string& path) { return job_call([&] { return job::attach_file(path); }); });
  m.def("save", [](const HostMesh& hosts, const std::string& path) {
    job_call([&] { job::save(hosts, path); });
  });
  m.def("run_spmd", [](const ProcMesh& procs, std::vector<std::string> argv,
                       std::vector<std::string> env, std::uint16_t master_port) {
    SpmdOptions options{std::move(argv), std::move(env), master_port};
    return wrap(run_spmd(procs, options),
                [](const std::vector<int>& codes) { return py::cast(codes); });
  });
  m.def("save_credentials", [](const py::object& rt, const std::string& dir) {
    job_call([&] { save_credentials(runtime_of(rt), dir); });
  });

  bind_options(m);
  using Ssh = Owned<job::SshJob>;
  py::class_<Ssh>(m, "SshJob")
      .def(py::init([](const py::object& rt, const std::vector<std::string>& hosts,
                       const job::SshOptions& o) {
        return Ssh(std::make_unique<job::SshJob>(runtime_of(rt), hosts, o));
      }))
      .def("hosts", &Ssh::hosts)
      .def("close", &Ssh::close);
  using Slurm = Owned<job::SlurmJob>;
  py::class_<Slurm>(m, "SlurmJob")
      .def(py::init([](const py::object& rt, const job::SlurmOptions& o) {
        return Slurm(std::make_unique<job::SlurmJob>(runtime_of(rt), o));
      }))
      .def("hosts", &Slurm::hosts)
      .def("id", [](Slurm& s) { return s.with_job([](job::SlurmJob& j) { return j.id(); }); })
      .def("cancel", [](Slurm& s) { s.with_job([](job::SlurmJob& j) { j.cancel(); }); })
      .def("close", &Slurm::close);
  using Kubernetes = Owned<job::KubernetesJob>;
  py::class_<Kubernetes>(m, "KubernetesJob")
      .def(py::init([](const job::KubernetesOptions& o) {
        return Kubernetes(std::make_unique<job::KubernetesJob>(o));
      }))
      .def("hosts", &Kubernetes::hosts)
      .def("close", &Kubernetes::close);
  m.def("kubernetes_manifests", [](const py::object& rt, const job::KubernetesOptions& o) {
    return job::kubernetes_manifests(runtime_of(rt), o);
  });
  m.def("write_kubernetes_manifests",
        [](const py::object& rt, const job::KubernetesOptions& o, const std::string& path) {
          job::write_kubernetes_manifests(runtime_of(rt), o, path);
        });
  m.def("kubernetes_addresses", &job::kubernetes_addresses);
}

}  // namespace baton::python
