"""The tensor store from Python: torch tensors, numpy arrays, bytes and objects by key; shards
put by actors and read back resharded, element by element; state dicts (nested, strict, cast);
versions that a reader keeps; bad input and a killed volume."""

import os
import signal

import numpy as np
import pytest
import torch

import baton
from actors import StoreUser
from baton.store import Box, Replicate, Shard, Store, box_of


@pytest.fixture(scope="module")
def procs():
    p = baton.this_host().spawn_procs({"procs": 2})
    yield p
    p.stop().get(timeout=60)


@pytest.fixture(scope="module")
def store(procs):
    return Store.create(procs)


def test_values_of_every_kind_round_trip_in_place_and_not(store):
    t = torch.randn(3, 5)
    store.put("kinds/torch", t).get()
    back = store.get("kinds/torch").get()
    assert isinstance(back, torch.Tensor) and torch.equal(back, t)
    into = torch.empty(3, 5)
    assert store.get("kinds/torch", into=into).get() is into and torch.equal(into, t)
    bf = torch.randn(4, 4).to(torch.bfloat16)
    store.put("kinds/bf16", bf).get()
    assert torch.equal(store.get("kinds/bf16").get(), bf)
    a = np.arange(12, dtype=np.int64).reshape(3, 4)
    store.put("kinds/numpy", a).get()
    out = np.zeros((3, 4), dtype=np.int64)
    store.get("kinds/numpy", into=out).get()
    assert (out == a).all()
    store.put("kinds/bytes", b"\x00raw\xff").get()
    assert store.get("kinds/bytes").get() == b"\x00raw\xff"
    obj = {"step": 7, "lr": [0.1, 0.01], "name": "policy"}
    store.put("kinds/object", obj).get()
    assert store.get("kinds/object").get() == obj
    # A put copies at once: changing the tensor afterwards changes nothing stored.
    t.zero_()
    assert not torch.equal(store.get("kinds/torch").get(), t)


def test_keys_exists_delete_and_versions(store):
    for k in ("pre/a", "pre.b", "prec", "pre/d/e"):
        store.put(k, k.encode()).get()
    assert store.keys("pre").get() == ["pre.b", "pre/a", "pre/d/e", "prec"]
    assert store.keys("pre/").get() == ["pre/a", "pre/d/e"]
    first = store.put("pre/a", b"2").get()
    assert store.latest_version("pre/a").get() == first.version
    store.delete("pre/a").get()
    store.delete("pre/a").get()
    assert not store.exists("pre/a").get()
    assert store.latest_version("pre/a").get() is None


def test_a_missing_key_is_a_key_error_naming_the_nearest(store):
    store.put("model/layer1.weight", b"w").get()
    with pytest.raises(KeyError) as info:
        store.get("model/layer1.wieght").get()
    assert isinstance(info.value, baton.KeyNotFound)
    assert "'model/layer1.weight'" in str(info.value)


def test_shards_put_by_actors_are_read_as_any_box(procs, store):
    users = procs.spawn("users", StoreUser)
    rows, cols = 6, 8
    puts = users.put_rows.call(store, "sharded", rows, cols, 2).get(timeout=60).values()
    assert sorted(p[1] for p in puts) == [False, True]
    full = torch.arange(rows * cols, dtype=torch.float32).reshape(rows, cols)
    boxes = [Box([0, 0], [6, 8]), Box([0, 2], [6, 2]), Box([1, 3], [4, 4])]
    boxes += [box_of([rows, cols], [Shard(1)], [4], [i]) for i in range(4)]
    boxes += [box_of([rows, cols], [Shard(0), Shard(1)], [2, 2], [i, j])
              for i in range(2) for j in range(2)]
    for b in boxes:
        (r0, c0), (nr, nc) = b
        want = full[r0:r0 + nr, c0:c0 + nc]
        assert torch.equal(store.get("sharded", box=b).get(), want), b
        assert users.slice(procs=1).read_box.call_one(store, "sharded", b).get(timeout=60) == \
            want.tolist()
    assert box_of([6, 8], [Replicate()], [2], [1]) == Box([0, 0], [6, 8])


def test_a_direct_writers_own_memory_is_what_readers_get(procs, store):
    a, b = torch.zeros(64, 32), torch.zeros(64, 32)
    w = store.direct("direct/w", [a, b]).get()
    users = procs.spawn("direct_readers", StoreUser)
    for step in range(1, 6):
        i = w.acquire().get()
        w.buffers[i].fill_(float(step))
        assert w.publish(i).get().version == step
        read = users.read_box.call(store, "direct/w", None).get(timeout=60).values()
        assert [r == [[float(step)] * 32] * 64 for r in read] == [True, True]
        assert torch.equal(store.get("direct/w", box=Box([3, 0], [2, 32])).get(),
                           torch.full((2, 32), float(step)))
    w.close().get()
    with pytest.raises(KeyError):
        store.get("direct/w").get()
    with pytest.raises(baton.store.StoreError, match="at least 2"):
        store.direct("direct/one", [a]).get()
    with pytest.raises(baton.UsageError, match="must be alike"):
        store.direct("direct/mixed", [a, torch.zeros(3)]).get()


