"""A controller the process tests run and then interrupt or kill: it starts two workers (on this
host, or with `slurm PORT` on a node of a Slurm job), prints their pids and a line from each,
says "ready", and waits for its signal."""

import os
import sys
import threading

import baton
from actors import Counter, Refuses

if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "slurm":
        job = baton.SlurmJob(nodes=1, partition="debug", time="10:00",
                             agent=os.environ["BATON_HOST_PROGRAM"], agent_port=int(sys.argv[2]))
        procs = job.hosts().spawn_procs({"gpus": 2})
        print("job", job.id, flush=True)
    else:
        procs = baton.this_host().spawn_procs({"gpus": 2})
    counters = procs.spawn("counters", Counter, 0)
    pids = counters.pid.call().get(timeout=30).values()
    counters.say.call("hello from a worker").get(timeout=30)
    print("pids", *pids, flush=True)
    print("ready", flush=True)
    # Not flushed (standard output is a pipe): the runtime flushes it as it ends the program.
    print("buffered at the end")
    mode = sys.argv[1] if len(sys.argv) > 1 else ""
    if mode == "refuse":
        procs.spawn("refusers", Refuses, "refused at construction")  # no hook: the program stops
    if mode == "raise":
        counters.slice(gpus=1).fail.call_one("uncaught in the controller").get(timeout=30)
    # "waiting" is said inside each try: a Ctrl-C right after it unwinds through that try.
    if mode == "stubborn":
        try:
            sys.stderr.write("waiting\n")
            threading.Event().wait()
        except KeyboardInterrupt:
            print("caught", flush=True)  # and goes on waiting: a second Ctrl-C kills at once
        threading.Event().wait()
    try:
        sys.stderr.write("waiting\n")
        threading.Event().wait()  # until the test's signal
    finally:
        print("finally ran", flush=True)  # Ctrl-C is a KeyboardInterrupt: the program unwinds
