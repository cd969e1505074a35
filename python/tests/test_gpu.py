"""GPU memory from Python: collectives on CUDA/ROCm tensors through NCCL/RCCL, and RdmaBuffer
over device memory between processes. Skipped, saying why, where torch sees no GPU."""

import pytest

import baton
from actors import Rank

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("torch sees no GPU here", allow_module_level=True)


class DeviceRank(Rank):
    """A member of a collective group whose arrays live on the GPU its proc was given."""

    @baton.endpoint
    async def every_collective(self, n):
        r, size = self.comm.rank, self.comm.size
        dev = torch.device("cuda", 0)  # each proc sees its own GPU as device 0
        a = torch.arange(n, dtype=torch.float32, device=dev) + r
        await self.comm.allreduce(a, op="sum")
        m = torch.full((n,), float(r), dtype=torch.float64, device=dev)
        await self.comm.allreduce(m, op="max")
        b = torch.full((n,), r + 100, dtype=torch.int64, device=dev)
        await self.comm.broadcast(b, root=size - 1)
        g = torch.zeros(n * size, dtype=torch.int32, device=dev)
        await self.comm.allgather(torch.full((n,), r, dtype=torch.int32, device=dev), g)
        s = torch.zeros(n, dtype=torch.bfloat16, device=dev)
        ones = torch.ones(n * size, dtype=torch.bfloat16, device=dev)
        await self.comm.reduce_scatter(ones, s, op="sum")
        await self.comm.barrier()
        return (
            size,
            a.cpu().tolist(),
            m.cpu().tolist(),
            b.cpu().tolist(),
            g.cpu().tolist(),
            s.float().cpu().tolist(),
        )


class DeviceOwner(baton.Actor):
    """Owns a tensor on its GPU, registered as an RdmaBuffer."""

    def __init__(self, n):
        self.t = torch.arange(n, dtype=torch.int32, device="cuda")
        self.buf = baton.RdmaBuffer(self.t)

    @baton.endpoint
    def buffer(self):
        return self.buf

    @baton.endpoint
    def checksum(self):
        return int(self.t.sum().item())


class DeviceReader(baton.Actor):
    @baton.endpoint
    async def read_and_write(self, buf, n):
        on_device = torch.zeros(n, dtype=torch.int32, device="cuda")
        await buf.read_into(on_device)
        on_host = torch.zeros(n, dtype=torch.int32)
        await buf.read_into(on_host)
        await buf.write_from(torch.full((n,), 3, dtype=torch.int32, device="cuda"))
        return int(on_device.sum().item()), int(on_host.sum().item())


def test_every_collective_on_gpu_tensors_matches_a_direct_computation():
    n_gpus = min(torch.cuda.device_count(), 4)  # NCCL takes one rank per GPU
    procs = baton.this_host().spawn_procs({"gpus": n_gpus})
    ranks = procs.spawn("device_ranks", DeviceRank)
    group = baton.collective.make_group(ranks)
    assert ranks.join.call(group).get(timeout=120).values() == list(range(n_gpus))
    n = 1 << 16
    for size, a, m, b, g, s in ranks.every_collective.call(n).get(timeout=120).values():
        assert size == n_gpus
        assert a == [n_gpus * i + sum(range(n_gpus)) for i in range(n)]
        assert m == [float(n_gpus - 1)] * n
        assert b == [n_gpus - 1 + 100] * n
        assert g == [r for r in range(n_gpus) for _ in range(n)]
        assert s == [float(n_gpus)] * n
    procs.stop().get(timeout=60)


def test_an_rdma_buffer_over_gpu_memory_is_read_and_written_by_another_process():
    n = 1 << 20
    procs = baton.this_host().spawn_procs({"procs": 2})  # both on the same GPU
    owner = procs.slice(procs=0).spawn("owner", DeviceOwner, n)
    reader = procs.slice(procs=1).spawn("reader", DeviceReader)
    buf = owner.buffer.call_one().get(timeout=60)
    assert buf.size == 4 * n
    expected = n * (n - 1) // 2
    assert reader.read_and_write.call_one(buf, n).get(timeout=60) == (expected, expected)
    assert owner.checksum.call_one().get(timeout=60) == 3 * n
    procs.stop().get(timeout=60)
