"""A controller of a job's hosts, run by test_hosts.py with BATON_CREDENTIALS set: attaches to
the agents at the addresses given, spawns Python actors on every host and prints what they say."""

import sys

import baton
from actors import Counter

if __name__ == "__main__":
    keep = sys.argv[1] == "--keep"  # leave the meshes to the program's end, as module globals
    hosts = baton.attach(sys.argv[2:] if keep else sys.argv[1:])
    procs = hosts.spawn_procs({"gpus": 2})
    print("shape", procs.shape, flush=True)
    counters = procs.spawn("counters", Counter, 1)
    got = counters.incr.call().get(timeout=60)
    print("values", got.values(), flush=True)
    print("points", [dict(p) for p in got.points()], flush=True)
    print("pids", sorted(set(counters.pid.call().get(timeout=60).values())), flush=True)
    if not keep:
        procs.stop().get(timeout=60)
    print("done", flush=True)
