"""Jobs: where a program's hosts come from. Each host of a job runs an agent (baton-host) that
starts procs there for this controller; job.hosts() is the mesh of hosts {"hosts": H}, whose
spawn_procs({"gpus": G}) gives procs {"hosts": H, "gpus": G}.

Their procs run this interpreter with this program's PYTHONPATH, so the hosts need the same
Python and packages at the same paths (a shared filesystem, one image). A job is ended by
close() (or leaving its `with` block); one still open when the program exits is ended after
its procs are stopped."""

import os

from . import _runtime
from ._errors import BatonError, UsageError
from ._mesh import HostMesh

# Jobs not yet closed, held here so that one nothing else refers to (SlurmJob().hosts()) keeps
# its hosts until close() or the program's end, when they are ended after their procs.
_open = set()


def agent_program():
    """The baton-host that SshJob and SlurmJob run on their hosts: the one installed with this
    package (pip install), else the one of the build this module comes from; None if neither is
    there (the jobs then look beside the interpreter and on PATH)."""
    import _baton

    here = os.path.dirname(os.path.abspath(__file__))
    built = os.path.dirname(os.path.abspath(_baton.__file__))
    for path in (os.path.join(here, "bin", "baton-host"),
                 os.path.join(built, os.pardir, "bin", "baton-host")):
        if os.access(path, os.X_OK):
            return os.path.normpath(path)
    return None


def _options(kind, given, job):
    import _baton

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
    agent=..., remote_dir=".cache/baton", agent_port=7070). On each host the agent is copied in
    (unless the same bytes are there), the job's credentials go in over ssh's standard input,
    and an agent runs for this controller alone."""

    def __init__(self, hosts, **options):
        import _baton

        if isinstance(hosts, str):
            raise UsageError("SshJob: give a list of hosts, e.g. SshJob(['node1', 'node2'])")
        options.setdefault("agent", agent_program() or "")
        self._opened(_baton.SshJob(list(hosts), _options("SshOptions", options, "SshJob")))


class SlurmJob(_Job):
    """Nodes from Slurm: SlurmJob(nodes=2, partition=..., time="2:00:00", gpus_per_node=...,
    srun_args=[...], agent=..., copy_agent=True, interface=..., agent_port=7070, wait=600).
    hosts() runs srun, one agent on each node; the allocation is this controller's alone and is
    cancelled when the job is closed or the controller dies. Slurm's commands must be on PATH
    (and SLURM_CONF set where the cluster needs it)."""

    def __init__(self, **options):
        import _baton

        options.setdefault("agent", agent_program() or "")
        self._opened(_baton.SlurmJob(_options("SlurmOptions", options, "SlurmJob")))

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
        import _baton

        self._options = _options("KubernetesOptions", options, "KubernetesJob")
        self._opened(_baton.KubernetesJob(self._options))

    def manifests(self):
        """The manifests as YAML: a Secret with this runtime's credentials, a headless Service
        and the StatefulSet."""
        import _baton

        _runtime.runtime()
        return _baton.kubernetes_manifests(self._options)

    def write_manifests(self, path):
        """Writes manifests() to `path`, readable by this user alone (it holds keys)."""
        import _baton

        _runtime.runtime()
        _baton.write_kubernetes_manifests(self._options, os.fspath(path))

    def addresses(self):
        """Where each pod's agent is, "NAME-i.NAME.NAMESPACE.svc.DOMAIN:PORT", in pod order."""
        import _baton

        return _baton.kubernetes_addresses(self._options)


def save(hosts, path):
    """Writes where the hosts of a job are to `path`, so that a later run of the program can
    attach(path) to the same hosts: an allocation kept across edits of the program."""
    import _baton

    if hosts._core is None:
        raise UsageError("save: this host has nothing to save; save the hosts of a job")
    _baton.save(hosts._core, os.fspath(path))


def close_all():
    """Ends the jobs still open (at exit, once their procs are stopped)."""
    for job in list(_open):
        job.close()
