"""Run by test_monarch_api under `python -m baton.monarch`: Monarch's semantics where baton's
own differ. Prints RESULTS {...} for the test to check."""

import asyncio
import os
import signal

import torch
from monarch._rust_bindings.monarch_hyperactor.supervision import SupervisionError
from monarch.actor import Actor, context, current_rank, endpoint, this_host
from monarch.rdma import RDMAAction, RDMABuffer

out = {}


class Leaf(Actor):
    @endpoint
    async def ping(self):
        return "pong"

    @endpoint
    async def die(self):
        os.kill(os.getpid(), signal.SIGKILL)


class Boss(Actor):
    """An async actor that spawns procs and actors in its endpoints, as Monarch's return."""

    def __init__(self):
        self.seen = []
        self.handled = True

    async def __supervise__(self, failure):
        await asyncio.sleep(0)
        self.seen.append((failure.mesh_name, failure.rank, "SIGKILL" in failure.report()))
        return self.handled

    @endpoint
    async def setup(self):
        procs = this_host().spawn_procs(per_host={"w": 2})
        self.leaves = procs.spawn("leaves", Leaf)
        sibling = context().actor_instance.proc.spawn("sibling", Leaf)
        return (list((await self.leaves.ping.call()).values()),
                await sibling.ping.call_one(), context().actor_instance.proc_id)

    @endpoint
    async def kill_one(self):
        await self.leaves.slice(w=1).die.call()

    @endpoint
    async def seen_(self):
        return self.seen


class Shards(Actor):
    @endpoint
    def use(self, config):
        return type(config).__name__, config.item(**dict(current_rank()))

    @endpoint
    def rank(self):
        return current_rank()["w"]

    @endpoint
    def work(self):
        if current_rank()["w"] == 1:
            raise ValueError("rank 1 failed")
        return current_rank()["w"]


class Owner(Actor):
    def __init__(self):
        self.t = torch.arange(8, dtype=torch.uint8)
        self.buf = RDMABuffer(self.t)

    @endpoint
    def buffer(self):
        return self.buf


boss = this_host().spawn_procs().spawn("boss", Boss)
leaves_pong, sibling_pong, proc_id = boss.setup.call_one().get(timeout=60)
out["spawn_in_async"] = (leaves_pong, sibling_pong, proc_id.startswith("procs"))
try:
    boss.kill_one.call_one().get(timeout=60)
except Exception as e:
    out["killed_call"] = type(e).__name__
out["supervise_seen"] = boss.seen_.call_one().get(timeout=60)

shards = this_host().spawn_procs(per_host={"w": 3}).spawn("shards", Shards)
items, errors = [], []
for fut in shards.work.stream():
    try:
        items.append(fut.get())
    except Exception as e:
        errors.append(type(e).__name__)
out["stream"] = (sorted(items), errors)
ranks = this_host().spawn_procs(per_host={"w": 3}).spawn("ranks", Shards)
vm = ranks.rank.call().get(timeout=60)
whole = ranks.use.call(vm).get(timeout=60)
out["value_mesh_arg"] = whole.values()


async def bridged():
    return await shards.slice(w=slice(0, 1)).work.call_one().as_asyncio()

out["as_asyncio"] = asyncio.run(bridged())
try:
    shards.slice(w=slice(0, 1)).work.call_one().get(timeout=-1)
except ValueError as e:
    out["bad_timeout"] = type(e).__name__
out["stop_reason"] = ranks.stop("done here").get(timeout=60) is None

owner = this_host().spawn_procs().spawn("owner", Owner)
buf = owner.buffer.call_one().get(timeout=60)
big = torch.zeros(16, dtype=torch.uint8)
buf.read_into(big).get(timeout=60)
small = torch.zeros(8, dtype=torch.uint8)
RDMAAction().read_remote(small, buf).submit().get(timeout=60)
out["rdma"] = (big.tolist(), small.tolist(), "owner" in buf.owner)
out["supervision_error"] = (issubclass(SupervisionError, RuntimeError),)
print("RESULTS", out)
