"""Ports: a Port is a handle anyone it is given to can send values to (pass it to actors as an
argument); its receiver, in the process that opened it, takes them in order per sender."""

import types

import _baton

from ._errors import TimeoutError as BatonTimeout
from ._pickle import dumps, loads


def _port_from_wire(head, parts):
    return Port(_baton.Port.from_wire(head, parts))


class Port:
    __class_getitem__ = classmethod(types.GenericAlias)  # Port[int] in type hints

    def __init__(self, core):
        self._core = core

    def send(self, value):
        """Sends `value` (any picklable value) to the port's receiver; does not wait."""
        self._core.send(dumps(value))

    def __reduce__(self):
        return (_port_from_wire, tuple(self._core.to_wire()))


class PortReceiver:
    __class_getitem__ = classmethod(types.GenericAlias)

    def __init__(self, core):
        self._core = core

    def recv(self, timeout=None):
        """The next value; waits up to `timeout` seconds (None: for ever), then raises
        baton.TimeoutError."""
        try:
            data, buffers = self._core.recv(timeout)
        except BatonTimeout:
            raise
        return loads(data, buffers)

    def try_recv(self, default=None):
        got = self._core.try_recv()
        return default if got is None else loads(*got)

    def __iter__(self):
        while True:
            yield self.recv()


def open_port():
    """(port, receiver): give the port to actors; take what they send from the receiver."""
    import os

    from . import _runtime

    if not os.environ.get("BATON_PROC"):
        _runtime.runtime()
    port, receiver = _baton.open_port()
    return Port(port), PortReceiver(receiver)
