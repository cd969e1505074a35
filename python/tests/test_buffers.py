"""Buffers travel out of band: never pickled through a copy of their payload."""

import numpy as np
import pytest
import torch

import baton
from baton import _pickle
from actors import Counter


def test_big_buffers_stay_out_of_the_pickle():
    array = np.arange(1 << 18, dtype=np.float32)  # 1 MiB
    data, buffers = _pickle.dumps(array)
    assert len(data) < 1024
    assert [len(b) for b in buffers] == [array.nbytes]
    assert np.shares_memory(np.frombuffer(buffers[0], dtype=np.float32), array)
    t = torch.arange(1 << 18, dtype=torch.float32)
    data, buffers = _pickle.dumps(t)
    assert len(data) < 1024 and [len(b) for b in buffers] == [t.numel() * 4]
    data, buffers = _pickle.dumps_call((b"x" * (1 << 20), bytearray(1 << 20)), {})
    assert len(data) < 1024 and [len(b) for b in buffers] == [1 << 20, 1 << 20]


@pytest.fixture(scope="module")
def echo():
    procs = baton.this_host().spawn_procs({"gpus": 1})
    yield procs.spawn("echo", Counter, 0)
    procs.stop().get(timeout=60)


def test_buffers_round_trip_through_an_actor(echo):
    array = np.random.default_rng(0).standard_normal(1 << 18)
    got = echo.echo.call_one(array).get(timeout=30)
    assert np.array_equal(got, array)
    t = torch.randn(1000, 100)
    assert torch.equal(echo.echo.call_one(t).get(timeout=30), t)
    blob = bytes(range(256)) * 4096
    assert echo.echo.call_one(blob).get(timeout=30) == blob
    assert bytes(echo.echo.call_one(memoryview(blob)).get(timeout=30)) == blob
    assert echo.echo.call_one({"a": [1, 2.5, "x"], "b": None}).get(timeout=30) == {
        "a": [1, 2.5, "x"],
        "b": None,
    }
