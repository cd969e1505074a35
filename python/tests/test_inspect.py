"""Looking inside a job of Python actors: a Python actor blocked in time.sleep shows that line
of its endpoint in its stack, on the thread that runs it, through the `baton` command."""

import json
import os
import subprocess
import sys
import time

import pytest

import baton
from actors import Sleeper


def baton_cli(*args: str) -> subprocess.CompletedProcess:
    exe = os.environ.get("BATON_CLI", "baton")
    return subprocess.run(
        [exe, "--job", str(os.getpid()), *args], capture_output=True, text=True, timeout=60
    )


@pytest.fixture(scope="module")
def procs():
    p = baton.this_host().spawn_procs({"gpus": 1})
    yield p
    p.stop().get(timeout=60)


def thread_in_nap(stacks: list) -> dict:
    """The thread whose Python stack is inside Sleeper.nap_until, or an empty dict."""
    for proc in stacks:
        for thread in proc["threads"]:
            if any("in nap_until" in frame for frame in thread["python"]):
                return thread
    return {}


def test_a_python_actor_in_time_sleep_shows_that_line_on_its_thread(procs, tmp_path):
    sleeper = procs.spawn("sleeper", Sleeper)
    assert sleeper.nap.call_one(0).get(timeout=30) == 0
    # The controller's call times go by the Python endpoint, not the runtime's one that runs it.
    metrics = baton_cli("metrics").stdout
    assert 'baton_call_duration_seconds_count{proc="ctl",endpoint="Sleeper.nap"}' in metrics, \
        metrics
    assert "PyActor" not in metrics
    # It naps until the test has looked (a nap of fixed length could end first on a busy machine).
    wake = tmp_path / "wake"
    napping = sleeper.nap_until.call_one(str(wake))
    try:
        deadline = time.monotonic() + 20
        thread: dict = {}
        while not thread and time.monotonic() < deadline:
            run = baton_cli("stack", "--json")
            assert run.returncode == 0, run.stderr
            thread = thread_in_nap(json.loads(run.stdout))
        assert thread, "no thread of the job showed Sleeper.nap_until"
        nap = next(frame for frame in thread["python"] if "in nap_until" in frame)
        assert "actors.py" in nap
        assert "time.sleep(0.05)  # the line its stack shows" in nap
        # The thread that runs the endpoint is the one marked with the actor, and its endpoint by
        # the Python class's name.
        assert any(
            "/sleeper[0]: endpoint Sleeper.nap_until for" in a for a in thread["actors"]
        ), thread
        listed = json.loads(baton_cli("ls", "--json").stdout)["actors"]
        sleeper = next(a for a in listed if a["id"].endswith("/sleeper[0]"))
        assert sleeper["type"] == "Sleeper"
        assert sleeper["running"] == "Sleeper.nap_until"
        assert thread["native"], "the native stack of the same thread"
        # As text: the Python stack, most recent call last.
        text = baton_cli("stack").stdout
        assert "Python (most recent call last):" in text
        assert "time.sleep(0.05)" in text
    finally:
        wake.touch()
    assert napping.get(timeout=30) > 0  # its proc's pid, once it woke


TRACED = """
import baton
from actors import Counter

procs = baton.this_host().spawn_procs({"gpus": 2})
counters = procs.spawn("counters", Counter, 0)
for _ in range(3):
    counters.incr.call().get(timeout=30)
procs.stop().get(timeout=60)
baton.shutdown()
"""


def test_baton_trace_writes_the_whole_runs_trace_when_the_program_ends(tmp_path):
    out = tmp_path / "run.json"
    env = dict(os.environ)
    env["BATON_TRACE"] = str(out)
    env["PYTHONPATH"] = os.pathsep.join(
        [os.path.dirname(os.path.abspath(__file__))] + env.get("PYTHONPATH", "").split(os.pathsep)
    )
    run = subprocess.run(
        [sys.executable, "-c", TRACED], env=env, capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stderr
    assert "the trace of this run is in " + str(out) in run.stderr
    events = json.loads(out.read_text())["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M"}
    assert sorted(n for n in names.values() if n.startswith("procs")) == ["procs0.0", "procs0.1"]
    endpoint_spans = [e for e in events if e["ph"] == "X" and e["cat"] == "endpoint"]
    by_actor: dict = {}
    for e in endpoint_spans:
        by_actor.setdefault(e["args"]["actor"], []).append(e)
    # Each member ran its three calls, in its own worker's process.
    for rank in (0, 1):
        mine = by_actor.get(f"procs0.{rank}/counters[0]", [])
        assert len([e for e in mine if names[e["pid"]] == f"procs0.{rank}"]) >= 3, by_actor.keys()
    starts = {e["id"] for e in events if e["ph"] == "s"}
    ends = {e["id"] for e in events if e["ph"] == "f"}
    assert starts and starts == ends


def start_with_trace(trace: str) -> subprocess.CompletedProcess:
    """A program that starts procs with BATON_TRACE=`trace`, run to its end."""
    env = dict(os.environ, BATON_TRACE=trace)
    return subprocess.run(
        [sys.executable, "-c", "import baton; baton.this_host().spawn_procs(gpus=1)"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_baton_trace_file_that_cannot_be_written_is_refused_as_the_run_starts(tmp_path):
    run = start_with_trace(str(tmp_path / "no-such-dir" / "run.json"))
    assert run.returncode != 0
    assert "BATON_TRACE=" in run.stderr
    assert "there is no directory " + str(tmp_path / "no-such-dir") in run.stderr
    run = start_with_trace(str(tmp_path))  # a directory, not a file
    assert run.returncode != 0
    assert "it is a directory" in run.stderr
