"""A tour of Monarch's actor API, written against Monarch's names, run unchanged with
`python -m baton.monarch examples/monarch/actors_tour.py`: meshes and slices, typed futures,
context and ranks, actors that hold slices of other meshes, failures as ActorError, supervision
and the unhandled-fault hook, RDMABuffer for bulk data, channels and accumulators. Exits 1 if a
result is not what Monarch's semantics give."""

import sys
import threading

import torch

import monarch.actor
from monarch.actor import (
    Accumulator,
    Actor,
    ActorError,
    Channel,
    Future,
    MeshFailure,
    ProcMesh,
    ValueMesh,
    context,
    current_rank,
    endpoint,
    this_host,
)
from monarch.rdma import RDMABuffer

checks: list[tuple[str, bool]] = []


def check(what: str, ok: bool) -> None:
    checks.append((what, ok))
    print(("ok   " if ok else "FAIL ") + what)


class Counter(Actor):
    def __init__(self, initial_value: int):
        self.value = initial_value

    @endpoint
    def increment(self) -> None:
        self.value += 1

    @endpoint
    def get_value(self) -> int:
        return self.value


class DataLoader(Actor):
    def __init__(self):
        self.i = 0

    @endpoint
    def example(self) -> str:
        self.i += 1
        # The loader's own rank: called through a one-member slice, the
        # message's rank (current_rank()) would be 0 in every loader.
        return f"<data {self.i} from {context().actor_instance.rank.rank}>"


class Trainer(Actor):
    def __init__(self, dataloader):
        # The data loader at this trainer's own point of the other mesh.
        self.dataloader = dataloader.slice(**context().actor_instance.rank)

    @endpoint
    def step(self) -> str:
        data = self.dataloader.example.call_one().get()
        return f"trainer {context().message_rank.rank} stepped on {data}"


class Errorful(Actor):
    @endpoint
    def say_hello(self) -> None:
        raise ValueError("I don't want to")


class Broken(Actor):
    def __init__(self):
        raise RuntimeError("this actor cannot start")


class Supervisor(Actor):
    @endpoint
    async def spawn_broken(self, tell) -> None:
        self.tell = tell  # where to report what it hears
        procs = await this_host().spawn_procs_async(per_host={"gpus": 1})
        self.kept = await procs.spawn_async("broken", Broken)

    def __supervise__(self, failure: MeshFailure) -> bool:
        self.tell.send(failure.report())
        return True  # handled: it goes no further


class ParameterServer(Actor):
    def __init__(self):
        self.weights = torch.arange(1000 * 100, dtype=torch.float32).reshape(1000, 100)
        self.buffer = RDMABuffer(self.weights.view(torch.uint8).flatten())

    @endpoint
    def get_weights(self) -> RDMABuffer:
        return self.buffer


class Worker(Actor):
    def __init__(self):
        self.local = torch.zeros(1000, 100)

    @endpoint
    def sync_weights(self, server) -> float:
        ref = server.get_weights.call_one().get()
        ref.read_into(self.local.view(torch.uint8).flatten()).get()
        return float(self.local.sum())


class Reporter(Actor):
    @endpoint
    def report_to(self, port) -> None:
        port.send(f"rank {current_rank().rank} reporting")


unhandled: list[str] = []
heard_unhandled = threading.Event()


def my_unhandled_fault_hook(failure: MeshFailure) -> None:
    unhandled.append(str(failure))
    heard_unhandled.set()  # returning normally: the failure is dropped, the program goes on


def main() -> int:
    monarch.actor.unhandled_fault_hook = my_unhandled_fault_hook

    procs: ProcMesh = this_host().spawn_procs(per_host={"gpus": 4})
    check("a proc mesh's extent", dict(procs.extent) == {"gpus": 4})
    counters = procs.spawn("counters", Counter, 0)
    counters.increment.broadcast()
    counters.slice(gpus=slice(0, 2)).increment.broadcast()
    values: ValueMesh[int] = counters.get_value.call().get()
    check("broadcast to all, then to a slice", values.values() == [2, 2, 1, 1])
    one: Future[int] = counters.slice(gpus=3).get_value.call_one()
    check("a typed future of one member", one.get() == 1)
    total = Accumulator(counters.get_value, 0, lambda acc, v: acc + v).accumulate()
    check("an accumulator folds every reply", total.get(timeout=30) == 6)

    loaders = procs.spawn("loaders", DataLoader)
    trainers = procs.spawn("trainers", Trainer, loaders)
    steps = trainers.step.call().get().values()
    check("each trainer uses the loader at its own point",
          steps == [f"trainer {r} stepped on <data 1 from {r}>" for r in range(4)])

    errorful = procs.slice(gpus=0).spawn("errorful", Errorful)
    try:
        errorful.say_hello.call_one().get()
        check("an endpoint that raises fails its caller", False)
    except ActorError as e:
        check("an endpoint that raises fails its caller", "I don't want to" in str(e)
              and isinstance(e.exception, ValueError))

    supervisor = procs.slice(gpus=1).spawn("supervisor", Supervisor)
    tell, told = Channel.open()
    supervisor.spawn_broken.call_one(tell).get(timeout=60)
    check("__supervise__ hears of a mesh it spawned failing",
          "cannot start" in told.recv().get(timeout=30))

    kept = this_host().spawn_procs(per_host={"gpus": 1})
    kept.spawn("broken_at_top", Broken)
    check("the unhandled-fault hook hears of a failure nobody handled",
          heard_unhandled.wait(30) and "cannot start" in unhandled[0])

    server = this_host().spawn_procs(per_host={"gpus": 1}).spawn("server", ParameterServer)
    worker = this_host().spawn_procs(per_host={"gpus": 1}).spawn("worker", Worker)
    expected = float(torch.arange(1000 * 100, dtype=torch.float32).sum())
    check("weights pulled through an RDMABuffer", worker.sync_weights.call_one(server).get()
          == expected)

    port, receiver = Channel.open()
    port.send(3)
    check("a channel delivers what its port was sent", receiver.recv().get(timeout=10) == 3)
    procs.spawn("reporters", Reporter).report_to.broadcast(port)
    got = sorted(receiver.recv().get(timeout=30) for _ in range(4))
    check("actors send to a port they were given",
          got == [f"rank {r} reporting" for r in range(4)])

    failed = [what for what, ok in checks if not ok]
    print(f"{len(checks) - len(failed)} of {len(checks)} checks passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
