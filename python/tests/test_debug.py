"""breakpoint() in a Python actor, debugged with `baton debug` in a real terminal (tmux): two
ranks pause together and are listed by mesh, rank and line; pdb inspects and changes one's
variables; detaching leaves it paused; `c` and `continue` resume them; the job's other actors
keep running meanwhile."""

import json
import os
import shutil
import subprocess
import sys
import time
from typing import Callable, List

CONTROLLER = """
import sys
import baton
from actors import Counter, Debuggee

procs = baton.this_host().spawn_procs({"gpus": 2})
debuggees = procs.spawn("debuggee", Debuggee)
counters = procs.spawn("counter", Counter, 0)
result = debuggees.step.call(10)
print("started", flush=True)
sys.stdin.readline()  # the test has seen both ranks paused
for _ in range(3):  # on the same procs as the paused actors, which handle nothing meanwhile
    counters.incr.call().get(timeout=30)
print("counters ran", flush=True)
print("RESULT", sorted(v for _, v in result.get(timeout=300).items()), flush=True)
sys.stdin.readline()  # the test is done with `baton debug`
procs.stop().get(timeout=60)
"""


def wait_until(what: str, test: Callable[[], bool], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not test():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for " + what)
        time.sleep(0.1)  # a poll of the condition, with a deadline


class Terminal:
    """`baton debug` in a tmux pane of its own server."""

    def __init__(self, command: List[str]) -> None:
        self.server = f"baton-debug-test-{os.getpid()}"
        # The pane stays open after the command, so that the screen says how it ended.
        shell = ["sh", "-c", '"$@"; echo "[exited with status $?]"; read _', "sh", *command]
        self._tmux("new-session", "-d", "-s", "debug", "-x", "200", "-y", "60", *shell)

    def _tmux(self, *args: str) -> str:
        return subprocess.run(
            ["tmux", "-L", self.server, *args], check=True, capture_output=True, text=True
        ).stdout

    def screen(self) -> str:
        return self._tmux("capture-pane", "-p", "-J", "-t", "debug", "-S", "-1000")

    def type(self, line: str) -> None:
        self._tmux("send-keys", "-t", "debug", "-l", line)
        self._tmux("send-keys", "-t", "debug", "Enter")

    def wait_for(self, text: str, count: int = 1) -> str:
        try:
            wait_until(repr(text) + " on the screen", lambda: self.screen().count(text) >= count)
        except AssertionError as e:
            raise AssertionError(f"{e}; the screen:\n{self.screen()}") from None
        return self.screen()

    def close(self) -> None:
        subprocess.run(["tmux", "-L", self.server, "kill-server"], capture_output=True)


def paused_in(job: subprocess.Popen) -> list:
    """The actors of `job` paused in breakpoint(), as `baton debug --list --json` gives them."""
    run = subprocess.run(
        [os.environ.get("BATON_CLI", "baton"), "--job", str(job.pid), "debug", "--list", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    return json.loads(run.stdout) if run.returncode == 0 else []


def controller_env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [os.path.dirname(os.path.abspath(__file__))] + env.get("PYTHONPATH", "").split(os.pathsep)
    )
    return env


STOPPED = """
import sys
import baton
from actors import Debuggee

procs = baton.this_host().spawn_procs({"gpus": 1})
result = procs.spawn("debuggee", Debuggee).step.call_one(10)
print("started", flush=True)
sys.stdin.readline()  # the test has seen it paused
procs.stop().get(timeout=60)
try:
    print("RESULT", result.get(timeout=60), flush=True)
except baton.ActorError as e:
    print("RESULT", type(e).__name__, str(e).splitlines()[0], flush=True)
"""


def test_stopping_a_proc_quits_its_paused_debugger_and_the_call_says_so():
    job = subprocess.Popen(
        [sys.executable, "-c", STOPPED],
        env=controller_env(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert job.stdout is not None and job.stdin is not None and job.stderr is not None
        assert job.stdout.readline().strip() == "started"
        wait_until("the actor paused", lambda: len(paused_in(job)) == 1)
        job.stdin.write("stop\n")
        job.stdin.flush()
        said = job.stdout.readline()
        assert said.startswith("RESULT ActorError"), said
        assert "raised in step: bdb.BdbQuit" in said
        assert job.wait(timeout=120) == 0
        # The proc stopped at once: it was not left to its stop bound and a SIGTERM.
        assert "did not finish stopping" not in job.stderr.read()
    finally:
        if job.poll() is None:
            job.kill()
            job.wait()


def test_baton_debug_attaches_to_paused_ranks_and_resumes_them():
    assert shutil.which("tmux"), "tmux is not installed (make deps)"
    job = subprocess.Popen(
        [sys.executable, "-c", CONTROLLER],
        env=controller_env(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    cli = os.environ.get("BATON_CLI", "baton")
    term = None
    try:
        assert job.stdout is not None and job.stdin is not None
        assert job.stdout.readline().strip() == "started"

        def paused() -> list:
            return paused_in(job)

        wait_until("both ranks paused", lambda: len(paused()) == 2)
        listed = paused()
        assert [(p["mesh"], p["rank"]) for p in listed] == [("debuggee", 0), ("debuggee", 1)]
        assert all(p["where"].endswith("actors.py:" + p["where"].split(":")[-1]) for p in listed)
        assert all(" in step" in p["where"] for p in listed)
        # The paused actors' procs still run their other actors.
        job.stdin.write("go\n")
        job.stdin.flush()
        assert job.stdout.readline().strip() == "counters ran"

        term = Terminal([cli, "--job", str(job.pid), "debug"])
        screen = term.wait_for("(baton debug)")
        assert "2 actors paused in breakpoint()" in screen
        assert "mesh debuggee" in screen
        assert "rank 0" in screen and "rank 1" in screen

        term.type("attach 0")
        screen = term.wait_for("(Pdb)")
        assert "-> z = y + 1" in screen
        term.type("p y")
        term.wait_for("\n20\n")
        term.type("!y = 100")
        term.type("n")
        term.wait_for("-> return z")
        term.type("detach")
        term.wait_for("stays paused")
        # Detached, it is still paused, a line further; the other rank never moved.
        term.type("list")
        screen = term.wait_for("2 actors paused in breakpoint()", count=2)
        tail = screen[screen.rindex("2 actors paused") :]
        assert "rank 0" in tail and "rank 1" in tail

        term.type("attach 1")
        term.wait_for("-> z = y + 1", count=2)
        term.type("c")
        term.wait_for("procs0.1/debuggee[0] runs on")
        term.type("continue")  # every actor still paused: rank 0
        term.wait_for("procs0.0/debuggee[0] runs on")
        term.type("list")
        term.wait_for("no actor is paused in breakpoint()")

        # Rank 0 returned what pdb made of it (100 + 1), rank 1 what its code did (20 + 1).
        assert job.stdout.readline().strip() == "RESULT [21, 101]"
        term.type("quit")
        term.wait_for("[exited with status 0]")
        job.stdin.write("done\n")
        job.stdin.flush()
        assert job.wait(timeout=120) == 0
    finally:
        if term is not None:
            term.close()
        if job.poll() is None:
            job.kill()
            job.wait()
