"""Ports: a Port is a handle anyone it is given to can send values to (pass it to actors as an
argument); its receiver, in the process that opened it, takes them in order per sender."""

from typing import Any, Generic, Iterator, Optional, Tuple, TypeVar

from . import _baton
from ._errors import TimeoutError as BatonTimeout
from ._pickle import dumps, loads

T = TypeVar("T")


def _port_from_wire(head, parts):
    return Port(_baton.Port.from_wire(head, parts))


class _Raised:
    """What Port.exception sends: the receiver's recv() raises `error` in its turn."""

    def __init__(self, error: BaseException) -> None:
        self.error = error


def _value(data: Any, buffers: Any) -> Any:
    value = loads(data, buffers)
    if isinstance(value, _Raised):
        raise value.error
    return value


class Port(Generic[T]):
    def __init__(self, core: Any) -> None:
        self._core = core

    def send(self, value: T) -> None:
        """Sends `value` (any picklable value) to the port's receiver; does not wait."""
        self._core.send(dumps(value))

    def exception(self, error: BaseException) -> None:
        """Sends `error` in place of a value: the receiver's recv() raises it, in its turn
        among the values sent (a failure to report where a value was due)."""
        if not isinstance(error, BaseException):
            raise TypeError(f"Port.exception takes an exception, not {type(error).__name__}")
        self._core.send(dumps(_Raised(error)))

    def __reduce__(self):
        return (_port_from_wire, tuple(self._core.to_wire()))


class PortReceiver(Generic[T]):
    def __init__(self, core: Any) -> None:
        self._core = core

    def recv(self, timeout: Optional[float] = None) -> T:
        """The next value; waits up to `timeout` seconds (None: for ever), then raises
        baton.TimeoutError. A value sent with Port.exception is raised here instead."""
        try:
            data, buffers = self._core.recv(timeout)
        except BatonTimeout:
            raise
        return _value(data, buffers)

    def try_recv(self, default: Any = None) -> Any:
        got = self._core.try_recv()
        return default if got is None else _value(*got)

    def __iter__(self) -> Iterator[T]:
        while True:
            yield self.recv()


def open_port() -> Tuple[Port, PortReceiver]:
    """(port, receiver): give the port to actors; take what they send from the receiver."""
    import os

    from . import _runtime

    if not os.environ.get("BATON_PROC"):
        _runtime.runtime()
    port, receiver = _baton.open_port()
    return Port(port), PortReceiver(receiver)
