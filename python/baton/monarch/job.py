"""monarch.job over baton's jobs: a job is a specification of named host meshes; apply() brings
it into existence, state() gives its host meshes (JobState: state.trainers, ...), and a job
saved in a cached file (.monarch/job_state.pkl) is reused by a later run of the program when it
still can run the same specification.

    LocalJob(hosts=("hosts",))           each mesh is this host (this_host())
    ProcessJob({"trainers": 2})          each host a baton-host agent on this machine (loopback);
                                         they outlive the program until kill(), for reuse
    SlurmJob({"trainers": 2}, ...)       baton.SlurmJob, one allocation per mesh
    SSHJob(...).add_mesh(name, hosts)    baton.SshJob per mesh
    KubernetesJob(...).add_mesh(...)     baton.KubernetesJob per mesh

baton's Slurm, SSH and Kubernetes jobs belong to the program that made them (their agents stop
with it), so a cached one is not reused by a later run: a new one is made. A ProcessJob's agents
are reused, with the credentials it made (the later run's runtime takes them, if it has not
started yet)."""

import os
import pickle
import uuid

from .. import _job, _runtime
from .._errors import UsageError
from .._mesh import attach, this_host
from ._unsupported import MonarchUnsupported, Unsupported

DEFAULT_JOB_PATH = ".monarch/job_state.pkl"


class JobState:
    """The host meshes of a job, one attribute a mesh: state.trainers."""

    def __init__(self, hosts):
        self._hosts = dict(hosts)

    def __getattr__(self, name):
        if name.startswith("__") or name == "_hosts":
            raise AttributeError(name)
        try:
            return self._hosts[name]
        except KeyError:
            have = ", ".join(sorted(self._hosts))
            raise AttributeError(f"this job has no host mesh {name!r} (its meshes: {have})")

    def __repr__(self):
        return f"JobState({', '.join(sorted(self._hosts))})"


class JobTrait:
    """A job: a specification (set at construction) and, once applied, what runs it."""

    def __init__(self):
        self._running_job = None  # self once applied, or the cached job that runs this spec
        self._apply_id = None

    # What a subclass gives.
    def _create(self, client_script):
        raise NotImplementedError

    def _state(self):
        raise NotImplementedError

    def _kill(self):
        pass

    def can_run(self, spec):
        """Whether this (applied) job can run `spec` in its place: a cached job is reused when
        it can."""
        return False

    # Monarch's job life cycle.
    def apply(self, client_script=None):
        """Brings the job into existence (a no-op if it was applied already)."""
        if self._running_job is None:
            self._create(client_script)
            self._apply_id = str(uuid.uuid4())
            self._running_job = self

    @property
    def apply_id(self):
        running = self._running_job
        return None if running is None else running._apply_id

    @property
    def active(self):
        return self._running_job is not None

    def state(self, cached_path=DEFAULT_JOB_PATH):
        """The job's host meshes (a JobState). Not yet applied, it first looks for a job saved at
        `cached_path` that can run this specification and uses it; else it applies this one and
        saves it there (None: no cache)."""
        if self._running_job is None:
            cached = _load_cached(cached_path, self)
            if cached is not None:
                self._running_job = cached
            else:
                self.apply()
                if cached_path is not None:
                    self.dump(cached_path)
        return self._running_job._state()

    def dump(self, filename):
        """Saves the job to `filename` (following a symlink there)."""
        path = os.path.realpath(filename) if os.path.islink(filename) else filename
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with open(path, "wb") as f:
            pickle.dump(self, f)

    def dumps(self):
        return pickle.dumps(self)

    def kill(self):
        """Ends the job (its hosts, and what runs on them)."""
        running, self._running_job = self._running_job, None
        if running is not None:
            running._kill()
            running._running_job = None

    def enable_telemetry(self, *args, **kwargs):
        """Monarch's telemetry services; baton records none yet, so this does nothing."""

    def enable_admin(self, *args, **kwargs):
        """Monarch's mesh admin agent; baton has none yet, so this does nothing."""

    def remote_mount(self, *args, **kwargs):
        raise MonarchUnsupported(
            "JobTrait.remote_mount is not supported by baton: share the directory with the hosts "
            "yourself (baton runs procs with this program's PYTHONPATH)"
        )

    gather_mount = remote_mount

    # Pickled: the specification and where it runs, never live handles.
    _LIVE = ("_baton_jobs", "_hosts_cache")

    def __getstate__(self):
        state = {k: v for k, v in self.__dict__.items() if k not in self._LIVE}
        if state.get("_running_job") is self:
            state["_running_job"] = "self"
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        if self.__dict__.get("_running_job") == "self":
            self._running_job = self


