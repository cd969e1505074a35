"""The worker's side of Python actors, called by the runtime (C++) with the GIL held: makes the
actor, runs its endpoints (async ones on the process's event loop thread), and turns what they
raise into the error text the caller's ActorError is made from."""

import threading
import types

from . import _baton
from . import _context
from . import _debug
from ._errors import MeshFailure, _user_frames, encode_exception
from ._point import Point, point_in_view
from ._pickle import dumps, dumps_result, loads

_loop = None
_loop_lock = threading.Lock()
_debug.install()  # breakpoint() in an actor pauses it for `baton debug`

VALUE, PENDING, ERROR, FATAL = 0, 1, 2, 3


def construct(data, buffers, where):
    """An instance of the pickled class; `where` (its id, mesh, rank and point) is set on it
    before its __init__ runs, so that self.rank and self.point work there too."""
    cls, args, kwargs = loads(data, buffers)
    instance = cls.__new__(cls)
    actor_id, mesh, rank, point, address = where
    instance._baton_where = (actor_id, mesh, rank, Point(*point), address)
    _context.enter(instance)
    instance.__init__(*args, **kwargs)
    return instance


def _endpoint(instance, method):
    if method.startswith("*"):  # a plain method called as an endpoint (as_endpoint)
        fn = getattr(type(instance), method[1:], None)
        if method[1:2] != "_" and callable(fn):
            return getattr(instance, method[1:])
    fn = getattr(type(instance), method, None)
    if fn is None or not getattr(fn, "_baton_endpoint", False):
        raise AttributeError(
            f"{type(instance).__qualname__} has no endpoint {method!r} "
            "(mark its methods with @endpoint)"
        )
    return getattr(instance, method)


def invoke(instance, method, data, buffers):
    """(VALUE, (data, buffers)), (PENDING, coroutine), (ERROR, text) or (FATAL, text): a
    BaseException that is not an Exception (SystemExit) fails the actor, as in Monarch."""
    try:
        _context.enter(instance)
        call = loads(data, buffers)
        args, kwargs = call[0], call[1]
        point = None
        if len(call) > 2:  # sent to a view of the mesh: the member's point there
            point = point_in_view(instance._baton_where[2], call[2])
            _context.set_message_point(point)
        try:
            result = _endpoint(instance, method)(*args, **kwargs)
        finally:
            _debug.endpoint_returned()
        if isinstance(result, types.CoroutineType):
            return (PENDING, result if point is None else _at_point(result, point))
        return (VALUE, dumps_result(method, result))
    except Exception as e:  # what an endpoint raises goes to its caller
        return (ERROR, encode_exception(e))
    except BaseException as e:  # noqa: B902: and SystemExit fails the actor too
        return (FATAL, _fatal_text(e))


def _at_point(coroutine, point):
    """`coroutine`, run with `point` as its message's point (in its task's own context)."""

    async def at_point():
        _context.set_message_point(point)
        return await coroutine

    wrapped = at_point()
    wrapped.__name__ = coroutine.__name__  # what its errors and results are named by
    wrapped.__qualname__ = coroutine.__qualname__
    return wrapped


def _fatal_text(error):
    """How the failure of an actor whose endpoint raised `error` (a SystemExit, say) reads."""
    import traceback

    frames = _user_frames(error.__traceback__)
    text = "".join(traceback.format_exception(type(error), error, frames))
    return f"{type(error).__name__}: {error}\n{text}"


def _event_loop():
    import asyncio  # only where an async endpoint runs: it costs a worker's start-up

    global _loop
    with _loop_lock:
        if _loop is None:
            _loop = asyncio.new_event_loop()
            thread = threading.Thread(target=_loop.run_forever, name="baton-asyncio", daemon=True)
            thread.start()
            _context._loop_thread = thread.ident
        return _loop


