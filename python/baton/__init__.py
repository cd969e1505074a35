"""baton: drive a cluster from one Python program, over baton's C++ runtime.

    import baton

    class Counter(baton.Actor):
        def __init__(self, start):
            self.n = start

        @baton.endpoint
        def incr(self):
            self.n += 1
            return self.n

    if __name__ == "__main__":
        procs = baton.this_host().spawn_procs({"gpus": 4})
        counters = procs.spawn("counters", Counter, 0)
        print(counters.incr.call().get().values())   # [1, 1, 1, 1]
"""

import pkgutil

# The extension module (baton._baton) is built apart from this source tree (make python puts it
# in <build>/python/baton): the package spans both when both are on PYTHONPATH.
__path__ = pkgutil.extend_path(__path__, __name__)

try:
    from . import _baton  # noqa: F401
except ImportError as _missing:
    if getattr(_missing, "name", None) not in ("baton._baton", "_baton", None) and \
            "_baton" not in str(_missing):
        raise
    raise ImportError(
        "baton's extension module (baton._baton) was not found next to this package: build it "
        "with `make python` and put <build>/python on PYTHONPATH beside python/ (PYTHONPATH="
        "python:build/python), or install the package with `pip install .`",
        name="baton._baton",
    ) from None

from . import collective, store
from ._actor import Actor, concurrent_endpoint, endpoint
from ._errors import (
    ActorError,
    BatonError,
    JobError,
    KeyNotFound,
    RdmaError,
    StoreError,
    SupervisionError,
    TimeoutError,
    UndeliverableError,
    UsageError,
)
from ._context import Context, context, current_actor_name, current_rank, current_size
from ._future import Future
from ._endpoint import as_endpoint
from ._mesh import (
    ActorMesh,
    CppActorMesh,
    HostMesh,
    ProcMesh,
    attach,
    cpp,
    this_host,
    this_proc,
)
from ._point import Extent, Point
from ._value_mesh import ValueMesh
from ._job import (
    KubernetesJob,
    ProcessJob,
    SlurmJob,
    SshJob,
    agent_program,
    run_spmd,
    save,
)
from ._port import Port, PortReceiver, open_port
from ._rdma import RdmaBuffer
from ._runtime import set_supervise, shutdown

__all__ = [
    "Actor",
    "ActorError",
    "ActorMesh",
    "CppActorMesh",
    "BatonError",
    "Context",
    "Extent",
    "Future",
    "HostMesh",
    "JobError",
    "KeyNotFound",
    "KubernetesJob",
    "ProcessJob",
    "Point",
    "Port",
    "PortReceiver",
    "ProcMesh",
    "RdmaBuffer",
    "RdmaError",
    "SlurmJob",
    "SshJob",
    "StoreError",
    "SupervisionError",
    "TimeoutError",
    "UndeliverableError",
    "UsageError",
    "ValueMesh",
    "agent_program",
    "as_endpoint",
    "attach",
    "collective",
    "concurrent_endpoint",
    "context",
    "cpp",
    "current_actor_name",
    "current_rank",
    "current_size",
    "endpoint",
    "open_port",
    "run_spmd",
    "save",
    "set_supervise",
    "shutdown",
    "store",
    "this_host",
    "this_proc",
]
