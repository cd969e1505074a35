"""Jobs: where a program's hosts come from. Each host of a job runs an agent (baton-host) that
starts procs there for this controller; job.hosts() is the mesh of hosts {"hosts": H}, whose
spawn_procs({"gpus": G}) gives procs {"hosts": H, "gpus": G}.

Their procs run this interpreter with this program's PYTHONPATH, so the hosts need the same
Python and packages at the same paths (a shared filesystem, one image). A job is ended by
close() (or leaving its `with` block); one still open when the program exits is ended after
its procs are stopped."""

import os

from . import _baton
from . import _runtime
from ._errors import BatonError, JobError, UsageError
from ._mesh import HostMesh

# Jobs not yet closed, held here so that one nothing else refers to (SlurmJob().hosts()) keeps
# its hosts until close() or the program's end, when they are ended after their procs.
_open = set()


def agent_program():
    """The baton-host that SshJob and SlurmJob run on their hosts: the one installed with this
    package (pip install), else the one of the build this module comes from; None if neither is
    there (the jobs then look beside the interpreter and on PATH)."""
    here = os.path.dirname(os.path.abspath(__file__))
    built = os.path.dirname(os.path.abspath(_baton.__file__))  # <build>/python/baton
    for path in (os.path.join(here, "bin", "baton-host"),
                 os.path.join(built, os.pardir, os.pardir, "bin", "baton-host")):
        if os.access(path, os.X_OK):
            return os.path.normpath(path)
    return None


def _options(kind, given, job):
    options = getattr(_baton, kind)()
    for name, value in given.items():
        if name.startswith("_") or not hasattr(options, name):
            known = ", ".join(n for n in dir(options) if not n.startswith("_"))
            raise UsageError(f"{job}: no option {name!r} (its options: {known})")
        if name.endswith("_args") and isinstance(value, (str, bytes)):
            raise UsageError(f"{job}: option {name!r} takes a list of arguments, "
                             f"e.g. {name}=[{value!r}]")
        try:
            setattr(options, name, list(value) if name.endswith("_args") else value)
        except TypeError:
            have = type(getattr(options, name)).__name__
            raise UsageError(
                f"{job}: option {name!r} takes a {have}, not {type(value).__name__}"
            ) from None
    return options


class _Job:
    _core = None
    _hosts = None

    def hosts(self):
        """Starts the job's agents (once) and attaches to them: a HostMesh {"hosts": H}.
        Raises JobError, in the tool's own words, if the hosts cannot be had."""
        if self._core is None:
            raise UsageError(f"this {type(self).__name__} was closed; make a new one")
        _runtime.runtime()
        if self._hosts is None:
            self._hosts = HostMesh(self._core.hosts())
        return self._hosts

    def close(self):
        """Ends the job: the procs this program started on its hosts are stopped, then its
        agents exit. Idempotent."""
        core, self._core = self._core, None
        hosts, self._hosts = self._hosts, None
        _open.discard(self)
        if hosts is not None and _runtime.running():
            try:
                hosts.stop().get(timeout=60)
            except BatonError:
                pass  # a host already gone: ending the job is what is left to do
        if core is not None:
            core.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _opened(self, core):
        self._core = core
        _open.add(self)


class SshJob(_Job):
    """Hosts reached with OpenSSH, with the user's own keys and configuration:
    SshJob(["node1", "node2"], user=..., port=..., identity_file=..., ssh_args=[...],
    agent=..., remote_dir=".cache/baton", agent_port=0). On each host the agent is copied in
    (unless the same bytes are there), the job's credentials go in over ssh's standard input,
    and an agent runs for this controller alone."""

    def __init__(self, hosts, **options):
        if isinstance(hosts, str):
            raise UsageError("SshJob: give a list of hosts, e.g. SshJob(['node1', 'node2'])")
        options.setdefault("agent", agent_program() or "")
        ssh = _options("SshOptions", options, "SshJob")
        self._opened(_baton.SshJob(_runtime.runtime(), list(hosts), ssh))


