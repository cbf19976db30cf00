"""Diagnostics built off the event loop, a burst of requests at a time.

While 1,000 ops validate, a run ends every few tenths of a second: rereading the store and building every
op's diagnostics on the loop for each of them (and a thread per reread) kept hover, completion and code
actions waiting for seconds. Here one thread per server does that work: requests made meanwhile are merged
(a session asked for ten times is rebuilt once, after the last ask), and the loop only sends what it is handed.
"""

from __future__ import annotations

import threading
import traceback
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from .workspace import WorkspaceSession


class Publisher:
    """Rebuilds a session's diagnostics on its own thread: ``build(session)`` after ``session.refresh()``
    where a reread was asked for; ``deliver(session, built, reread)`` is called with what ``build`` returned
    (it hands them to the event loop)."""

    def __init__(
        self, build: Callable[[WorkspaceSession], Any], deliver: Callable[[WorkspaceSession, Any, bool], None]
    ) -> None:
        self.build = build
        self.deliver = deliver
        #: session -> (whether the store must be reread first, the futures of the requests merged into it)
        self.pending: dict[WorkspaceSession, tuple[bool, list[Future[None]]]] = {}
        self.cond = threading.Condition()
        self.closed = False
        self.thread = threading.Thread(target=self._loop, name="gpuemu-publish", daemon=True)
        self.thread.start()

    def request(self, session: WorkspaceSession, *, reread: bool = False) -> Future[None]:
        """Ask for the session's diagnostics to be rebuilt (from any thread); returns at once, with a future
        done once they were handed over (a caller on the loop that awaits it runs after they were sent)."""
        done: Future[None] = Future()
        with self.cond:
            was, waiting = self.pending.get(session, (False, []))
            self.pending[session] = (was or reread, [*waiting, done])
            self.cond.notify()
        return done

    def _loop(self) -> None:
        while True:
            with self.cond:
                while not self.pending and not self.closed:
                    self.cond.wait()
                if self.closed:
                    return
                batch, self.pending = self.pending, {}
            for session, (reread, waiting) in batch.items():
                try:
                    if not session.closed:
                        if reread:
                            session.refresh()
                        self.deliver(session, self.build(session), reread)
                except Exception:  # a bug of ours must not end the thread every later publish needs
                    traceback.print_exc()
                for done in waiting:
                    done.set_result(None)

    def close(self) -> None:
        with self.cond:
            self.closed = True
            for _, waiting in self.pending.values():
                for done in waiting:
                    done.set_result(None)
            self.pending = {}
            self.cond.notify()
