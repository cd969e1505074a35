"""baton fault tolerance, in Python: a training loop that survives losing a worker.

Four trainers take steps together and checkpoint every five. At step 12 one worker process is
killed with SIGKILL, as a crashed host would be. The step in flight fails with a
SupervisionError naming the rank that died; the controller's supervise hook hears of the same
failure. The controller stops the broken mesh, spawns a fresh one from the last checkpoint and
carries on to the end; it fails (exit 1) unless every rank ends at the last step.

    PYTHONPATH=python:build/python python3 examples/python/fault_tolerance.py
"""

import argparse
import os
import signal
import sys
import threading
import time

import baton

STEPS = 20
KILL_AT = 12


class Trainer(baton.Actor):
    def __init__(self, from_step):
        self.step_done = from_step

    @baton.endpoint
    def step(self, s):
        self.step_done = s
        return 1.0 / (s + 1 + self.rank)

    @baton.endpoint
    def pid(self):
        return os.getpid()


def main():
    heard = threading.Event()

    def supervise(failure):
        print(f"fault_tolerance: supervision: {failure.splitlines()[0]}")
        heard.set()
        return True  # the loop below recovers

    baton.set_supervise(supervise)
    host = baton.this_host()
    procs = host.spawn_procs({"gpus": 4})
    trainers = procs.spawn("trainers", Trainer, 0)
    checkpoint = 0
    killed = False
    s = 0
    while s < STEPS:
        if s == KILL_AT and not killed:
            victim = trainers.slice(gpus=2).pid.call_one().get()
            os.kill(victim, signal.SIGKILL)
            killed = True
        try:
            trainers.step.call(s).get(timeout=60)
        except baton.SupervisionError as e:
            t0 = time.monotonic()
            print(f"fault_tolerance: step {s} failed: {str(e).splitlines()[0]}")
            procs.stop().get()
            procs = host.spawn_procs({"gpus": 4})
            trainers = procs.spawn("trainers", Trainer, checkpoint)
            print(
                f"fault_tolerance: respawned 4 trainers from the checkpoint of step {checkpoint} "
                f"in {1000 * (time.monotonic() - t0):.0f} ms"
            )
            s = checkpoint
            continue
        if s % 5 == 4:
            checkpoint = s + 1
        s += 1
    done = trainers.step.call(STEPS).get().values()
    procs.stop().get()
    ok = killed and heard.is_set() and len(done) == 4
    print(f"fault_tolerance: finished {STEPS} steps{' after a recovery' if killed else ''}")
    return 0 if ok else 1


if __name__ == "__main__":
    # --help says what it does; it takes no other arguments.
    argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    ).parse_args()
    sys.exit(main())
