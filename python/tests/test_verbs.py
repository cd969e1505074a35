"""Every verb, slicing, ValueMesh, ordering per sender and asyncio, against Python actors in
real worker processes."""

import asyncio
import os

import pytest

import baton
from actors import Contextual, Counter


@pytest.fixture(scope="module")
def procs():
    p = baton.this_host().spawn_procs({"gpus": 4})
    yield p
    p.stop().get(timeout=60)


def test_call_gathers_every_member_in_rank_order(procs):
    counters = procs.spawn("call", Counter, 10, step=2)
    got = counters.incr.call().get(timeout=30)
    assert isinstance(got, baton.ValueMesh)
    assert got.values() == [12, 12, 12, 12]
    assert [p["gpus"] for p in got.points()] == [0, 1, 2, 3]
    assert got.shape == {"gpus": 4}


def test_call_one_choose_broadcast_stream(procs):
    counters = procs.spawn("verbs", Counter, 0)
    assert counters.slice(gpus=2).incr.call_one().get(timeout=30) == 1
    with pytest.raises(baton.UsageError):
        counters.incr.call_one().get(timeout=30)
    assert counters.value.choose().get(timeout=30) in (0, 1)
    counters.incr.broadcast()
    assert sorted(counters.value.call().get(timeout=30).values()) == [1, 1, 1, 2]
    seen = list(counters.value.stream(timeout=30))
    assert sorted(p["gpus"] for p, _ in seen) == [0, 1, 2, 3]
    assert dict((p["gpus"], v) for p, v in seen) == {0: 1, 1: 1, 2: 2, 3: 1}


def test_slicing_by_keyword_is_a_view(procs):
    counters = procs.spawn("slices", Counter, 0)
    first_two = counters.slice(gpus=slice(0, 2))
    assert first_two.shape == {"gpus": 2}
    assert first_two.incr.call().get(timeout=30).values() == [1, 1]
    one = counters.slice(gpus=3)
    assert one.shape == {}
    assert one.incr.call_one().get(timeout=30) == 1
    assert counters.value.call().get(timeout=30).values() == [1, 1, 0, 1]
    tail = counters.slice(gpus=slice(2, None))
    assert [p["gpus"] for p in tail.value.call().get(timeout=30).points()] == [0, 1]
    with pytest.raises(baton.UsageError):
        counters.slice(hosts=0)


def test_value_mesh_is_iterable_by_point(procs):
    counters = procs.spawn("points", Counter, 5)
    vm = counters.value.call().get(timeout=30)
    pairs = list(vm)
    assert len(pairs) == 4
    for point, value in pairs:
        assert isinstance(point, baton.Point)
        assert dict(point) == {"gpus": point.rank}
        assert value == 5
    assert vm[{"gpus": 3}] == 5


def test_order_per_sender_holds_through_broadcasts(procs):
    counters = procs.spawn("order", Counter, 0)
    for i in range(200):
        counters.note.broadcast(i)
    for noted in counters.noted.call().get(timeout=30).values():
        assert noted == list(range(200))


def test_an_unknown_endpoint_says_which_there_are(procs):
    counters = procs.spawn("unknown", Counter, 0)
    with pytest.raises(AttributeError, match="not_an_endpoint is not an endpoint: mark it with "
                       "@endpoint"):
        counters.not_an_endpoint.call()
    with pytest.raises(AttributeError, match="no endpoint 'nope' .*incr"):
        counters.nope
    with pytest.raises(baton.UsageError, match=r"use mesh.incr.call\(...\)"):
        counters.incr()


def test_async_endpoints_and_asyncio_at_the_controller(procs):
    counters = procs.spawn("async", Counter, 0)

    async def main():
        futures = [counters.later.call(i) for i in range(10)]
        results = await asyncio.gather(*futures)
        one = await counters.slice(gpus=1).later.call_one(21)
        return results, one

    results, one = asyncio.run(main())
    assert [r.values() for r in results] == [[2 * i] * 4 for i in range(10)]
    assert one == 42