class _AsActor:
    """Steps `coroutine` as its actor: every step (send or throw) runs with the loop's thread
    acting for the actor (what it sends is from the actor, what it spawns is the actor's)."""

    def __init__(self, coroutine, acting):
        self._coroutine = coroutine
        self._acting = acting

    def __await__(self):
        return self

    def __iter__(self):
        return self

    def __next__(self):
        return self.send(None)

    def _step(self, fn, *args):
        if not self._acting.enter():
            self._coroutine.close()
            raise RuntimeError("the actor stopped while its endpoint ran")
        try:
            return fn(*args)
        finally:
            self._acting.exit()

    def send(self, value):
        return self._step(self._coroutine.send, value)

    def throw(self, *exc):
        return self._step(self._coroutine.throw, *exc)

    def close(self):
        self._coroutine.close()


class _Fatal(Exception):
    """A BaseException that is not an Exception (SystemExit, KeyboardInterrupt) raised by an
    async endpoint, carried out of its task as an Exception: raised as it is, it would stop the
    process's event loop."""

    def __init__(self, error):
        super().__init__(str(error))
        self.error = error


async def _as_actor(coroutine, acting, instance):
    _context.enter(instance)  # in this task's own context
    try:
        return await _AsActor(coroutine, acting)
    except Exception:
        raise
    except BaseException as e:  # noqa: B902: SystemExit fails the actor, not the loop
        raise _Fatal(e) from None


def schedule(coroutine, acting, instance, done):
    """Runs `coroutine` on this process's event loop, acting as its actor; then
    done(VALUE, (data, buffers)), done(ERROR, text) or done(FATAL, text), on the loop's
    thread."""
    name = getattr(coroutine, "__name__", "the endpoint")
    coroutine = _as_actor(coroutine, acting, instance)

    def finished(future):
        try:
            reply = (VALUE, dumps_result(name, future.result()))
        except _Fatal as e:  # SystemExit fails the actor
            reply = (FATAL, _fatal_text(e.error))
        except Exception as e:
            reply = (ERROR, encode_exception(e))
        done(*reply)

    loop = _event_loop()
    import asyncio

    asyncio.run_coroutine_threadsafe(coroutine, loop).add_done_callback(finished)


def start_task(coroutine, instance, port):
    """Runs a concurrent endpoint's coroutine as a task of its own on this process's event loop,
    acting as its actor, and replies through `port` (a ReplyPort) once it ends; the actor goes
    on with its next message meanwhile."""
    import asyncio

    acting = _baton.acting_as_current()
    task = asyncio.run_coroutine_threadsafe(
        _as_actor(coroutine, acting, instance), _event_loop()
    )

    def finished(future):
        try:
            port.send(future.result())
        except _Fatal as e:  # a concurrent endpoint's SystemExit reaches its caller
            port.exception(e.error)
        except Exception as e:  # what the task raised goes to its caller
            port.exception(e)

    task.add_done_callback(finished)


def fold(fn, a_data, a_buffers, b_data, b_buffers):
    """A reducer's step on the cast tree: fn(a, b), pickled for the next node."""
    f = loads(fn, [])
    return dumps(f(loads(a_data, a_buffers), loads(b_data, b_buffers)))


def cleanup(instance, reason):
    """The actor stops (reason None) or failed (reason: why): its __cleanup__(exc), plain or
    async (run on the event loop, waited for here)."""
    hook = getattr(instance, "__cleanup__", None)
    if hook is None:
        return
    result = hook(None if reason is None else Exception(reason))
    if isinstance(result, types.CoroutineType):
        import asyncio

        _context.enter(instance)
        asyncio.run_coroutine_threadsafe(result, _event_loop()).result(timeout=60)


def supervise(instance, failure, mesh, rank, actor):
    """The actor's __supervise__(failure), plain or async (run on the event loop acting as the
    actor, waited for here): whether it handled the failure."""
    hook = getattr(instance, "__supervise__", None)
    if hook is None:
        return False
    handled = hook(MeshFailure(failure, mesh, rank, actor))
    if isinstance(handled, types.CoroutineType):
        import asyncio

        coroutine = _as_actor(handled, _baton.acting_as_current(), instance)
        try:
            handled = asyncio.run_coroutine_threadsafe(coroutine, _event_loop()).result()
        except _Fatal as e:
            raise e.error from None
    return bool(handled)
