"""monarch.spmd over baton: torchrun's environment on every proc of a mesh, so that a
torch.distributed script (or code that calls init_process_group) runs on it as under torchrun.

    setup_torch_elastic_env(procs)                 # RANK, WORLD_SIZE, MASTER_ADDR... in each proc
    actors = procs.spawn("spmd", SPMDActor)
    addr, port = actors.slice(hosts=0, gpus=0).get_host_port.call_one(None).get()
    actors.main.call(addr, port, ["train.py", "--lr", "0.1"]).get()   # the script, in each proc

To run a script as processes of their own, with its output forwarded, use baton.run_spmd."""

import math
import os
import runpy
import socket
import sys

from .._actor import Actor, endpoint
from .._context import current_rank
from .._errors import UsageError


def _free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return s.getsockname()[1]


class SPMDActor(Actor):
    """Sets torchrun's variables in its proc (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE,
    GROUP_RANK, GROUP_WORLD_SIZE, ROLE_RANK, ROLE_WORLD_SIZE, ROLE_NAME, MASTER_ADDR,
    MASTER_PORT) from its place in the mesh: the last dimension is the proc's host-local one."""

    def __init__(self):
        point = current_rank()
        extent = point.extent
        local = extent.labels[-1] if extent.labels else None
        self.rank = point.rank
        self.world_size = math.prod(extent.sizes)
        self.local_rank = point[local] if local is not None else 0
        self.local_world_size = extent[local] if local is not None else 1
        self.group_rank = self.rank // self.local_world_size
        self.group_world_size = -(-self.world_size // self.local_world_size)

    def _setup_env(self, master_addr, master_port):
        os.environ.update({
            "MASTER_ADDR": str(master_addr),
            "MASTER_PORT": str(master_port),
            "RANK": str(self.rank),
            "LOCAL_RANK": str(self.local_rank),
            "LOCAL_WORLD_SIZE": str(self.local_world_size),
            "GROUP_RANK": str(self.group_rank),
            "GROUP_WORLD_SIZE": str(self.group_world_size),
            "ROLE_RANK": str(self.rank),
            "ROLE_WORLD_SIZE": str(self.world_size),
            "ROLE_NAME": "rank",
            "WORLD_SIZE": str(self.world_size),
        })

    @endpoint
    def get_host_port(self, use_ipaddr=None):
        """(this host's name, a port free on it): the master's, from the proc of rank 0."""
        host = socket.gethostname()
        if use_ipaddr is not None:
            host = socket.gethostbyname(host)
        return host, _free_port()

    @endpoint
    def setup_env(self, master_addr, master_port):
        self._setup_env(master_addr, master_port)

    @endpoint
    def main(self, master_addr, master_port, script_args):
        """Sets the environment, then runs the script (["train.py", args...] or ["-m", module,
        args...]) in this proc as __main__; True once it returns."""
        self._setup_env(master_addr, master_port)
        args = list(script_args)
        if args[:1] == ["-m"] and len(args) > 1:
            sys.argv = args[1:]
            runpy.run_module(args[1], run_name="__main__", alter_sys=True)
        elif args:
            sys.argv = args
            runpy.run_path(args[0], run_name="__main__")
        else:
            raise ValueError("SPMDActor.main: no script or module given")
        return True


def _check(master_addr, master_port):
    if (master_addr is None) != (master_port is None):
        raise UsageError("setup_torch_elastic_env: give both master_addr and master_port, or "
                         "neither (rank 0's host and a free port there are chosen then)")


def _first(procs, actors):
    return actors.slice(**{label: 0 for label in procs.extent.labels})


def setup_torch_elastic_env(proc_mesh, master_addr=None, master_port=None, use_ipaddr=None):
    """Sets torchrun's environment in every proc of `proc_mesh` (an SPMDActor in each); the
    master is rank 0's host and a port free there unless given."""
    _check(master_addr, master_port)
    actors = proc_mesh.spawn("_SPMDActor", SPMDActor)
    if master_addr is None:
        master_addr, master_port = _first(proc_mesh, actors).get_host_port.call_one(
            use_ipaddr).get()
    actors.setup_env.call(master_addr, master_port).get()


async def setup_torch_elastic_env_async(proc_mesh, master_addr=None, master_port=None,
                                        use_ipaddr=None):
    """setup_torch_elastic_env, awaited."""
    _check(master_addr, master_port)
    actors = await proc_mesh.spawn_async("_SPMDActor", SPMDActor)
    if master_addr is None:
        master_addr, master_port = await _first(proc_mesh, actors).get_host_port.call_one(
            use_ipaddr)
    await actors.setup_env.call(master_addr, master_port)


__all__ = ["SPMDActor", "setup_torch_elastic_env", "setup_torch_elastic_env_async"]