def test_get_with_a_timeout_raises_baton_timeout_and_stays_usable(procs):
    counters = procs.spawn("timeout", Counter, 0)
    f = counters.later.call(1)  # each replies after 10 ms: not within 0 s
    with pytest.raises(baton.TimeoutError) as info:
        f.get(timeout=0)
    assert isinstance(info.value, TimeoutError)  # the builtin's subclass too
    assert f.get(timeout=30).values() == [2, 2, 2, 2]


def test_reducers_fold_replies_along_the_tree(procs):
    import operator

    counters = procs.spawn("reduce", Counter, 3)
    assert counters.value.reduce(operator.add).get(timeout=30) == 12
    counters.slice(gpus=2).incr.call_one().get(timeout=30)
    assert counters.value.reduce(max).get(timeout=30) == 4
    assert counters.value.reduce(lambda a, b: a * 10 + b).get(timeout=30) == 3343
    assert counters.noted.reduce(lambda a, b: a + b).get(timeout=30) == []
    with pytest.raises(baton.ActorError, match="ZeroDivisionError"):
        counters.value.reduce(lambda a, b: a / 0).get(timeout=30)


def test_ports_carry_values_from_actors_in_order_per_sender(procs):
    counters = procs.spawn("ports", Counter, 0)
    port, receiver = baton.open_port()
    counters.report_to.broadcast(port, 50)
    got = [receiver.recv(timeout=30) for _ in range(200)]
    for rank in range(4):
        assert [i for r, i in got if r == rank] == list(range(50))
    with pytest.raises(baton.TimeoutError):
        receiver.recv(timeout=0.05)
    assert receiver.try_recv("empty") == "empty"


def test_each_message_starts_in_a_fresh_context_as_its_own_thread_would(procs):
    # Two actors in each proc, on its few runtime threads: a context variable one message sets is
    # seen by no later message, of the same actor or another.
    a = procs.spawn("context-a", Contextual)
    b = procs.spawn("context-b", Contextual)
    for i in range(25):
        assert a.swap.call(("a", i)).get(timeout=30).values() == [None] * 4
        assert b.swap.call(("b", i)).get(timeout=30).values() == [None] * 4


def test_a_stream_goes_on_after_a_timeout_and_after_a_members_failure(procs, tmp_path):
    counters = procs.spawn("streams", Counter, 0)
    gate = tmp_path / "gate"
    os.mkfifo(gate)
    s = counters.slice(gpus=1).read_line.stream(str(gate), timeout=0.05)
    with pytest.raises(baton.TimeoutError, match="still usable"):
        next(s)  # the actor waits for the line below
    fd = os.open(gate, os.O_RDWR)  # never blocks, and keeps the FIFO open until read
    try:
        os.write(fd, b"through\n")
        point, value = s.next(timeout=30)
    finally:
        os.close(fd)
    assert value == "through" and dict(point) == {}  # the slice's one member
    with pytest.raises(StopIteration):
        next(s)
    got, failed = [], []
    s = counters.fail_on.stream(2, timeout=30)
    while True:
        try:
            got.append(next(s)[1])
        except baton.ActorError as e:
            failed.append(e)
        except StopIteration:
            break
    assert sorted(got) == [0, 1, 3]
    assert len(failed) == 1 and "rank 2 fails" in str(failed[0])


class Private(baton.Actor):
    @baton.endpoint
    def _hidden(self):
        return 0


class NamedMro(baton.Actor):
    @baton.endpoint
    def mro(self):
        return "mro"


class HidesStop(baton.Actor):
    @baton.endpoint
    def stop(self):
        return "never reachable through a mesh"


