"""Actors the tests spawn (importable by the workers, as a user's module would be)."""

import asyncio
import contextvars
import os
import time

import baton


class Counter(baton.Actor):
    def __init__(self, start, step=1):
        self.n = start
        self.step = step
        self.seen = []

    @baton.endpoint
    def incr(self):
        self.n += self.step
        return self.n

    @baton.endpoint
    def value(self):
        return self.n

    @baton.endpoint
    def note(self, i):
        self.seen.append(i)

    @baton.endpoint
    def noted(self):
        return self.seen

    @baton.endpoint
    def pid(self):
        return os.getpid()

    @baton.endpoint
    def fail(self, text):
        raise ValueError(text)

    @baton.endpoint
    async def later(self, x):
        await asyncio.sleep(0.01)
        return x * 2

    @baton.endpoint
    async def fail_later(self):
        await asyncio.sleep(0)
        raise KeyError("missing")

    @baton.endpoint
    def echo(self, value):
        return value

    @baton.endpoint
    def bump(self, array):
        array += 1  # a received array is the actor's own to change
        return array

    @baton.endpoint
    def report_to(self, port, n):
        for i in range(n):
            port.send((self.rank, i))

    @baton.endpoint
    def say(self, text):
        print(text, flush=True)

    @baton.endpoint
    def read_line(self, path):
        with open(path) as f:  # a FIFO: waits for the test to write
            return f.readline().strip()

    @baton.endpoint
    def fail_on(self, rank):
        if self.rank == rank:
            raise ValueError(f"rank {rank} fails")
        return self.rank

    @baton.endpoint
    def unsendable(self):
        import threading

        return threading.Lock()

    @baton.endpoint
    async def unsendable_later(self):
        import threading

        return threading.Lock()

    def not_an_endpoint(self):
        return 1


SEEN = contextvars.ContextVar("seen")


class Contextual(baton.Actor):
    """Sets a context variable in each message: none may see another message's value."""

    @baton.endpoint
    def swap(self, value):
        before = SEEN.get(None)
        SEEN.set(value)
        return before


class Caller(baton.Actor):
    """Given meshes and buffers by the controller, uses them from inside an actor."""

    @baton.endpoint
    async def total(self, counters):
        values = await counters.value.call()
        return sum(values.values())

    @baton.endpoint
    async def total_of(self, mesh, endpoint):
        values = await getattr(mesh, endpoint).call()
        return sum(values.values(), [])

    @baton.endpoint
    def blocking(self, counters):
        return sum(counters.value.call().get(timeout=30).values())

    @baton.endpoint
    async def blocking_in_async(self, counters):
        return counters.value.call().get(timeout=30)

    @baton.endpoint
    def streaming(self, counters):
        return sorted(v for _, v in counters.value.stream(timeout=30))

    @baton.endpoint
    async def fetch(self, buffer, n, offset=0):
        out = bytearray(n)
        await buffer.read_into(out, offset)
        return bytes(out)

    @baton.endpoint
    async def put(self, buffer, data, offset=0):
        await buffer.write_from(bytearray(data), offset)


class Rank(baton.Actor):
    """A member of a collective group."""

    @baton.endpoint
    async def join(self, group):
        self.comm = baton.collective.Communicator(self)
        await self.comm.join(group)
        return self.comm.rank

    @baton.endpoint
    async def every_collective(self, n):
        import numpy as np
        import torch

        r, size = self.comm.rank, self.comm.size
        a = np.arange(n, dtype=np.float32) + r
        await self.comm.allreduce(a, op="sum")
        t = torch.full((n,), float(r), dtype=torch.float64)
        await self.comm.allreduce(t, op="max")
        b = np.full(n, r + 100, dtype=np.int64)
        await self.comm.broadcast(b, root=size - 1)
        g = torch.zeros(n * size, dtype=torch.int32)
        await self.comm.allgather(torch.full((n,), r, dtype=torch.int32), g)
        s = torch.zeros(n, dtype=torch.bfloat16)
        await self.comm.reduce_scatter(torch.ones(n * size, dtype=torch.bfloat16), s, op="sum")
        await self.comm.barrier()
        return a.tolist(), t.tolist(), b.tolist(), g.tolist(), s.float().tolist()

    @baton.endpoint
    async def allreduce_n(self, n):
        import numpy as np

        await self.comm.allreduce(np.ones(n, dtype=np.float32))

    @baton.endpoint
    async def allreduce_forever(self):
        import numpy as np

        a = np.zeros(1000, dtype=np.float32)
        while True:
            await self.comm.allreduce(a)

    @baton.endpoint
    def pid(self):
        return os.getpid()


