"""A Python controller driving C++ trainers: the worker program (cpp_trainers.cpp) exposes its
Trainer actor by name; this program spawns four in procs running that program, gives each a
shard of noisy points on y = 3x + 1 (numpy), trains them in rounds, averages their weights
here, and hands the C++ mesh to a Python actor that checks them too. Fails (exit 1) unless the
fit is close.

    PYTHONPATH=python:build/python python3 examples/python/cpp_trainers.py [build/bin/cpp_trainers]
"""

import argparse
import os
import sys

import numpy as np

import baton


class Auditor(baton.Actor):
    """A Python actor given the C++ mesh: asks every trainer for its weights."""

    @baton.endpoint
    async def spread(self, trainers):
        weights = (await trainers.weights.call()).values()
        return max(abs(w[0] - weights[0][0]) + abs(w[1] - weights[0][1]) for w in weights)


def main(args):
    here = os.path.dirname(os.path.abspath(__file__))
    built = os.path.join(here, "../../build/bin/cpp_trainers")
    program = args.program or built
    host = baton.this_host()
    procs = host.spawn_procs({"trainers": 4}, program=[program])
    trainers = procs.spawn("trainers", baton.cpp("Trainer"), 0.1, "linear")
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, 4000)
    y = 3 * x + 1 + rng.normal(0, 0.1, x.size)
    for r in range(4):
        trainers.slice(trainers=r).load.call_one(x[r::4], y[r::4]).get()
    print("cpp_trainers.py:", trainers.slice(trainers=0).about.call_one().get())
    for round_ in range(1, 6):
        losses = trainers.train.call(20).get().values()
        weights = np.mean(trainers.weights.call().get().values(), axis=0)
        trainers.set_weights.broadcast(weights.tolist())
        print(f"round {round_}: loss {np.mean(losses):.4f}  w {weights[0]:.3f}  b {weights[1]:.3f}")
    python_procs = host.spawn_procs({"auditors": 1})
    auditor = python_procs.spawn("auditor", Auditor)
    spread = auditor.spread.call_one(trainers).get()
    print(f"cpp_trainers.py: a Python actor read the C++ trainers' weights: spread {spread:.2g}")
    try:
        trainers.slice(trainers=0).load.call_one([1.0], []).get()
        return 1
    except baton.ActorError as e:
        print(f"cpp_trainers.py: a C++ exception arrives as an ActorError: {e.remote_message}")
    procs.stop().get()
    python_procs.stop().get()
    ok = abs(weights[0] - 3) < 0.05 and abs(weights[1] - 1) < 0.05 and spread == 0
    print(f"cpp_trainers.py: fitted y = {weights[0]:.3f} x + {weights[1]:.3f}")
    return 0 if ok else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("program", nargs="?", help="the C++ worker program (the built one)")
    sys.exit(main(parser.parse_args()))
