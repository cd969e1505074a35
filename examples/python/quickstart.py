"""baton quickstart, in Python: one program drives worker processes on this host.

The controller spawns a mesh of procs ({gpus: 4}), spawns a Trainer in each, calls them all at
once, slices the mesh, sees a remote failure arrive as an ActorError, and stops. The Trainer
class is defined here, in the script: the workers get it from the controller.

    PYTHONPATH=python:build/python python3 examples/python/quickstart.py
"""

import argparse
import os
import sys

import baton


class Trainer(baton.Actor):
    def __init__(self, seed):
        self.loss = 1.0 + (seed + self.rank) % 7

    @baton.endpoint
    def train(self, step):
        if step < 0:
            raise ValueError(f"step must be >= 0, got {step}")
        self.loss *= 0.9
        return self.loss

    @baton.endpoint
    def where(self):
        device = os.environ.get("CUDA_VISIBLE_DEVICES", "")
        return f"{self.actor_id} (CUDA_VISIBLE_DEVICES={device})"


def expected(rank, steps):
    """What each rank's loss must be: it starts at 1 + (seed + rank) % 7, -10% a step."""
    return (1.0 + (42 + rank) % 7) * 0.9**steps


def main():
    procs = baton.this_host().spawn_procs({"gpus": 4})
    trainers = procs.spawn("trainers", Trainer, 42)

    for point, where in trainers.where.call().get():
        print(f"{dict(point)}: {where}")

    loss = trainers.train.call(0).get()
    for point, value in loss:
        print(f"step 0 {dict(point)} loss {value:.4f}")
        assert abs(value - expected(point.rank, 1)) < 1e-9, "wrong loss after step 0"

    trainers.slice(gpus=slice(0, 2)).train.broadcast(1)
    loss = trainers.train.call(2).get()
    print("after a step on gpus 0..1 only: losses", " ".join(f"{v:.4f}" for v in loss.values()))
    for rank, value in enumerate(loss.values()):
        assert abs(value - expected(rank, 3 if rank < 2 else 2)) < 1e-9, "wrong sliced step"

    try:
        trainers.slice(gpus=3).train.call_one(-1).get()
        return 1
    except baton.ActorError as e:
        print(f"ActorError from {e.actor}: {e.remote_type}: {e.remote_message}")

    procs.stop().get()
    print("stopped")
    return 0


if __name__ == "__main__":
    # --help says what it does; it takes no other arguments.
    argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    ).parse_args()
    sys.exit(main())