class SlurmJob(_Job):
    """Nodes from Slurm: SlurmJob(nodes=2, partition=..., time="2:00:00", gpus_per_node=...,
    srun_args=[...], agent=..., copy_agent=True, interface=..., agent_port=0, wait=600).
    hosts() runs srun, one agent on each node; the allocation is this controller's alone and is
    cancelled when the job is closed or the controller dies. Slurm's commands must be on PATH
    (and SLURM_CONF set where the cluster needs it)."""

    def __init__(self, **options):
        options.setdefault("agent", agent_program() or "")
        slurm = _options("SlurmOptions", options, "SlurmJob")
        self._opened(_baton.SlurmJob(_runtime.runtime(), slurm))

    @property
    def id(self):
        """Slurm's job id ("" before hosts())."""
        return "" if self._core is None else self._core.id()

    def cancel(self):
        """Cancels the allocation now (scancel): the agents stop their procs and exit."""
        if self._core is not None:
            self._core.cancel()


class KubernetesJob(_Job):
    """Pods of a StatefulSet, each running baton-host, found by their DNS names:
    KubernetesJob(image=..., name="baton", namespace="default", pods=1, gpus_per_pod=0,
    gpu_resource="nvidia.com/gpu", agent="baton-host", agent_port=7070,
    cluster_domain="cluster.local", wait=300). Write the manifests once
    (write_manifests(path), then `kubectl apply -f path`); hosts() attaches to the pods."""

    def __init__(self, **options):
        self._options = _options("KubernetesOptions", options, "KubernetesJob")
        self._opened(_baton.KubernetesJob(self._options))

    def manifests(self):
        """The manifests as YAML: a Secret with this runtime's credentials, a headless Service
        and the StatefulSet."""
        _runtime.runtime()
        return _baton.kubernetes_manifests(_runtime.runtime(), self._options)

    def write_manifests(self, path):
        """Writes manifests() to `path`, readable by this user alone (it holds keys)."""
        _runtime.runtime()
        _baton.write_kubernetes_manifests(_runtime.runtime(), self._options, os.fspath(path))

    def addresses(self):
        """Where each pod's agent is, "NAME-i.NAME.NAMESPACE.svc.DOMAIN:PORT", in pod order."""
        return _baton.kubernetes_addresses(self._options)


class _Agents:
    """baton-host agents started here, one a host, on loopback: the core of a ProcessJob. They
    run in a directory of their own (`where`, else a new one removed at close()): the job's
    credentials (this runtime's) and each agent's log."""

    def __init__(self, n, env, where=None, name="agent"):
        self._n = n
        self._name = name
        self._env = env
        self._own = where is None
        self.dir = where
        self.pids = []
        self.addresses = []

    def start(self):
        import subprocess
        import tempfile
        import time

        agent = agent_program()
        if agent is None:
            raise UsageError("ProcessJob: no baton-host found (build it: make python, or pip "
                             "install the package)")
        rt = _runtime.runtime()
        if self.dir is None:
            self.dir = tempfile.mkdtemp(prefix="baton-agents-")
        os.makedirs(self.dir, mode=0o700, exist_ok=True)
        credentials = os.path.join(self.dir, "credentials")
        if not os.path.isdir(credentials):
            _baton.save_credentials(rt, credentials)
        env = dict(os.environ, **self._env)
        env.pop("BATON_CREDENTIALS", None)
        logs = []
        for i in range(self._n):
            log = os.path.join(self.dir, f"{self._name}-{i}.log")
            with open(log, "wb") as out:
                proc = subprocess.Popen(
                    [agent, "--credentials", credentials, "--advertise", "127.0.0.1",
                     "--port", "0"],
                    stdin=subprocess.DEVNULL, stdout=out, stderr=out, env=env,
                    start_new_session=True,
                )
            self.pids.append(proc.pid)
            logs.append((proc, log))
        # Each says where it serves as it starts (a line of its log): read back until all have.
        deadline = time.monotonic() + 30
        for proc, log in logs:
            while True:
                with open(log, "rb") as f:
                    said = f.read().decode(errors="replace")
                if "serving at tcp://" in said:
                    self.addresses.append(said.split("serving at tcp://", 1)[1].split()[0])
                    break
                if proc.poll() is not None or time.monotonic() > deadline:
                    self.close()
                    why = said.strip() or "it said nothing in 30 s"
                    raise JobError(f"ProcessJob: a host's agent did not start: {why}")
                time.sleep(0.01)
        return self

    @classmethod
    def adopt(cls, pids, where):
        """The agents `pids` started (by this run or an earlier one) in directory `where`,
        which is theirs: close() removes it."""
        agents = cls(0, {}, where)
        agents.pids = list(pids)
        agents._own = True
        return agents

    def alive(self):
        """Whether every agent is still running."""
        return bool(self.pids) and all(_running(pid) for pid in self.pids)

    def hosts(self, addresses=None):
        if not self.pids:
            self.start()
        return _baton.attach(self.addresses if addresses is None else addresses)

    def close(self):
        import signal
        import time

        for pid in self.pids:
            try:
                os.killpg(pid, signal.SIGTERM)  # it stops its procs, then exits
            except OSError:
                pass
        deadline = time.monotonic() + 30
        for pid in self.pids:
            while _running(pid) and time.monotonic() < deadline:
                time.sleep(0.01)
            if _running(pid):
                try:
                    os.killpg(pid, signal.SIGKILL)
                except OSError:
                    pass
        self.pids = []
        self.addresses = []
        if self._own and self.dir is not None:
            import shutil

            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None


