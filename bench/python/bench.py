"""Python benchmarks (make bench): each figure beside its baseline, measured in this run.

py_proc_rtt_p50               a Python call to a Python actor in another proc (us)
monarch_api_rtt_p50           the same call written against Monarch's API (baton.monarch) (us)
proc_rtt_p50                  the same round trip from C++ (`baton-bench rtt`, this run)
torch_rpc_rtt_p50             PyTorch RPC's round trip from Python, same host (us)
py_broadcast_gather_n16_p50   a call to 16 actors in 16 procs, gathered (ms)
py_spawn_procs16_p50          16 worker processes spawned and linked (ms)

    PYTHONPATH=python:build/python python3 bench/python/bench.py \
        [--baton-bench build/bin/baton-bench]
"""

import argparse
import os
import socket
import statistics
import subprocess
import sys
import time

import baton
from baton.monarch import actor as monarch_actor


class Echo(baton.Actor):
    @baton.endpoint
    def echo(self, x):
        return x


class MonarchEcho(monarch_actor.Actor):
    @monarch_actor.endpoint
    def echo(self, x: int) -> int:
        return x


def figure(name, value, unit):
    print(f"{name} {value:.3f} {unit}", flush=True)


def p50(samples):
    return statistics.median(samples)


def timed(fn, n, warmup=50):
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def cpp_proc_rtt(baton_bench):
    out = subprocess.run([baton_bench, "rtt"], capture_output=True, text=True, timeout=600).stdout
    for line in out.splitlines():
        if line.startswith("proc_rtt_p50 "):
            return float(line.split()[1])
    raise RuntimeError("baton-bench rtt printed no proc_rtt_p50")


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _torch_rpc_worker(rank, port):
    import torch.distributed.rpc as rpc

    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    options = rpc.TensorPipeRpcBackendOptions(num_worker_threads=4, _transports=["uv"])
    rpc.init_rpc(f"w{rank}", rank=rank, world_size=2, rpc_backend_options=options)
    rpc.shutdown()


class TorchRpc:
    """PyTorch RPC (TensorPipe over TCP): rank 0 here calling rank 1 in another process."""

    def __enter__(self):
        import multiprocessing as mp

        import torch.distributed.rpc as rpc

        port = _free_port()
        self._peer = mp.get_context("spawn").Process(target=_torch_rpc_worker, args=(1, port))
        self._peer.start()
        os.environ["MASTER_ADDR"] = "127.0.0.1"
        os.environ["MASTER_PORT"] = str(port)
        options = rpc.TensorPipeRpcBackendOptions(num_worker_threads=4, _transports=["uv"])
        rpc.init_rpc("w0", rank=0, world_size=2, rpc_backend_options=options)
        self.call = lambda: rpc.rpc_sync("w1", max, args=(1, 2))
        return self

    def __exit__(self, *exc):
        import torch.distributed.rpc as rpc

        rpc.shutdown()
        self._peer.join(timeout=60)


def main():
    ap = argparse.ArgumentParser()
    here = os.path.dirname(os.path.abspath(__file__))
    built = os.path.join(here, "..", "..", "build", "bin", "baton-bench")
    ap.add_argument("--baton-bench", default=built)
    ap.add_argument("--n", type=int, default=5000)
    ap.add_argument("--rounds", type=int, default=50)
    args = ap.parse_args()

    # The round trips side by side: baton's, through Monarch's API, and PyTorch RPC's in
    # alternating short rounds (a noisy machine slows all alike), and the C++ figure as the median
    # of three runs of its own.
    procs = baton.this_host().spawn_procs({"procs": 1})
    echo = procs.spawn("echo", Echo)
    monarch_procs = monarch_actor.this_host().spawn_procs(per_host={"procs": 1})
    monarch_echo = monarch_procs.spawn("monarch_echo", MonarchEcho)
    ours, monarch, theirs = [], [], []
    with TorchRpc() as torch_rpc:
        for _ in range(args.rounds):
            per_round = args.n // args.rounds
            ours += timed(lambda: echo.echo.call_one(1).get(), per_round, warmup=10)
            monarch += timed(lambda: monarch_echo.echo.call_one(1).get(), per_round, warmup=10)
            theirs += timed(torch_rpc.call, per_round, warmup=10)
    procs.stop().get()
    monarch_procs.stop().get()
    py = p50(ours) * 1e6
    figure("py_proc_rtt_p50", py, "us")
    monarch_rtt = p50(monarch) * 1e6
    figure("monarch_api_rtt_p50", monarch_rtt, "us")
    figure("monarch_api_rtt_ratio_py", monarch_rtt / py, "x")
    cpp = p50([cpp_proc_rtt(args.baton_bench) for _ in range(3)])
    figure("proc_rtt_p50", cpp, "us")
    figure("py_proc_rtt_ratio_cpp", py / cpp, "x")
    torch_rtt = p50(theirs) * 1e6
    figure("torch_rpc_rtt_p50", torch_rtt, "us")
    figure("py_proc_rtt_speedup_torch_rpc", torch_rtt / py, "x")
    figure("monarch_api_rtt_speedup_torch_rpc", torch_rtt / monarch_rtt, "x")

    procs = baton.this_host().spawn_procs({"procs": 16})
    echoes = procs.spawn("echoes", Echo)
    figure(
        "py_broadcast_gather_n16_p50",
        p50(timed(lambda: echoes.echo.call(1).get(), 300, warmup=20)) * 1e3,
        "ms",
    )
    procs.stop().get()

    def spawn16():
        baton.this_host().spawn_procs({"procs": 16}).stop().get()

    figure("py_spawn_procs16_p50", p50(timed(spawn16, 10, warmup=1)) * 1e3, "ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
