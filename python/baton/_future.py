"""Futures: results to come, that a thread blocks on (get) and asyncio awaits."""

import math
import numbers
import weakref
from typing import Any, Callable, Generic, Optional, TypeVar

from . import _baton
from . import _context
from ._errors import ActorError, TimeoutError, UsageError

T = TypeVar("T")


class BadTimeout(UsageError, ValueError):
    """A timeout that is no number of seconds of 0 or more (a ValueError too, as Monarch's)."""


def _seconds(timeout):
    """A timeout in seconds (None, or infinity: no limit), checked."""
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, numbers.Real):
        raise UsageError(f"timeout is a number of seconds, not {type(timeout).__name__}")
    seconds = float(timeout)
    if math.isnan(seconds) or seconds < 0:
        raise BadTimeout(f"timeout={timeout!r}: give a number of seconds of 0 or more (None "
                         "waits as long as it takes)")
    return None if math.isinf(seconds) else seconds


def _python_advice(e, instead="`await` the future instead"):
    """The runtime's refusal to block inside an actor (UsageError `e`: only an async endpoint's
    steps are refused, a plain endpoint may block), with the advice a Python actor needs; any
    other error as it is."""
    said = str(e)
    if ": co_await" not in said:
        return e
    return UsageError(
        said.partition(" would block")[0]
        + f" in an async endpoint would stop the process's event loop: {instead}"
    )


class Future(Generic[T]):
    """The result of a call to come. get(timeout=None) blocks (the GIL released) and raises
    the call's failure; `await future` waits without blocking the event loop (the runtime
    wakes the loop through a file descriptor it watches, no thread per call)."""

    def __init__(
        self, core: Any, convert: Callable[..., Any], endpoint: Optional[str] = None,
        target: Any = None,
    ) -> None:
        self._core = core
        self._convert = convert
        self._endpoint = endpoint  # a Python endpoint's name, for the errors it raises
        self._target = target  # the actor mesh called, if any

    def _check_not_waiting_on_itself(self):
        """An actor waiting for a call to itself would wait for ever (it handles one message at
        a time, and this one is in progress): UsageError at once, saying why."""
        if self._target is None:
            return
        actor = _context._current.get()
        if actor is None:
            return
        me = actor._baton_where[0]
        if me in self._target._core.members():
            raise UsageError(
                f"{me} waits for its own call of {self._endpoint}: an actor handles one "
                "message at a time, so that call cannot run before this endpoint returns. "
                "Call the method directly, or send the call without waiting (broadcast) and "
                "return"
            )

    def done(self) -> bool:
        return self._core.ready()

    def get(self, timeout: Optional[float] = None) -> T:
        if timeout is not None:
            timeout = _seconds(timeout)
        if not self._core.ready():
            self._check_not_waiting_on_itself()
        try:
            ready = self._core.wait(timeout)  # refused inside an actor unless already done
        except UsageError as e:
            raise _python_advice(e) from None
        if not ready:
            raise TimeoutError(f"no result within {timeout} s; the call may still complete")
        return self._value()

    def _value(self):
        """The result (the future is ready); an ActorError names the Python endpoint that
        raised, not the runtime's one that ran it."""
        try:
            return self._convert(self._core.value())
        except ActorError as e:
            if self._endpoint is None:
                raise
            raise e.in_endpoint(self._endpoint) from None

    result = get

    def __await__(self):
        return _awaitable(self).__await__()

    def as_asyncio(self) -> "Any":
        """This future as an asyncio one of the running event loop (await it, or pass it to
        asyncio.gather, wait_for, ...)."""
        import asyncio

        async def wait():
            return await self

        return asyncio.ensure_future(wait())


async def _awaitable(future):
    if not future.done():
        future._check_not_waiting_on_itself()
        import asyncio  # the caller's, already imported: no cost at start-up

        waiter = _LoopNotifier.of(asyncio.get_running_loop()).wait(future._core)
        await waiter
    return future._value()


class _LoopNotifier:
    """Per event loop: one eventfd the loop watches, and the asyncio futures waiting."""

    _by_loop: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()

    @classmethod
    def of(cls, loop):
        n = cls._by_loop.get(loop)
        if n is None:
            n = cls._by_loop[loop] = cls(loop)
        return n

    def __init__(self, loop):
        self._loop = loop
        self._core = _baton.Notifier()
        self._waiting = {}
        self._next = 0
        loop.add_reader(self._core.fd(), self._wake)

    def wait(self, core):
        token = self._next
        self._next += 1
        waiter = self._loop.create_future()
        self._waiting[token] = waiter
        self._core.watch(core, token)
        return waiter

    def _wake(self):
        for token in self._core.drain():
            waiter = self._waiting.pop(token, None)
            if waiter is not None and not waiter.done():
                waiter.set_result(None)


class Deferred(Future):
    """A Future whose value `produce(timeout)` computes in the thread that first asks for it
    (get) or in a thread of asyncio's (await): for results that Python code folds or waits
    for itself (a port's next value, an Accumulator's fold)."""

    _UNSET = object()

    def __init__(self, produce):
        import threading

        self._produce = produce
        self._lock = threading.Lock()
        self._result = Deferred._UNSET
        self._error = None

    def done(self):
        return self._result is not Deferred._UNSET or self._error is not None

    def get(self, timeout=None):
        timeout = _seconds(timeout)
        with self._lock:
            if not self.done():
                try:
                    self._result = self._produce(timeout)
                except TimeoutError:
                    raise  # nothing was taken: a later get() may still succeed
                except BaseException as e:  # noqa: B902: kept for every later get()
                    self._error = e
        if self._error is not None:
            raise self._error
        return self._result

    result = get

    def __await__(self):
        import asyncio

        return asyncio.get_running_loop().run_in_executor(None, self.get).__await__()


class StreamItem(tuple):
    """One reply of a stream: a (point, value) pair that is also a completed Future of the
    value (get(), result(), await), as Monarch's streams give futures."""

    __slots__ = ()

    def get(self, timeout=None):
        return self[1]

    result = get

    def done(self):
        return True

    def __await__(self):
        return self[1]
        yield  # a generator: awaiting it gives the value at once


class FailedStreamItem(StreamItem):
    """The reply of a stream's member that failed: its (point, error) pair, where reading the
    value (unpacking the pair, [1], get(), result(), await) raises the error, as Monarch's
    stream futures do; the stream goes on with the other members."""

    __slots__ = ()

    @property
    def error(self):
        return tuple.__getitem__(self, 1)

    def get(self, timeout=None):
        raise self.error

    result = get

    def __getitem__(self, index):
        if index in (1, -1):
            raise self.error
        return tuple.__getitem__(self, index)

    def __iter__(self):
        yield tuple.__getitem__(self, 0)
        raise self.error

    def __await__(self):
        raise self.error
        yield  # a generator: awaiting it raises
