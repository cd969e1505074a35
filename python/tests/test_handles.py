"""Meshes and RdmaBuffers passed to actors: used from inside them, one-sided."""

import os

import numpy as np
import pytest
import torch

import baton
from actors import Blocker, Caller, Counter, Holder


@pytest.fixture(scope="module")
def procs():
    p = baton.this_host().spawn_procs({"gpus": 3})
    yield p
    p.stop().get(timeout=60)


def test_an_actor_calls_a_mesh_it_was_given(procs):
    counters = procs.spawn("given", Counter, 5)
    caller = procs.slice(gpus=0).spawn("caller", Caller)
    assert caller.total.call_one(counters).get(timeout=30) == 15
    counters.incr.broadcast()
    assert caller.total.call_one(counters.slice(gpus=slice(1, 3))).get(timeout=30) == 12


def test_a_plain_endpoint_may_block_on_calls_and_an_async_one_is_told_to_await(procs):
    counters = procs.spawn("blocked", Counter, 4)
    caller = procs.slice(gpus=1).spawn("blocker", Caller)
    assert caller.blocking.call_one(counters).get(timeout=30) == 12
    assert caller.streaming.call_one(counters).get(timeout=30) == [4, 4, 4]
    with pytest.raises(baton.ActorError) as info:
        caller.blocking_in_async.call_one(counters).get(timeout=30)
    assert "UsageError" in info.value.remote_type
    assert "`await` the future" in info.value.remote_message
    assert "event loop" in info.value.remote_message


def test_actors_blocked_in_plain_endpoints_never_starve_their_proc(procs, tmp_path):
    # More blocked actors in one proc than its pool has threads: its other actors still answer.
    k = (os.cpu_count() or 2) + 2
    fifos = [str(tmp_path / f"hold{i}") for i in range(k)]
    for f in fifos:
        os.mkfifo(f)
    holders = [procs.slice(gpus=2).spawn(f"holder{i}", Holder) for i in range(k)]
    blockers = [procs.slice(gpus=0).spawn(f"waiter{i}", Blocker) for i in range(k)]
    neighbour = procs.slice(gpus=0).spawn("neighbour", Counter, 7)
    waiting = [b.wait_for.call_one(h, f) for b, h, f in zip(blockers, holders, fifos)]
    writers = [open(f, "w") for f in fifos]  # returns once its holder holds: all are blocked
    assert neighbour.value.call_one().get(timeout=30) == 7
    for i, w in enumerate(writers):
        w.write(f"released {i}\n")
        w.close()
    assert [w.get(timeout=60) for w in waiting] == [f"released {i}" for i in range(k)]


def test_rdma_buffers_over_python_memory_read_and_written_by_an_actor(procs):
    caller = procs.slice(gpus=2).spawn("rdma", Caller)
    data = bytearray(b"0123456789" * 1000)
    buf = baton.RdmaBuffer(data)
    assert buf.size == len(data)
    assert caller.fetch.call_one(buf, 10, 20).get(timeout=30) == b"0123456789"
    caller.put.call_one(buf, b"abc", 5).get(timeout=30)
    assert data[:10] == bytearray(b"01234abc89")
    array = np.arange(1000, dtype=np.float64)
    abuf = baton.RdmaBuffer(array)
    got = caller.fetch.call_one(abuf, 8 * 1000).get(timeout=30)
    assert np.array_equal(np.frombuffer(got, dtype=np.float64), array)
    tensor = torch.zeros(100, dtype=torch.int32)
    tbuf = baton.RdmaBuffer(tensor)
    caller.put.call_one(tbuf, np.arange(100, dtype=np.int32).tobytes()).get(timeout=30)
    assert torch.equal(tensor, torch.arange(100, dtype=torch.int32))
    # A transfer the buffer refuses raises baton.RdmaError (a RuntimeError too), saying why.
    with pytest.raises(baton.RdmaError, match="does not fit") as refused:
        buf.read_into(bytearray(100), len(data) - 10).get(timeout=30)
    assert isinstance(refused.value, RuntimeError)
    for b in (buf, abuf, tbuf):
        b.drop().get(timeout=30)
    with pytest.raises(baton.UsageError, match="writable"):
        baton.RdmaBuffer(b"read-only bytes")
