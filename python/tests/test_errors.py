"""Errors as Python users expect: the remote exception's type, message and traceback, the actor
and its point; supervision when a worker is killed."""

import os
import signal

import pytest

import baton
from actors import Counter


@pytest.fixture(scope="module")
def procs():
    p = baton.this_host().spawn_procs({"gpus": 2})
    yield p
    p.stop().get(timeout=60)


def test_a_remote_exception_keeps_its_type_message_and_traceback(procs):
    counters = procs.spawn("errors", Counter, 0)
    with pytest.raises(baton.ActorError) as info:
        counters.slice(gpus=1).fail.call_one("bad value").get(timeout=30)
    e = info.value
    assert e.remote_type == "ValueError"
    assert e.remote_message == "bad value"
    assert "in fail" in e.remote_traceback and "raise ValueError(text)" in e.remote_traceback
    # It starts at the endpoint: the frames of baton's own machinery that ran it are left out.
    assert _first_frame(e.remote_traceback).endswith("in fail"), e.remote_traceback
    assert "errors" in e.actor
    assert e.endpoint == "fail"
    # The actor lives on: one failed call does not stop it.
    assert counters.incr.call().get(timeout=30).values() == [1, 1]


def test_a_mesh_call_names_the_member_that_raised(procs):
    counters = procs.spawn("errors-mesh", Counter, 0)
    with pytest.raises(baton.ActorError) as info:
        counters.fail.call("everywhere").get(timeout=30)
    assert "rank 0" in info.value.where


def test_an_async_endpoint_raising(procs):
    counters = procs.spawn("errors-async", Counter, 0)
    with pytest.raises(baton.ActorError) as info:
        counters.slice(gpus=0).fail_later.call_one().get(timeout=30)
    assert info.value.remote_type == "KeyError"
    assert _first_frame(info.value.remote_traceback).endswith("in fail_later"), (
        info.value.remote_traceback
    )


def _first_frame(traceback_text):
    """The first 'File ..., line N, in NAME' line of a traceback's text."""
    return next(line.strip() for line in traceback_text.splitlines() if "File " in line)


def test_a_constructor_that_raises_fails_the_spawn(procs):
    with pytest.raises(Exception, match="missing 1 required positional argument"):
        procs.spawn("bad-ctor", Counter).incr.call().get(timeout=30)


def test_a_worker_killed_by_sigkill_is_a_supervision_error():
    from conftest import FAILURES, failure_after

    procs = baton.this_host().spawn_procs({"gpus": 2})
    counters = procs.spawn("victims", Counter, 0)
    pid = counters.slice(gpus=1).pid.call_one().get(timeout=30)
    before = len(FAILURES)
    os.kill(pid, signal.SIGKILL)
    # The death reaches the controller's hook; from then on a call to the dead actor is a
    # SupervisionError (just before, it may still find the link closed: UndeliverableError).
    report = failure_after(before, "SIGKILL")
    assert report is not None, f"the death never reached the hook (it heard {FAILURES[before:]})"
    with pytest.raises(baton.SupervisionError) as info:
        counters.slice(gpus=1).value.call_one().get(timeout=30)
    assert "rank 1" in str(info.value) or "victims" in str(info.value)
    # The survivor still answers.
    assert counters.slice(gpus=0).value.call_one().get(timeout=30) == 0
    procs.stop().get(timeout=60)


def test_the_procs_of_an_owner_that_died_are_said_to_have_gone_with_it():
    from conftest import FAILURES, failure_after

    from actors import Parent

    procs = baton.this_host().spawn_procs({"owners": 1})
    parent = procs.spawn("owner", Parent)
    kid_pids = parent.start.call_one().get(timeout=60)
    kids = parent.kids_mesh.call_one().get(timeout=30)  # the owner's mesh, in the controller
    assert kids.pid.call().get(timeout=30).values() == kid_pids
    before = len(FAILURES)
    os.kill(parent.own_pid.call_one().get(timeout=30), signal.SIGKILL)
    assert failure_after(before, "SIGKILL") is not None, "the owner's death never reached the hook"
    # Its procs went with it: a call to them says so, naming the owner and how it died, where
    # it was an UndeliverableError ("cannot be reached") before.
    for _ in range(2):
        with pytest.raises(baton.SupervisionError) as info:
            kids.pid.call().get(timeout=30)
        text = str(info.value)
        assert "went with the proc that started it" in text and "SIGKILL" in text, text
    procs.stop().get(timeout=60)


def test_a_supervise_that_raises_fails_its_actor_and_its_owner_hears_what_it_raised():
    from conftest import FAILURES, failure_after

    from actors import BrokenSupervisor

    procs = baton.this_host().spawn_procs({"supervisors": 1})
    parent = procs.spawn("broken-supervisor", BrokenSupervisor)
    pids = parent.start.call_one().get(timeout=60)
    before = len(FAILURES)
    os.kill(pids[0], signal.SIGKILL)
    report = failure_after(before, "this supervisor is broken")
    assert report is not None, f"no report of what __supervise__ raised: {FAILURES[before:]}"
    assert "broken-supervisor" in report and "SIGKILL" in report, report
    procs.stop().get(timeout=60)


def test_choose_passes_over_a_member_whose_proc_is_known_to_have_died():
    from conftest import FAILURES, failure_after

    procs = baton.this_host().spawn_procs({"gpus": 3})
    counters = procs.spawn("chosen", Counter, 0)
    pids = counters.pid.call().get(timeout=30).values()
    before = len(FAILURES)
    os.kill(pids[1], signal.SIGKILL)
    assert failure_after(before, "SIGKILL") is not None, "the death never reached the hook"
    # Every choice is a live member, and over 60 of them both live members are chosen.
    chosen = [counters.pid.choose().get(timeout=30) for _ in range(60)]
    assert set(chosen) == {pids[0], pids[2]}, chosen
    with pytest.raises(baton.SupervisionError):  # where only the dead one is left, it says so
        counters.slice(gpus=1).pid.choose().get(timeout=30)
    procs.stop().get(timeout=60)


def test_an_exception_with_no_caller_to_take_it_reaches_supervision_with_its_traceback(procs):
    from conftest import FAILURES, failure_after

    counters = procs.spawn("errors-broadcast", Counter, 0)
    before = len(FAILURES)
    counters.slice(gpus=0).fail.broadcast("nobody waits for this")
    report = failure_after(before, "errors-broadcast")
    assert report is not None, f"the failure never reached the hook (it heard {FAILURES[before:]})"
    assert "nobody waits for this" in report and "raise ValueError(text)" in report
    # Named by the Python method, not by the runtime's endpoint that runs them all.
    assert "Counter.fail threw with no caller to tell" in report, report


def test_an_actor_owns_the_procs_it_spawns_and_supervises_them(procs):
    import time

    from actors import Parent

    parent = procs.slice(gpus=0).spawn("parent", Parent)
    pids = parent.start.call_one().get(timeout=60)
    assert len(pids) == 2
    os.kill(pids[1], signal.SIGKILL)
    deadline = time.monotonic() + 30
    seen = []
    while not seen and time.monotonic() < deadline:
        seen = parent.failures_seen.call_one().get(timeout=30)
        time.sleep(0.02)  # polling the actor's record, bounded by the deadline
    assert seen and "kids" in seen[0] and "SIGKILL" in seen[0]
    # Blocking inside a plain endpoint is refused, saying what to do instead.
    with pytest.raises(baton.ActorError, match="spawn_procs_async"):
        parent.spawn_blocking.call_one().get(timeout=30)
