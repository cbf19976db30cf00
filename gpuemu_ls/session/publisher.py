"""Diagnostics built off the event loop, a burst of requests at a time.

While 1,000 ops validate, a run ends every few tenths of a second: rereading the store and building every
op's diagnostics on the loop for each of them (and a thread per reread) kept hover, completion and code
actions waiting for seconds. Here one thread per server does that work: requests made meanwhile are merged
(a session asked for ten times is rebuilt once, after the last ask), and the loop only sends what it is handed.
"""

from __future__ import annotations

import threading
import time
import traceback
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from . import priority
from .workspace import WorkspaceSession

#: Seconds between two rebuilds after runs ended: while 1,000 ops validate a run ends every few hundredths of a
#: second, and a rebuild for each (rereading every op's latest verdict) kept a thread busy that the editor's
#: requests share the GIL with. The first rebuild after a quiet spell is immediate; asks that are not
#: rereads (a config edit's diagnostics) never wait.
REREAD_INTERVAL = 0.25


class Publisher:
    """Rebuilds a session's diagnostics on its own thread: ``build(session)`` after ``session.refresh()``
    where a reread was asked for; ``deliver(session, built, reread)`` is called with what ``build`` returned
    (it hands them to the event loop)."""

    def __init__(
        self, build: Callable[[WorkspaceSession], Any], deliver: Callable[[WorkspaceSession, Any, bool], None]
    ) -> None:
        self.build = build
        self.deliver = deliver
        #: session -> (whether the store must be reread first, whether an ask that is not a reread is among them,
        #: the futures of the requests merged into it)
        self.pending: dict[WorkspaceSession, tuple[bool, bool, list[Future[None]]]] = {}
        #: session -> when its last reread began (monotonic)
        self.reread_at: dict[WorkspaceSession, float] = {}
        self.cond = threading.Condition()
        self.closed = False
        self.thread = threading.Thread(target=self._loop, name="gpuemu-publish", daemon=True)
        self.thread.start()

    def request(self, session: WorkspaceSession, *, reread: bool = False) -> Future[None]:
        """Ask for the session's diagnostics to be rebuilt (from any thread); returns at once, with a future
        done once they were handed over (a caller on the loop that awaits it runs after they were sent)."""
        done: Future[None] = Future()
        with self.cond:
            was, urgent, waiting = self.pending.get(session, (False, False, []))
            self.pending[session] = (was or reread, urgent or not reread, [*waiting, done])
            self.cond.notify()
        return done

    def _loop(self) -> None:
        priority.background()
        while True:
            with self.cond:
                while not self.closed:
                    wait = self._wait()
                    if wait is not None and wait <= 0:
                        break
                    self.cond.wait(wait)
                if self.closed:
                    return
                batch, self.pending = self.pending, {}
            for session, (reread, _, waiting) in batch.items():
                try:
                    priority.give_way()  # a request or an edit's check first
                    if not session.closed:
                        if reread:
                            self.reread_at[session] = time.monotonic()
                            session.refresh()
                        self.deliver(session, self.build(session), reread)
                except Exception:  # a bug of ours must not end the thread every later publish needs
                    traceback.print_exc()
                for done in waiting:
                    done.set_result(None)

    def _wait(self) -> float | None:
        """Seconds until the pending work may start (None: there is none): at once for an ask that is not a
        reread, else :data:`REREAD_INTERVAL` after the session's last reread."""
        if not self.pending:
            return None
        now = time.monotonic()
        return min(
            0.0 if urgent else self.reread_at.get(session, -REREAD_INTERVAL) + REREAD_INTERVAL - now
            for session, (_, urgent, _) in self.pending.items()
        )

    def close(self) -> None:
        with self.cond:
            self.closed = True
            for *_, waiting in self.pending.values():
                for done in waiting:
                    done.set_result(None)
            self.pending = {}
            self.cond.notify()
