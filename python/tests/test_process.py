"""The controller's life as a process: Ctrl-C stops the job cleanly (no orphans, no traceback
storm), SIGKILL leaves no worker behind, workers' prints reach it with their rank prefixes."""

import os
import select
import signal
import subprocess
import sys
import threading
import time


HERE = os.path.dirname(os.path.abspath(__file__))


def start(*args, runner=()):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([HERE] + env.get("PYTHONPATH", "").split(os.pathsep))
    env.pop("PYTHONUNBUFFERED", None)  # print() to a pipe stays in Python's buffer, as usual
    env.pop("BATON_MONARCH", None)  # set by the runner alone
    return subprocess.Popen(
        [sys.executable, *runner, os.path.join(HERE, "controller_script.py"), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        # As from a terminal: Ctrl-C not ignored (a background job's is), so Python handles it.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def read_pids(proc):
    proc.seen_out = ""
    pids = None
    for line in proc.stdout:
        proc.seen_out += line
        if line.startswith("pids "):
            pids = [int(p) for p in line.split()[1:]]
        if line.strip() == "ready":
            return pids
    raise AssertionError("the controller ended before it was ready: " + proc.stderr.read())


def wait_for_waiting(proc):
    """Until the controller says on its standard error that it waits for its signal."""
    proc.seen_err = ""
    for line in proc.stderr:
        proc.seen_err += line
        if line.strip() == "waiting":
            return
    raise AssertionError("the controller ended before it waited")


def finish(proc, timeout):
    """(out, err): all the controller wrote, once it ended, read through the same file objects
    as read_pids (communicate() would miss what their buffers already hold)."""
    got = {}

    def drain(name, f):
        got[name] = f.read()

    readers = [threading.Thread(target=drain, args=(n, f), daemon=True)
               for n, f in (("out", proc.stdout), ("err", proc.stderr))]
    for r in readers:
        r.start()
    proc.wait(timeout=timeout)
    for r in readers:
        r.join(timeout)
    assert not any(r.is_alive() for r in readers), "the controller's output never ended"
    return (getattr(proc, "seen_out", "") + got["out"], getattr(proc, "seen_err", "") + got["err"])


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):  # gone before, or while, it was read
        return False


def gone_within(pids, seconds):
    """Whether every process of `pids` ends within `seconds`: waited for through a pidfd each
    (readable once its process ends), or left a zombie for its parent to reap."""
    deadline = time.monotonic() + seconds
    for pid in pids:
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:
            continue  # gone already
        try:
            while alive(pid):
                left = deadline - time.monotonic()
                if left <= 0 or not select.select([fd], [], [], left)[0]:
                    return False
        finally:
            os.close(fd)
    return True


def test_ctrl_c_stops_the_job_cleanly():
    proc = start()
    pids = read_pids(proc)
    assert len(pids) == 2 and all(alive(p) for p in pids)
    wait_for_waiting(proc)
    proc.send_signal(signal.SIGINT)
    out, err = finish(proc, 60)
    # A KeyboardInterrupt in the main thread: the program unwinds (its finally blocks run), the
    # job stops on its way out, and Python ends by SIGINT as it does for any program.
    assert proc.returncode == -signal.SIGINT, err
    assert err.count("KeyboardInterrupt") == 1 and err.count("Traceback") == 1, err
    assert "finally ran" in out
    assert "buffered at the end" in out  # what print() had not written yet was not lost
    assert gone_within(pids, 10), f"workers {pids} outlived the controller"
    # The workers' print reached the controller's output, with the proc's prefix.
    assert "hello from a worker" in out + err
    assert "[procs0 0-1]" in out + err or "[procs0 0]" in out + err


def test_a_second_ctrl_c_kills_the_job_at_once():
    proc = start("stubborn")
    pids = read_pids(proc)
    wait_for_waiting(proc)
    proc.send_signal(signal.SIGINT)
    assert proc.stdout.readline().strip() in ("buffered at the end", "caught")
    line = proc.stdout.readline().strip()
    assert line in ("caught", "buffered at the end"), line
    proc.send_signal(signal.SIGINT)
    out, err = finish(proc, 60)
    assert proc.returncode == 128 + signal.SIGINT, err
    assert "killing the job's processes" in err
    assert gone_within(pids, 10), f"workers {pids} outlived the controller"


def test_sigkill_of_the_controller_leaves_no_worker():
    proc = start()
    pids = read_pids(proc)
    proc.kill()
    finish(proc, 30)
    assert gone_within(pids, 30), f"workers {pids} outlived a SIGKILLed controller"


def test_an_uncaught_actor_error_names_the_actor_and_shows_its_traceback():
    proc = start("raise")
    pids = read_pids(proc)
    out, err = finish(proc, 60)
    assert proc.returncode != 0
    assert "ActorError" in err and "uncaught in the controller" in err
    assert "raise ValueError(text)" in err  # the remote traceback
    assert "counters" in err  # the actor
    assert gone_within(pids, 30)


def test_a_constructor_that_raises_with_no_hook_stops_the_program_saying_what_to_do():
    proc = start("refuse")
    pids = read_pids(proc)
    out, err = finish(proc, 60)
    assert proc.returncode == 1, err
    assert "buffered at the end" in out  # what print() had not written yet was not lost
    assert "refusers" in err and "ValueError: refused at construction" in err
    assert "raise ValueError(why)" in err  # the constructor's traceback
    assert "__supervise__" in err and "baton.set_supervise" in err  # the hooks, in Python terms
    assert gone_within(pids, 30)
    # Under Monarch's runner, in Monarch's terms.
    proc = start("refuse", runner=("-m", "baton.monarch"))
    pids = read_pids(proc)
    out, err = finish(proc, 60)
    assert proc.returncode == 1, err
    assert "monarch.actor.unhandled_fault_hook" in err and "set_supervise" not in err, err
    assert gone_within(pids, 30)


def test_a_controller_that_cannot_start_leaves_no_job_directory(tmp_path):
    script = "import baton\nbaton.this_host().spawn_procs({'gpus': 1})\n"
    for var, said in (("BATON_CREDENTIALS", "/nonexistent"), ("BATON_TLS_CERT", "set all three")):
        env = {k: v for k, v in os.environ.items() if not k.startswith("BATON_")}
        env.update({"TMPDIR": str(tmp_path), var: "/nonexistent"})
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                              env=env, timeout=120)
        assert done.returncode != 0 and said in done.stderr, done.stderr
        assert list(tmp_path.iterdir()) == [], f"{var}: left {list(tmp_path.iterdir())}"
