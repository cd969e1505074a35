"""Values on the wire: pickled (cloudpickle, protocol 5), with every buffer that can travel out
of band (bytearray, memoryview, numpy arrays, CPU torch tensors, and bytes given as an argument
or returned) kept out of the pickle and sent as a part of its own, never copied into it."""

import collections
import io
import os
import pickle
import sys

import cloudpickle

# Smaller bytes objects are cheaper in the pickle than as a part of their own.
_BYTES_OUT_OF_BAND = 64 * 1024


def _rebuild_tensor(array):
    import torch

    # Received bytes are read-only (other receivers in this process may share them), which
    # torch does not support: such a tensor gets its own copy.
    return torch.from_numpy(array if array.flags.writeable else array.copy())


def _reduce_tensor(t):
    # A CPU tensor goes as its numpy view, whose bytes travel out of band (torch's own pickling
    # copies them into the pickle).
    if t.device.type != "cpu" or t.requires_grad or t.is_sparse:
        return t.__reduce_ex__(5)
    return (_rebuild_tensor, (t.detach().contiguous().numpy(),))


def _reduce_memoryview(m):
    return (memoryview, (pickle.PickleBuffer(m),))


class _Bytes:
    """A big bytes or bytearray argument or result, so that its payload travels out of band
    (the pickler copies those two types into the pickle whatever its dispatch table says)."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value

    def __reduce_ex__(self, protocol):
        return (type(self.value), (pickle.PickleBuffer(self.value),))


def wrap_bytes(value):
    if type(value) in (bytes, bytearray) and len(value) >= _BYTES_OUT_OF_BAND:
        return _Bytes(value)
    return value


_tables: dict = {}


def _dispatch():
    """Our reducers over cloudpickle's: made once, and once more when torch is imported."""
    torch = sys.modules.get("torch")
    table = _tables.get(torch is not None)
    if table is None:
        ours = {memoryview: _reduce_memoryview}
        if torch is not None:
            ours[torch.Tensor] = _reduce_tensor
        table = _tables[torch is not None] = collections.ChainMap(
            ours, cloudpickle.CloudPickler.dispatch_table
        )
    return table


class _Pickler(cloudpickle.CloudPickler):
    # Read by the pickler when it is made: ours first, then cloudpickle's.
    @property
    def dispatch_table(self):
        return _dispatch()


# Values pickle's own pickler writes exactly as cloudpickle would, with no buffer to take out.
_PLAIN = frozenset({int, float, str, bool, type(None)})


def dumps(obj):
    """(pickle bytes, [memoryview, ...]) for `obj`."""
    if type(obj) in _PLAIN:
        return pickle.dumps(obj, protocol=5), []
    buffers = []

    def take(pb):
        try:
            buffers.append(pb.raw())
        except BufferError:  # not contiguous: it goes in the pickle
            return True
        return False

    f = io.BytesIO()
    _Pickler(f, protocol=5, buffer_callback=take).dump(obj)
    return f.getvalue(), buffers


def dumps_call(args, kwargs, view=None):
    """A call's arguments, and the view of the mesh it was sent to where that is not the mesh
    as spawned (see _point.message_point): (args, kwargs) or (args, kwargs, view)."""
    if not kwargs and all(type(a) in _PLAIN for a in args):  # most calls: no Pickler to make
        call = (args, {}) if view is None else (args, {}, view)
        return pickle.dumps(call, protocol=5), []
    try:
        wrapped = (
            tuple(wrap_bytes(a) for a in args),
            {k: wrap_bytes(v) for k, v in kwargs.items()},
        )
        return dumps(wrapped if view is None else (*wrapped, view))
    except (pickle.PicklingError, TypeError, AttributeError) as e:
        raise TypeError(f"the call's arguments cannot be sent (pickled): {e}") from None


def dumps_result(endpoint, value):
    """dumps(value), the result of `endpoint`; one that cannot be pickled is a TypeError that
    says so (the endpoint itself did not raise)."""
    try:
        return dumps(wrap_bytes(value))
    except (pickle.PicklingError, TypeError, AttributeError) as e:
        raise TypeError(
            f"{endpoint} returned a {type(value).__name__}, which cannot be sent to its caller "
            f"(pickled): {e}"
        ) from None


# BATON_READ_ONLY_BUFFERS=1 (set before the runtime starts, so that workers inherit it): arrays
# and tensors arrive as read-only views of the received bytes, with no copy.
_READ_ONLY = os.environ.get("BATON_READ_ONLY_BUFFERS") == "1"


def loads(data, buffers):
    """The value of a pickle. Its big buffers arrive as private, writable copies (a received
    array may be changed in place), or as read-only views with BATON_READ_ONLY_BUFFERS=1."""
    if buffers and not _READ_ONLY:
        buffers = [bytearray(b) for b in buffers]
    return pickle.loads(data, buffers=buffers)
