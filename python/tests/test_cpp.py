"""C++ actors driven from Python: a C++ worker program exposes Trainer by name; Python spawns it,
calls its endpoints with converted arguments, sees its exceptions, and hands the mesh to a Python
actor (a mixed C++/Python job)."""

import os

import numpy as np
import pytest

import baton
from actors import Caller

PROGRAM = os.environ.get("BATON_CPP_TRAINERS", "")


@pytest.fixture(scope="module")
def trainers():
    assert PROGRAM, "BATON_CPP_TRAINERS names the cpp_trainers program (CTest sets it)"
    procs = baton.this_host().spawn_procs({"trainers": 3}, program=[PROGRAM])
    mesh = procs.spawn("cpp", baton.cpp("Trainer"), 0.5, "t")
    yield mesh
    procs.stop().get(timeout=60)


def test_endpoints_by_name_with_converted_arguments_and_results(trainers):
    about = trainers.about.call().get(timeout=30)
    assert [a["rank"] for a in about.values()] == ["0", "1", "2"]
    assert about[{"trainers": 2}]["tag"] == "t"
    trainers.load.broadcast(np.linspace(-1, 1, 50), [2.0 * v for v in np.linspace(-1, 1, 50)])
    assert all(loss >= 0 for loss in trainers.train.call(50).get(timeout=30).values())
    w, b = trainers.slice(trainers=1).weights.call_one().get(timeout=30)
    assert abs(w - 2.0) < 0.05 and abs(b) < 0.05
    trainers.set_weights.broadcast([7, 8])
    assert trainers.weights.choose().get(timeout=30) == [7.0, 8.0]


def test_wrong_arguments_and_unknown_endpoints_say_what_is_wrong(trainers):
    wrong = "argument 1 of Trainer::train: expected int, got str"
    with pytest.raises(baton.ActorError, match=wrong):
        trainers.slice(trainers=0).train.call_one("ten").get(timeout=30)
    with pytest.raises(baton.ActorError, match="takes 1 arguments, got 2"):
        trainers.slice(trainers=0).train.call_one(1, 2).get(timeout=30)
    with pytest.raises(baton.ActorError, match="no endpoint 'fly'.*train"):
        trainers.slice(trainers=0).fly.call_one().get(timeout=30)
    with pytest.raises(baton.ActorError, match="must be non-empty"):
        trainers.slice(trainers=0).load.call_one([], []).get(timeout=30)


def test_spawning_an_unexposed_name_or_wrong_constructor_arguments_fails_clearly():
    procs = baton.this_host().spawn_procs({"trainers": 1}, program=[PROGRAM])
    # As with any actor, a constructor's failure is the actor's: supervision hears of it, and
    # calls to it fail saying why.
    nope = procs.spawn("nope", baton.cpp("Nope"))
    with pytest.raises(baton.BatonError, match="no constructor registered"):
        nope.about.call_one().get(timeout=30)
    short = procs.spawn("short", baton.cpp("Trainer"), 0.1)
    with pytest.raises(baton.BatonError, match="constructor takes 2 arguments, got 1"):
        short.about.call_one().get(timeout=30)
    procs.stop().get(timeout=60)


def test_a_python_actor_calls_a_cpp_mesh_it_was_given(trainers):
    procs = baton.this_host().spawn_procs({"callers": 1})
    caller = procs.spawn("caller", Caller)
    trainers.set_weights.broadcast([1, 2])
    # Caller.total sums value() over a mesh: here the C++ endpoint is weights (a list).
    assert caller.total_of.call_one(trainers, "weights").get(timeout=30) == [1.0, 2.0] * 3
    procs.stop().get(timeout=60)


def test_a_missing_program_is_refused_saying_why():
    with pytest.raises(baton.UsageError, match="cannot run"):
        baton.this_host().spawn_procs({"trainers": 1}, program=["/nonexistent/program"])


def test_cpp_and_python_read_each_others_keys_in_a_tensor_store(trainers):
    from baton.store import Store

    procs = baton.this_host().spawn_procs({"volumes": 1})
    store = Store.create(procs)
    trainers.set_weights.broadcast([3, 4])
    assert trainers.slice(trainers=0).publish.call_one(store.handle(), "cpp/w").get(timeout=30) >= 1
    assert [float(v) for v in store.get("cpp/w").get()] == [3.0, 4.0]
    store.put("py/w", np.array([5.0, 6.0])).get()
    trainers.slice(trainers=1).load_from.call_one(store.handle(), "py/w").get(timeout=30)
    assert trainers.slice(trainers=1).weights.call_one().get(timeout=30) == [5.0, 6.0]
    with pytest.raises(baton.ActorError, match="not a store handle"):
        trainers.slice(trainers=1).load_from.call_one("zz", "py/w").get(timeout=30)
    procs.stop().get(timeout=60)