def test_negative_indices_count_from_the_end_as_in_python(procs):
    counters = procs.spawn("negative", Counter, 0)
    assert counters.slice(gpus=-1).fail_on.call_one(-9).get(timeout=30) == 3
    assert counters.slice(gpus=slice(-3, -1)).fail_on.call(-9).get(timeout=30).values() == [1, 2]
    with pytest.raises(baton.UsageError, match="index -5 out of bounds for 'gpus' .size 4."):
        counters.slice(gpus=-5)
    with pytest.raises(baton.UsageError, match="takes an int or a slice, not bool"):
        counters.slice(gpus=True)
    with pytest.raises(baton.UsageError, match="index 4 out of bounds for 'gpus' .size 4."):
        counters.slice(gpus=4)
    # Slices are clamped to the mesh, as Python's sequences clamp them; an empty one is refused.
    assert counters.slice(gpus=slice(2, 10)).fail_on.call(-9).get(timeout=30).values() == [2, 3]
    with pytest.raises(baton.UsageError, match="slice gpus=3:1 selects none of its 4"):
        counters.slice(gpus=slice(3, 1))


def test_wrong_arguments_are_usage_errors_that_say_what_to_do(procs):
    with pytest.raises(baton.UsageError, match="'a/b' is not a mesh name: use 1-128 characters"):
        procs.spawn("a/b", Counter, 0)
    with pytest.raises(baton.UsageError, match="3 is not a mesh name"):
        procs.spawn(3, Counter)
    with pytest.raises(baton.UsageError, match="endpoint.s. stop have the name of the mesh's own "
                       "method, which would hide them: rename them"):
        procs.spawn("hides", HidesStop)
    with pytest.raises(baton.UsageError, match="endpoint.s. _hidden start with '_'"):
        procs.spawn("private", Private)
    assert procs.spawn("mro", NamedMro).mro.call().get(timeout=30).values() == ["mro"] * 4
    for shape in ({"gpus": -1}, {"gpus": 2.5}, {"gpus": True}, {4: 2}):
        with pytest.raises(baton.UsageError, match="each dimension is a name and a size of 1"):
            baton.this_host().spawn_procs(shape)
    with pytest.raises(baton.UsageError, match="give the shape as a dict"):
        baton.this_host().spawn_procs(["gpus", 2])
    counters = procs.spawn("wrong-args", Counter, 0)
    with pytest.raises(baton.UsageError, match="timeout is a number of seconds, not str"):
        counters.value.call().get(timeout="1")


def test_an_actor_error_has_the_members_point(procs):
    counters = procs.spawn("failing-point", Counter, 0)
    with pytest.raises(baton.ActorError) as info:
        counters.fail_on.call(2).get(timeout=30)
    point = info.value.point
    assert point.rank == 2 and dict(point) == {"gpus": 2}
    assert "rank 2 fails" in info.value.remote_message and info.value.endpoint == "fail_on"


def test_what_cannot_be_pickled_is_a_type_error_saying_what_it_was(procs):
    import pickle
    import threading

    counters = procs.spawn("unsendable", Counter, 0)
    for endpoint in ("unsendable", "unsendable_later"):
        with pytest.raises(baton.ActorError) as info:
            getattr(counters.slice(gpus=0), endpoint).call_one().get(timeout=30)
        assert info.value.remote_type == "TypeError"
        assert f"{endpoint} returned a lock, which cannot be sent to its caller" in str(info.value)
    with pytest.raises(TypeError, match="the call's arguments cannot be sent .pickled."):
        counters.echo.call(threading.Lock())
    with pytest.raises(TypeError, match="a ProcMesh stays with whoever spawned it"):
        pickle.dumps(procs)


def test_stopping_actors_whose_procs_were_stopped_has_nothing_left_to_do():
    procs = baton.this_host().spawn_procs({"gpus": 1})
    counters = procs.spawn("stopped-with-procs", Counter, 0)
    procs.stop().get(timeout=60)
    counters.stop().get(timeout=30)
    with pytest.raises(baton.UsageError, match="its procs were stopped; spawn new procs"):
        counters.value.call()