def test_a_partial_key_says_what_it_lacks(store):
    store.put("half", torch.zeros(2, 4), shard=Box([0, 0], [2, 4]), global_shape=[4, 4]).get()
    with pytest.raises(baton.KeyNotFound, match=r"is partial.*lacks \[2:4, 0:4\]"):
        store.get("half").get()


def test_a_reader_keeps_its_version_while_the_writer_puts_ten_more(store):
    store.put("held", torch.ones(1000)).get()
    held = store.get("held").get()
    for i in range(2, 12):
        store.put("held", torch.full((1000,), float(i)), keep=3).get()
    assert torch.equal(held, torch.ones(1000))
    assert torch.equal(store.get("held").get(), torch.full((1000,), 11.0))
    volumes = store.stats().get()
    assert sum(v["versions"] for v in volumes) < 100
    # Every proc of this test is on one host: shared memory (or a unix socket before a link
    # switches to it), actors in a volume's own proc, and large reads into a caller's tensor
    # one-sided ("rdma cma" where the kernel allows cross-memory attach).
    paths = set().union(*(v["transfers_by_path"] for v in volumes))
    messages = {p for p in paths if not p.startswith("rdma ")}
    assert "shm" in paths and messages <= {"shm", "unix", "in-process"}, paths


def test_state_dicts_nested_strict_and_cast(procs, store):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    opt = {"step": 3, "groups": [{"lr": 0.1}]}
    store.put_state_dict("ckpt", {"model": model.state_dict(), "optim": opt}).get()
    back = store.get_state_dict("ckpt").get()
    assert back["optim"] == opt
    for k, v in model.state_dict().items():
        assert torch.equal(back["model"][k], v)
    half = store.get_state_dict("ckpt", dtype=torch.bfloat16).get()
    assert half["model"]["0.weight"].dtype == torch.bfloat16
    # Into another model's state dict, in an actor in another proc.
    store.put_state_dict("policy", model.state_dict()).get()
    users = procs.spawn("loaders", StoreUser)
    loaded = users.slice(procs=1).load_policy.call_one(store, "policy").get(timeout=60)
    assert loaded == {k: v.tolist() for k, v in model.state_dict().items()}
    # strict: a key on one side only is named.
    other = {"0.weight": torch.zeros(8, 4), "extra": torch.zeros(1)}
    with pytest.raises(baton.StoreError, match=r"missing key\(s\) in the store: \['extra'\]"):
        store.get_state_dict("policy", into=other).get()
    store.get_state_dict("policy", into=other, strict=False).get()
    assert torch.equal(other["0.weight"], model.state_dict()["0.weight"])


def test_bad_input_is_refused_saying_what(store):
    with pytest.raises(baton.StoreError, match="lies outside the tensor"):
        store.put("bad", torch.zeros(2, 2), shard=Box([3, 0], [2, 2]), global_shape=[4, 2]).get()
    store.put("good", torch.zeros(2, 2)).get()
    with pytest.raises(baton.StoreError, match="into a destination of 12 bytes"):
        store.get("good", into=torch.zeros(3)).get()
    with pytest.raises(baton.StoreError, match="into a destination of int32"):
        store.get("good", into=torch.zeros(2, 2, dtype=torch.int32)).get()
    with pytest.raises(baton.UsageError, match="global_shape"):
        store.put("bad", torch.zeros(2), shard=Box([0], [2]))
    with pytest.raises(baton.UsageError, match="cannot be pickled"):
        store.put("bad", lambda: 0)


def test_a_killed_volume_fails_its_keys_and_they_can_be_put_again():
    procs = baton.this_host().spawn_procs({"procs": 2})
    store = Store.create(procs)
    users = procs.spawn("victims", StoreUser)
    keys = [f"k{i}" for i in range(12)]
    for k in keys:
        store.put(k, k.encode()).get()
    os.kill(users.slice(procs=1).pid.call_one().get(timeout=30), signal.SIGKILL)
    lost = []
    for k in keys:
        try:
            assert store.get(k).get(timeout=60) == k.encode()
        except baton.StoreError as e:
            assert f"get of '{k}'" in str(e) and "its volume in proc" in str(e)
            lost.append(k)
    assert 0 < len(lost) < len(keys)
    for k in lost:
        store.put(k, b"again").get()
        assert store.get(k).get() == b"again"
    procs.stop().get(timeout=60)
