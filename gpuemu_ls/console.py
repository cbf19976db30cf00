"""Progress on a terminal (one line redrawn in place), plain lines everywhere else (CI logs, pipes)."""

from __future__ import annotations

import sys
import threading
import time
from typing import TextIO


class Progress:
    """Thread-safe progress for a run over several ops."""

    def __init__(self, total_cases: int, stream: TextIO | None = None, enabled: bool = True) -> None:
        self.stream = stream or sys.stderr
        self.tty = enabled and self.stream.isatty()
        self.enabled = enabled
        self.total = total_cases
        self.done = 0
        self.failed = 0
        self.current: dict[str, tuple[int, int]] = {}
        self.lock = threading.Lock()
        self.last = 0.0

    def case(self, op: str, status: str, i: int, n: int) -> None:
        with self.lock:
            self.done += 1
            self.failed += status != "passed"
            self.current[op] = (i, n)
            if self.tty and (time.monotonic() - self.last > 0.05 or self.done == self.total):
                self.last = time.monotonic()
                width = 28
                filled = int(width * self.done / max(self.total, 1))
                ops = " ".join(f"{k} {a}/{b}" for k, (a, b) in list(self.current.items())[-2:])
                self.stream.write(
                    f"\r[{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total} cases, "
                    f"{self.failed} not passed  {ops}"[:160].ljust(100)
                )
                self.stream.flush()

    def replan(self, planned: int, running: int) -> None:
        """An op whose plan was ``planned`` cases runs ``running`` (its cost measured first, then cut)."""
        with self.lock:
            self.total += running - planned

    def op_done(self, line: str) -> None:
        with self.lock:
            self.current = {}
            if self.tty:
                self.stream.write("\r" + " " * 120 + "\r")
            if self.enabled:
                self.stream.write(line + "\n")
                self.stream.flush()

    def close(self) -> None:
        if self.tty:
            with self.lock:
                self.stream.write("\r" + " " * 120 + "\r")
                self.stream.flush()