def _load_cached(path, spec):
    if path is None:
        return None
    try:
        job = job_load(path)
    except (FileNotFoundError, EOFError, pickle.UnpicklingError, AttributeError):
        return None
    if job._running_job is None:
        return None
    running = job._running_job
    if running.can_run(spec):
        return running
    running._kill()  # a job that cannot run this one: ended, and forgotten
    try:
        os.remove(os.path.realpath(path))
    except FileNotFoundError:
        pass
    return None


def job_load(filename=DEFAULT_JOB_PATH):
    """The job saved at `filename` (by dump())."""
    with open(filename, "rb") as f:
        return pickle.load(f)


def job_loads(data):
    return pickle.loads(data)


class LocalJob(JobTrait):
    """Each host mesh is this host: LocalJob(hosts=("trainers", "dataloaders")). With a
    client_script, apply() runs it as a program of its own (python -m baton.monarch SCRIPT),
    its output in .monarch/logs."""

    def __init__(self, hosts=("hosts",)):
        super().__init__()
        self._host_names = tuple(hosts)
        self._pid = None

    def _create(self, client_script):
        if client_script is None:
            return
        import subprocess
        import sys
        import tempfile

        os.makedirs(".monarch/logs", exist_ok=True)
        self._log_dir = tempfile.mkdtemp(prefix="job_", dir=".monarch/logs")
        with open(os.path.join(self._log_dir, "stdout.log"), "w") as out, \
                open(os.path.join(self._log_dir, "stderr.log"), "w") as err:
            proc = subprocess.Popen([sys.executable, "-m", "baton.monarch", client_script],
                                    stdout=out, stderr=err, start_new_session=True)
        self._pid = proc.pid
        self.process = proc

    def _state(self):
        host = this_host()
        return JobState({name: host for name in self._host_names})

    def _kill(self):
        if self._pid is not None:
            import signal

            try:
                os.kill(self._pid, signal.SIGTERM)
            except OSError:
                pass


class ProcessJob(JobTrait):
    """Each host a baton-host agent on this machine: ProcessJob({"trainers": 2}) is two hosts,
    its procs under agents as on a cluster. The agents outlive the program until kill(), so a
    later run reuses them through the cached job file; `env` adds to their environment."""

    def __init__(self, meshes, env=None):
        super().__init__()
        if not isinstance(meshes, dict) or not all(
            isinstance(n, int) and n > 0 for n in meshes.values()
        ):
            raise UsageError(f"ProcessJob takes {{mesh name: number of hosts}}, not {meshes!r}")
        self._meshes = dict(meshes)
        self._env = dict(env or {})
        self._dir = None
        self._pids = []
        self._addresses = {}

    def _create(self, client_script):
        import tempfile

        if client_script is not None:
            raise UsageError("ProcessJob cannot run a client script; use LocalJob")
        self._dir = tempfile.mkdtemp(prefix="baton-process-job-")
        for name, n in self._meshes.items():
            agents = _job._Agents(n, self._env, where=self._dir, name=name).start()
            self._pids += agents.pids
            self._addresses[name] = agents.addresses

    def _credentials(self):
        return os.path.join(self._dir, "credentials")

    def _alive(self):
        return _job._Agents.adopt(self._pids, self._dir).alive()

    def can_run(self, spec):
        # A later run: its runtime must take the agents' credentials, so it must not have
        # started with others.
        started_elsewhere = _runtime.running() and os.environ.get(
            "BATON_CREDENTIALS") != self._credentials()
        return (isinstance(spec, ProcessJob) and spec._meshes == self._meshes
                and self._dir is not None and self._alive() and not started_elsewhere)

    def _state(self):
        if not _runtime.running() and os.path.isdir(self._credentials()):
            os.environ["BATON_CREDENTIALS"] = self._credentials()  # as the agents have them
        meshes = self.__dict__.setdefault("_hosts_cache", {})
        for name, addresses in self._addresses.items():
            if name not in meshes:
                meshes[name] = attach(list(addresses))
        return JobState(meshes)

    def _kill(self):
        _job._Agents.adopt(self._pids, self._dir).close()  # and its directory goes
        self._pids = []
        self.__dict__.pop("_hosts_cache", None)


class _PerMesh(JobTrait):
    """A job made of one of baton's jobs per host mesh, which end with this program."""

    def __init__(self):
        super().__init__()
        self._specs = {}

    def _baton_job(self, name, spec):
        raise NotImplementedError

    def _create(self, client_script):
        if client_script is not None:
            raise UsageError(f"{type(self).__name__} cannot run a client script in baton; run "
                             "the program on the controller's host")
        self._baton_jobs = {name: self._baton_job(name, spec)
                            for name, spec in self._specs.items()}

    def _state(self):
        jobs = getattr(self, "_baton_jobs", None)
        if jobs is None:
            raise UsageError(f"this {type(self).__name__} ended with the program that made it; "
                             "make a new one")
        return JobState({name: job.hosts() for name, job in jobs.items()})

    def _kill(self):
        for job in getattr(self, "_baton_jobs", {}).values():
            job.close()
        self._baton_jobs = {}


