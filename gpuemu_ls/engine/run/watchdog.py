"""The worker's hang watchdog: faulthandler's stack dump, armed before each phase of a case.

Arming ``faulthandler.dump_traceback_later`` joins the previous watchdog thread and starts a new one, and
cancelling it joins it: a thread handshake that costs tens of microseconds on a quiet machine and
milliseconds on a loaded one, where the other thread waits for a core. Re-armed for every phase and
cancelled after every case (and around every forked script call), that was several handshakes a case.
Here an arming that is still fresh (made less than :data:`SLACK` of its delay ago) is kept: its dump
fires at least ``(1 - SLACK) * seconds`` after the phase began and never later than ``seconds`` after it,
so it still lands just before the supervisor's timeout for that phase. It is cancelled only where it
must be: before a fork (the child would inherit a watchdog thread it does not have) and before the
worker waits for work (an idle worker must not dump its stack).
"""

from __future__ import annotations

import faulthandler
import time

#: The share of its delay an arming may be old and still stand for a new one.
SLACK = 0.05


class Watchdog:
    """This process's one faulthandler watchdog and when it was armed (faulthandler's is process-wide)."""

    def __init__(self) -> None:
        self.armed_at: float | None = None
        self.seconds: float | None = None

    def arm(self, seconds: float) -> None:
        """Dump the stacks ``seconds`` from now, or keep an arming of ``seconds`` that is that fresh."""
        now = time.monotonic()
        if self.armed_at is not None and self.seconds == seconds and now - self.armed_at <= SLACK * seconds:
            return
        faulthandler.dump_traceback_later(seconds, exit=False)
        self.armed_at, self.seconds = now, seconds

    def disarm(self) -> None:
        """Cancel the dump, whoever armed it (with no watchdog thread running, cancelling waits for none)."""
        faulthandler.cancel_dump_traceback_later()
        self.armed_at = None


#: The process's watchdog: the worker's phases arm it, a forked script call and an idle worker disarm it.
WATCHDOG = Watchdog()

__all__ = ["SLACK", "WATCHDOG", "Watchdog"]