def _running(pid):
    """Whether process `pid` runs (reaping it if it is this process's child that ended)."""
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return False
    except ChildProcessError:
        pass  # not our child (started by an earlier run): ask the kernel
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except OSError:
        return False


class ProcessJob(_Job):
    """Hosts that are processes on this machine: ProcessJob(hosts=2) starts a baton-host agent
    for each (on loopback, with this runtime's credentials), so a program written for many hosts
    runs on one, its procs under agents as they would be on a cluster. close() stops the
    agents. `env` adds to the agents' environment."""

    def __init__(self, hosts=1, env=None):
        if not isinstance(hosts, int) or hosts < 1:
            raise UsageError(f"ProcessJob: hosts is a number of hosts (1 or more), not {hosts!r}")
        self._opened(_Agents(hosts, dict(env or {})))


def run_spmd(procs, argv, env=None, master_port=0):
    """Runs an existing torchrun-style program (argv: ["python3", "train.py", ...], looked up
    on PATH) once on every proc of `procs`, as a child process of the proc, with torchrun's
    environment: RANK, LOCAL_RANK, LOCAL_WORLD_SIZE, WORLD_SIZE, MASTER_ADDR and MASTER_PORT
    (rank 0's host, and `master_port` or a free port there), plus `env` ({name: value}). What
    each prints is forwarded naming its proc. A Future of each rank's exit status, by rank; a
    rank that fails is also reported through supervision."""
    from ._future import Future

    if isinstance(argv, (str, bytes)) or not argv:
        raise UsageError(f"run_spmd: give the program as a list, e.g. ['python3', 'train.py'], "
                         f"not {argv!r}")
    pairs = [f"{k}={v}" for k, v in dict(env or {}).items()]
    return Future(_baton.run_spmd(procs._core, [str(a) for a in argv], pairs, int(master_port)),
                  list)


def save(hosts, path):
    """Writes where the hosts of a job are to `path`, so that a later run of the program can
    attach(path) to the same hosts: an allocation kept across edits of the program."""
    if hosts._core is None:
        raise UsageError("save: this host has nothing to save; save the hosts of a job")
    _baton.save(hosts._core, os.fspath(path))


def close_all():
    """Ends the jobs still open (at exit, once their procs are stopped)."""
    for job in list(_open):
        job.close()


_runtime.on_shutdown(close_all)