class SlurmJob(_PerMesh):
    """Slurm nodes, one allocation per host mesh: SlurmJob({"trainers": 2}, partition=...,
    time_limit="1:00:00", gpus_per_node=8, slurm_args=[...], monarch_port=...) over
    baton.SlurmJob (agents started by srun, cancelled when the program ends)."""

    def __init__(self, meshes, python_exe="python", slurm_args=(), monarch_port=22222,
                 job_name="monarch_job", ntasks_per_node=1, time_limit=None, partition=None,
                 log_dir=None, exclusive=True, gpus_per_node=None, cpus_per_task=None, mem=None,
                 job_start_timeout=None, account=None, qos=None, **ignored):
        super().__init__()
        args = list(slurm_args) + [f"--job-name={job_name}"]
        for flag, value in (("--cpus-per-task", cpus_per_task), ("--mem", mem),
                            ("--account", account), ("--qos", qos)):
            if value is not None:
                args.append(f"{flag}={value}")
        if exclusive:
            args.append("--exclusive")
        for name, n in dict(meshes).items():
            spec = dict(nodes=int(n), srun_args=args, agent_port=int(monarch_port))
            if partition is not None:
                spec["partition"] = partition
            if time_limit is not None:
                spec["time"] = str(time_limit)
            if gpus_per_node is not None:
                spec["gpus_per_node"] = int(gpus_per_node)
            if job_start_timeout is not None:
                spec["wait"] = int(job_start_timeout)
            self._specs[name] = spec

    def _baton_job(self, name, spec):
        return _job.SlurmJob(**spec)


class SSHJob(_PerMesh):
    """Hosts reached with ssh: SSHJob(ssh_args=[...], monarch_port=...).add_mesh("trainers",
    ["node1", "node2"]), over baton.SshJob (the agent copied in, credentials over ssh's standard
    input)."""

    def __init__(self, python_exe="python", ssh_args=(), monarch_port=22222, transport="tcp"):
        super().__init__()
        self._options = dict(ssh_args=list(ssh_args), agent_port=int(monarch_port))

    def add_mesh(self, name, hosts):
        self._specs[name] = list(hosts)

    def _baton_job(self, name, hosts):
        return _job.SshJob(hosts, **self._options)


class KubernetesJob(_PerMesh):
    """Pods of a StatefulSet per host mesh: KubernetesJob(namespace=...).add_mesh("trainers",
    num_replicas=2, image=...), over baton.KubernetesJob (write its manifests and apply them with
    kubectl; state() attaches to the pods)."""

    def __init__(self, namespace="default", **options):
        super().__init__()
        self._namespace = namespace

    def add_mesh(self, name, num_replicas=1, image=None, **options):
        spec = dict(name=name, namespace=self._namespace, pods=int(num_replicas))
        if image is not None:
            spec["image"] = image
        self._specs[name] = spec

    def _baton_job(self, name, spec):
        return _job.KubernetesJob(**spec)


def _job_unsupported(name, what="baton has no equivalent yet"):
    return Unsupported(f"monarch.job.{name}", what)


exec_command = _job_unsupported("exec_command", "spawn an actor on the hosts that runs it")
shell = _job_unsupported("shell", "run the command from an actor's endpoint")
PortForwarder = _job_unsupported("PortForwarder")
MeshAdminConfig = _job_unsupported("MeshAdminConfig", "baton has no admin agent yet")
TelemetryConfig = _job_unsupported("TelemetryConfig", "baton records no telemetry yet")


def set_current_job(module_path):
    """Names the job of this directory: `module_path` ("myjobs.trainer_job") is imported by
    load_current_job()."""
    os.makedirs(".monarch/default", exist_ok=True)
    with open(".monarch/default/spec", "w") as f:
        f.write(module_path)


def load_current_job():
    """A fresh job of the specification set_current_job() named."""
    import importlib

    try:
        with open(".monarch/default/spec") as f:
            path = f.read().strip()
    except FileNotFoundError:
        raise UsageError("no current job: call set_current_job('module.attr') first") from None
    module, _, attr = path.rpartition(".")
    return getattr(importlib.import_module(module), attr)


__all__ = [
    "DEFAULT_JOB_PATH", "exec_command", "JobTrait", "job_load", "job_loads", "JobState",
    "load_current_job", "LocalJob", "MeshAdminConfig", "PortForwarder", "ProcessJob",
    "set_current_job", "shell", "SlurmJob", "TelemetryConfig", "KubernetesJob", "SSHJob",
]
