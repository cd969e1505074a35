"""DDP through Monarch's SPMDActor, on CPUs: run it unchanged with
`python -m baton.monarch examples/monarch/spmd_ddp.py`. Each proc of a mesh gets torchrun's
environment (RANK, WORLD_SIZE, MASTER_ADDR, ...) from an SPMDActor, which then runs the plain
DDP script ddp/train.py as __main__ in that proc. Exits 1 unless every rank learned the digits
(test accuracy of 90% or more) and the ranks ended with the same weights."""

import os
import sys
import tempfile

from monarch.actor import this_host
from monarch.spmd import SPMDActor

PROCS = 2
HERE = os.path.dirname(os.path.abspath(__file__))
TRAIN_SCRIPT = os.path.join(HERE, "ddp", "train.py")

if __name__ == "__main__":
    procs = this_host().spawn_procs(per_host={"gpus": PROCS})
    spmd_actors = procs.spawn("_SPMDActor", SPMDActor)
    # The master: the host of the first proc, and a port free there.
    first = dict.fromkeys(procs._labels, 0)
    master_addr, master_port = spmd_actors.slice(**first).get_host_port.call_one(None).get()
    with tempfile.TemporaryDirectory() as out:
        spmd_actors.main.call(master_addr, master_port, [TRAIN_SCRIPT, out, "20"]).get()
        results = [open(os.path.join(out, f"rank-{r}.txt")).read().split() for r in range(PROCS)]
    accuracies = [float(a) for a, _ in results]
    checksums = {c for _, c in results}
    print(f"DDP over {PROCS} procs: test accuracy {accuracies}, weights agree: "
          f"{len(checksums) == 1}")
    procs.stop().get()
    sys.exit(0 if min(accuracies) >= 0.9 and len(checksums) == 1 else 1)
