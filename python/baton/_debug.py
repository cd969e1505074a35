"""breakpoint() in a Python actor: the actor pauses in a pdb whose input and output go through
the runtime to whoever attaches with `baton debug` (the admin API's /api/debug), not to the
worker's own terminal. The proc's other actors, and the job's, keep running; the paused actor
handles nothing else until it is continued. Outside actors (the controller program itself),
breakpoint() is Python's own."""

import itertools
import os
import pdb
import sys
import threading
import time
from typing import Any, Dict, List, Optional, Tuple

from . import _context

_lock = threading.Lock()
_ids = itertools.count(1)
_paused: Dict[int, "_Session"] = {}  # by id: the sessions waiting for a command
_by_thread: Dict[int, "_Session"] = {}  # the session each thread runs under, while it does


class _Session:
    """One actor's debugger, from its breakpoint() until it is continued or its endpoint
    returns."""

    def __init__(self, actor_id: str, mesh: str, rank: int) -> None:
        self.id = next(_ids)
        self.actor_id = actor_id
        self.mesh = mesh
        self.rank = rank
        self.cond = threading.Condition()
        self.commands: List[str] = []  # sent, not yet read
        self.output: List[str] = []  # written, not yet fetched
        self.prompts = 0  # how many times it waited for a command
        self.waiting = False
        self.ended = False
        self.where = ""
        self.since = time.monotonic()
        self.pdb = _Pdb(self)

    def readline(self) -> str:
        frame = self.pdb.curframe
        with self.cond:
            if frame is not None:
                code = frame.f_code
                self.where = f"{code.co_filename}:{frame.f_lineno} in {code.co_name}"
            self.prompts += 1
            self.waiting = True
            if self.ended:  # paused again (a breakpoint set in pdb): its time starts again
                self.since = time.monotonic()
            self.ended = False
            with _lock:
                _paused[self.id] = self
            self.cond.notify_all()
            with _Blocking():
                while not self.commands:
                    self.cond.wait()
            self.waiting = False
            with _lock:
                _paused.pop(self.id, None)
            return self.commands.pop(0) + "\n"

    def end(self) -> None:
        with self.cond:
            self.ended = True
            self.waiting = False
            with _lock:
                _paused.pop(self.id, None)
            self.cond.notify_all()

    def exchange(self, line: Optional[str], wait_s: float) -> Tuple[str, str]:
        """Sends `line` (if not None), then waits up to `wait_s` for the debugger to wait for
        its next command or end; what it wrote meanwhile, and "paused", "running" or "ended"."""
        with self.cond:
            target = self.prompts
            if line is not None:
                if not self.waiting:
                    return ("", "running")  # a command still runs: it is not read now
                self.commands.append(line)
                self.cond.notify_all()
                target += 1
            self.cond.wait_for(
                lambda: self.ended or (self.waiting and self.prompts >= target), wait_s
            )
            text = "".join(self.output)
            self.output.clear()
            if self.waiting and self.prompts >= target:
                return (text, "paused")
            return (text, "ended" if self.ended else "running")


class _Input:
    def __init__(self, session: _Session) -> None:
        self._session = session

    def readline(self) -> str:
        return self._session.readline()


class _Output:
    def __init__(self, session: _Session) -> None:
        self._session = session

    def write(self, text: str) -> int:
        with self._session.cond:
            self._session.output.append(text)
        return len(text)

    def flush(self) -> None:
        pass


class _Pdb(pdb.Pdb):
    """pdb over the session's input and output; it never stops in baton's own frames (stepping
    out of an endpoint runs on until the endpoint's caller has returned)."""

    def __init__(self, session: _Session) -> None:
        super().__init__(
            stdin=_Input(session),  # type: ignore[arg-type]
            stdout=_Output(session),  # type: ignore[arg-type]
            skip=["baton", "baton.*"],
            nosigint=True,
            readrc=False,
        )
        self._session = session

    def do_continue(self, arg: str) -> Any:
        done = super().do_continue(arg)
        self._session.end()
        return done

    do_c = do_cont = do_continue

    def do_quit(self, arg: str) -> Any:
        done = super().do_quit(arg)
        self._session.end()
        return done

    do_q = do_exit = do_quit


class _Blocking:
    """The proc's pool runs the proc's other actors on another thread while this one waits."""

    def __enter__(self) -> None:
        from . import _baton

        try:
            self._region: Any = _baton.BlockingRegion("breakpoint()")
        except Exception:  # an async endpoint's loop thread: nothing to hand over
            self._region = None

    def __exit__(self, *exc: Any) -> None:
        if self._region is not None:
            self._region.release()


def breakpointhook(*args: Any, **kwargs: Any) -> Any:
    """sys.breakpointhook in a worker: inside an actor, pauses it for `baton debug`."""
    actor = _context._current.get()
    if actor is None or os.environ.get("PYTHONBREAKPOINT") == "0":
        return sys.__breakpointhook__(*args, **kwargs)
    actor_id, mesh, rank = actor._baton_where[:3]
    with _lock:
        session = _by_thread.get(threading.get_ident())
        if session is None or session.actor_id != actor_id:  # else: again in the same endpoint
            session = _Session(actor_id, mesh, int(rank))
            _by_thread[threading.get_ident()] = session
    session.pdb.set_trace(sys._getframe(1))
    return None


def install() -> None:
    """Makes breakpoint() in this process's actors pause for `baton debug` (unless the program
    set a hook of its own)."""
    if sys.breakpointhook is sys.__breakpointhook__:
        sys.breakpointhook = breakpointhook


def endpoint_returned() -> None:
    """Called as an endpoint returns: a session of this thread ends there, and its tracing with
    it, so that the thread's next message (maybe another actor's) runs untraced."""
    if not _by_thread:
        return
    with _lock:
        session = _by_thread.pop(threading.get_ident(), None)
    if session is None:
        return
    sys.settrace(None)
    session.end()


def sessions() -> List[Tuple[int, str, str, int, str, float]]:
    """The paused sessions: (id, actor, mesh, rank, where, seconds paused)."""
    now = time.monotonic()
    with _lock:
        paused = list(_paused.values())
    return [(s.id, s.actor_id, s.mesh, s.rank, s.where, now - s.since) for s in paused]


def exchange(session_id: int, line: str, send: bool, wait_s: float) -> Tuple[str, str]:
    """One exchange with a session (see _Session.exchange); ("", "gone") for no such session."""
    with _lock:
        session = _paused.get(session_id)
        if session is None:
            session = next((s for s in _by_thread.values() if s.id == session_id), None)
    if session is None:
        return ("", "gone")
    return session.exchange(line if send else None, wait_s)


def quit_all() -> None:
    """Quits every paused session, as pdb's `q` does (its endpoint raises BdbQuit to its
    caller): what a proc does as it stops."""
    with _lock:
        paused = list(_paused.values())
    for session in paused:
        session.exchange("quit", 1.0)
