"""RdmaBuffer from Python: one-sided reads and writes of memory that another process owns."""

from typing import Any

from . import _baton
from ._errors import UsageError
from ._future import Future


def _is_cuda(obj):
    return hasattr(obj, "data_ptr") and getattr(obj, "is_cuda", False)


def _host_view(obj, writable):
    if hasattr(obj, "numpy") and hasattr(obj, "data_ptr"):  # a CPU torch tensor: its memory
        obj = obj.detach().numpy()
    view = memoryview(obj)
    if writable and view.readonly:
        raise UsageError(
            f"RdmaBuffer needs writable memory (a bytearray, numpy array or tensor), "
            f"not {type(obj).__name__}"
        )
    if not view.c_contiguous:
        raise UsageError("RdmaBuffer needs contiguous memory")
    return view


def _from_wire(head, parts):
    b = RdmaBuffer.__new__(RdmaBuffer)
    b._core = _baton.RdmaBuffer.from_wire(head, parts)
    b._pin = None
    return b


class RdmaBuffer:
    """Memory of this process (a bytearray, numpy array, CPU torch tensor, or a CUDA/ROCm torch
    tensor by its device pointer), registered so that any process of the job that is given
    this handle (as an argument or result) reads and writes it without this process's help.
    The memory stays registered, and the object alive, until drop()."""

    def __init__(self, memory: Any) -> None:
        if _is_cuda(memory):
            self._pin = memory
            size = memory.numel() * memory.element_size()
            self._core = _baton.RdmaBuffer.register_pointer(memory.data_ptr(), size)
        else:
            self._pin = _host_view(memory, writable=True)
            self._core = _baton.RdmaBuffer.register_buffer(self._pin)

    @property
    def size(self) -> int:
        return self._core.size()

    def read_into(self, dst: Any, offset: int = 0) -> Future[None]:
        """Copies len(dst) bytes at `offset` of this buffer into `dst`; a Future."""
        if _is_cuda(dst):
            n = dst.numel() * dst.element_size()
            return Future(self._core.read_into_pointer(dst.data_ptr(), n, offset), lambda v: None)
        return Future(self._core.read_into(_host_view(dst, writable=True), offset), lambda v: None)

    def write_from(self, src: Any, offset: int = 0) -> Future[None]:
        """Copies `src` into this buffer at `offset`; a Future."""
        if _is_cuda(src):
            n = src.numel() * src.element_size()
            return Future(self._core.write_from_pointer(src.data_ptr(), n, offset), lambda v: None)
        view = _host_view(src, writable=False)
        return Future(self._core.write_from(view, offset), lambda v: None)

    def drop(self) -> Future[None]:
        """Unregisters it everywhere; later transfers fail."""
        return Future(self._core.drop(), lambda v: None)

    def __reduce__(self):
        return (_from_wire, tuple(self._core.to_wire()))
