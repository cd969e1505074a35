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


def test_a_received_array_is_the_receivers_own_to_change(echo, monkeypatch):
    array = np.arange(1000, dtype=np.float64)
    got = echo.bump.call_one(array).get(timeout=30)
    assert np.array_equal(got, array + 1) and np.array_equal(array, np.arange(1000))
    got += 1  # and the reply is the caller's own
    data, buffers = _pickle.dumps(array)
    received = [bytes(b) for b in buffers]  # read-only, as the runtime's received bytes are
    assert _pickle.loads(data, received).flags.writeable
    monkeypatch.setattr(_pickle, "_READ_ONLY", True)  # BATON_READ_ONLY_BUFFERS=1
    assert not _pickle.loads(data, received).flags.writeable
