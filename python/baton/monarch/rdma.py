"""monarch.rdma over baton's RdmaBuffer: one-sided reads and writes of memory another process
owns (UCX shared memory and CMA on a host, CUDA/ROCm IPC for device memory, messages
elsewhere)."""

import warnings

from .. import _rdma
from .._errors import UsageError
from .._future import Deferred


class RDMAReadTransferWarning(Warning):
    pass


class RDMAWriteTransferWarning(Warning):
    pass


class RDMATcpFallbackWarning(Warning):
    pass


def _bytes(obj):
    """A tensor or array as the bytes it holds (Monarch's buffers are byte views)."""
    if hasattr(obj, "view") and hasattr(obj, "element_size") and hasattr(obj, "dtype"):
        import torch

        if obj.dtype != torch.uint8:
            return obj.contiguous().view(torch.uint8).flatten()
    return obj


# Monarch's default bound on a transfer, in seconds.
_TIMEOUT = 60


def _prefix(memory, n):
    """The first `n` bytes of `memory` (a byte view), without a copy."""
    if len(memory) <= n:
        return memory
    if hasattr(memory, "element_size"):  # a torch tensor: a view of it
        return memory[:n]
    return memoryview(memory).cast("B")[:n]


class RDMABuffer:
    """Memory of this process (a tensor, bytearray, memoryview or numpy array) registered so that
    any process given this handle reads and writes it. `timeout` bounds a transfer in seconds
    (60 by default, as in Monarch); `owner` is the actor (or client) that registered it."""

    def __init__(self, data):
        from .. import _context

        self._buffer = _rdma.RdmaBuffer(_bytes(data))
        self._owner = _context.current_actor_name()

    def size(self):
        """Its length in bytes."""
        return self._buffer.size

    @property
    def owner(self):
        return self._owner

    def read_into(self, dst, offset=0, timeout=_TIMEOUT):
        """Copies this buffer's bytes from `offset` into `dst` (a Future): as many as `dst`
        holds, up to the buffer's end (a larger `dst` keeps its bytes past them)."""
        dst = _bytes(dst)
        return _bounded(self._buffer.read_into(_prefix(dst, self.size() - offset), offset), timeout)

    def write_from(self, src, offset=0, timeout=_TIMEOUT):
        """Copies `src` into this buffer at `offset` (a Future)."""
        return _bounded(self._buffer.write_from(_bytes(src), offset), timeout)

    def drop(self):
        """Unregisters the memory everywhere; later transfers fail."""
        return self._buffer.drop()

    def __reduce__(self):
        return (_from_buffer, (self._buffer, self._owner))


def _from_buffer(buffer, owner=""):
    b = RDMABuffer.__new__(RDMABuffer)
    b._buffer = buffer
    b._owner = owner
    return b


def _bounded(future, timeout):
    """The transfer's Future, failing with TimeoutError if it is not done within `timeout`."""
    return Deferred(lambda wait: future.get(timeout if wait is None else min(wait, timeout)))


class RDMAAction:
    """A batch of transfers submitted together: add steps (read_remote(dst, buffer) and
    write_remote(buffer, src), as Monarch spells them, or read_into(buffer, dst) and
    write_from(buffer, src)), then submit() is a Future of them all."""

    def __init__(self):
        self._steps = []

    def read_into(self, src, dst, offset=0):
        if not isinstance(src, RDMABuffer):
            raise UsageError("RDMAAction.read_into reads from an RDMABuffer")
        self._steps.append(("read", src, dst, offset))
        return self

    def write_from(self, dst, src, offset=0):
        if not isinstance(dst, RDMABuffer):
            raise UsageError("RDMAAction.write_from writes into an RDMABuffer")
        self._steps.append(("write", dst, src, offset))
        return self

    def read_remote(self, dst, src):
        """Queues a read of the RDMABuffer `src` into local memory `dst`."""
        return self.read_into(src, dst)

    def write_remote(self, dst, src):
        """Queues a write of local memory `src` into the RDMABuffer `dst`."""
        return self.write_from(dst, src)

    def submit(self, timeout=_TIMEOUT):
        futures = [
            b.read_into(m, off, timeout) if kind == "read" else b.write_from(m, off, timeout)
            for kind, b, m, off in self._steps
        ]

        def wait(t):
            for f in futures:
                f.get(timeout if t is None else min(t, timeout))

        return Deferred(wait)


def is_rdma_available():
    """Whether one-sided transfers work here: baton always has them (through messages at
    worst)."""
    return True


def is_ibverbs_available():
    """Whether this machine has an InfiniBand/RoCE device that UCX can use."""
    import os

    return os.path.isdir("/sys/class/infiniband") and bool(os.listdir("/sys/class/infiniband"))


def get_rdma_backend():
    """The transport baton's RdmaBuffer uses between processes of a host."""
    return "ucx"


__all__ = [
    "get_rdma_backend", "is_ibverbs_available", "is_rdma_available", "RDMABuffer", "RDMAAction",
    "RDMAReadTransferWarning", "RDMATcpFallbackWarning", "RDMAWriteTransferWarning",
]
del warnings