class Child(baton.Actor):
    @baton.endpoint
    def pid(self):
        return os.getpid()


class Parent(baton.Actor):
    """Spawns procs of its own from an async endpoint: it owns them and hears of their
    failures in __supervise__."""

    def __init__(self):
        self.failures = []

    def __supervise__(self, failure):
        self.failures.append(failure)
        return True

    @baton.endpoint
    async def start(self):
        self.procs = await baton.this_host().spawn_procs_async({"kids": 2})
        self.kids = await self.procs.spawn_async("kids", Child)
        return (await self.kids.pid.call()).values()

    @baton.endpoint
    def failures_seen(self):
        return self.failures

    @baton.endpoint
    def kids_mesh(self):
        return self.kids

    @baton.endpoint
    def own_pid(self):
        return os.getpid()

    @baton.endpoint
    def spawn_blocking(self):
        return baton.this_host().spawn_procs({"kids": 1})


class BrokenSupervisor(Parent):
    """A Parent whose __supervise__ raises."""

    def __supervise__(self, failure):
        raise ValueError("this supervisor is broken")


class Refuses(baton.Actor):
    """An actor whose constructor raises."""

    def __init__(self, why):
        raise ValueError(why)


class Holder(baton.Actor):
    """Answers once the controller writes a line into the FIFO it is given (read on a thread of
    the event loop's executor, so that many holders in one proc hold at once)."""

    @baton.endpoint
    async def hold(self, fifo):
        import asyncio

        def read():
            with open(fifo) as f:
                return f.readline().strip()

        return await asyncio.get_running_loop().run_in_executor(None, read)


class Blocker(baton.Actor):
    """A plain endpoint that blocks its thread on a call, as Monarch allows."""

    @baton.endpoint
    def wait_for(self, holder, fifo):
        return holder.hold.call_one(fifo).get(timeout=60)


class Sleeper(baton.Actor):
    """An actor that naps inside its endpoint, for the tests that look inside a job."""

    @baton.endpoint
    def nap(self, seconds):
        time.sleep(seconds)  # the line its stack shows
        return seconds

    @baton.endpoint
    def nap_until(self, path):
        """Naps until the file `path` exists (the test's procs share this machine's files)."""
        while not os.path.exists(path):
            time.sleep(0.05)  # the line its stack shows
        return os.getpid()


class Debuggee(baton.Actor):
    """Pauses in breakpoint(): `baton debug` attaches to it (test_debug.py)."""

    @baton.endpoint
    def step(self, x):
        y = x * 2
        breakpoint()  # the line `baton debug` lists
        z = y + 1
        return z


class StoreUser(baton.Actor):
    """Uses a tensor store it is handed: puts its rank's row shard, reads boxes, state dicts."""

    @baton.endpoint
    def put_rows(self, store, key, rows, cols, of):
        import torch

        rank = baton.current_rank().rank
        box = baton.store.box_of([rows, cols], [baton.store.Shard(0)], [of], [rank])
        full = torch.arange(rows * cols, dtype=torch.float32).reshape(rows, cols)
        (r0, c0), (nr, nc) = box
        mine = full[r0:r0 + nr, c0:c0 + nc].clone()
        return tuple(store.put(key, mine, shard=box, global_shape=[rows, cols]).get())

    @baton.endpoint
    async def read_box(self, store, key, box):
        t = await store.get(key, box=box)
        return t.tolist()

    @baton.endpoint
    def load_policy(self, store, prefix):
        import torch

        model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
        sd = model.state_dict()
        store.get_state_dict(prefix, into=sd).get()
        model.load_state_dict(sd)
        return {k: v.tolist() for k, v in model.state_dict().items()}

    @baton.endpoint
    def pid(self):
        return os.getpid()
