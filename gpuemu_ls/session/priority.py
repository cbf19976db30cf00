"""The editor's work first: background threads step aside while a request or an edit's check runs.

The server is one interpreter: while 1,000 ops validate, the job threads (planning, results, stores) and the
publisher take the GIL as often as the thread answering the editor does, and Python has no thread
priorities: a config edit's check of 2 ms of CPU took 15-105 ms (benchmark 15). So what the editor waits for
runs inside :func:`interactive`, and background loops call :func:`give_way` at their safe points (a job
after each case, the publisher before each rebuild): there they wait, at most :data:`MAX_WAIT` a time, until
no interactive work is left. A background thread is never stopped mid-step, so nothing it holds is held
longer than one step. Those threads also run :data:`BACKGROUND_NICE` steps below the server's own on Linux
(:func:`background`), so that the CPU, when two cores are shared with the op processes, goes first to the
thread the editor waits on.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

#: Seconds a background thread waits at one safe point at most (a stream of requests must not starve it).
MAX_WAIT = 0.05

_lock = threading.Lock()
_active = 0
_clear = threading.Event()
_clear.set()


@contextmanager
def interactive() -> Iterator[None]:
    """Work the editor waits for: background threads wait at their next safe point until it ends."""
    global _active
    with _lock:
        _active += 1
        _clear.clear()
    try:
        yield
    finally:
        with _lock:
            _active -= 1
            if _active == 0:
                _clear.set()


def give_way() -> None:
    """A background thread's safe point: wait while interactive work runs (at most :data:`MAX_WAIT`)."""
    if not _clear.is_set():
        _clear.wait(MAX_WAIT)


#: How many nice steps below the server's main thread its background threads run (Linux: a thread's own).
BACKGROUND_NICE = 5


def background() -> None:
    """Run the calling thread :data:`BACKGROUND_NICE` steps below the process's main thread (Linux only, where a
    thread has its own nice value; elsewhere it would lower the whole process, so nothing is done)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        base = os.getpriority(os.PRIO_PROCESS, os.getpid())
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), min(19, base + BACKGROUND_NICE))
    except OSError:
        pass
