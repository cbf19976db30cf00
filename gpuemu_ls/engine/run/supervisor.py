"""Worker processes seen from outside: start, feed, time, kill and replace them.

The supervisor is what makes a segfaulting, aborting, hanging or memory-hungry op a *result*
instead of a dead CLI or a frozen editor. Each worker runs in its own session (process group) and is a
child subreaper, so whatever its op starts stays below it even after ``setsid``; a case that overruns
its phase's timeout gets the whole tree killed (:func:`contain.kill_tree`). A worker that dies mid-case is
reported against the phase it announced (op or reference), with the tail of its stderr, and a fresh
worker carries on with the next case.
"""

from __future__ import annotations

import os
import select
import signal
import socket
import subprocess
import tempfile
import threading
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import IO, Any

from ..cases.plan import CaseSpec
from ..config.model import OpConfig, ValidationConfig
from ..oracle.outcome import CaseResult
from . import contain
from .zygote import ForkedProcess, get_zygote, start_python

STDERR_TAIL = 3000


class Cancelled(Exception):
    """The caller asked to stop (a newer save, a cancelled request)."""


class WorkerLost(Exception):
    """The worker died or overran a phase; carries what is known about it."""

    def __init__(self, kind: str, phase: str, message: str, stderr: str = "") -> None:
        super().__init__(message)
        self.kind = kind  # crash | timeout
        self.phase = phase  # setup | op | reference | compare
        self.message = message
        self.stderr = stderr


class SetupFailed(Exception):
    def __init__(self, info: dict[str, Any]) -> None:
        super().__init__(info.get("message", "setup failed"))
        self.info = info


def _signal_name(code: int) -> str:
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


class Worker:
    """One worker process and the socket to it."""

    def __init__(self, *, memory_mb: int | None = None, cancel: threading.Event | None = None) -> None:
        parent, child = socket.socketpair()
        self.log: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115 - lives as long as the worker; closed in kill()
        self.proc: Any = None
        zygote = get_zygote()
        if zygote is not None:
            try:
                self.proc = ForkedProcess(zygote.spawn(child.fileno(), self.log.fileno(), memory_mb), zygote)
            except (RuntimeError, OSError):
                self.proc = None
        if self.proc is None:  # no fork server here: a fresh interpreter
            self.proc = start_python("gpuemu_ls.engine.run.worker", child.fileno(), str(memory_mb or 0), log=self.log)
        child.close()
        self.conn = Connection(parent.detach())
        self.poller = select.poll()  # one for the worker's life (multiprocessing's wait() builds one per call)
        self.poller.register(self.conn.fileno(), select.POLLIN | select.POLLHUP | select.POLLERR)
        self.inflight = 0  # cases sent and not answered yet
        self.phase = "op"  # what the oldest unanswered case is doing
        self.cancel = cancel
        self.op_name: str | None = None
        self.started = time.monotonic()

    # --- life cycle ------------------------------------------------------------------------
    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        """Kill the worker, its process group and every process below it (``setsid`` ones included)."""
        if self.proc.poll() is None:
            contain.kill_tree(self.proc.pid)
        for kill in (os.killpg, os.kill):  # the group, and the process itself if it had no session yet
            try:
                kill(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        self._close_handles()

    def close(self) -> None:
        try:
            self.conn.send(("exit",))
            self.proc.wait(timeout=2)
        except (OSError, ValueError, subprocess.TimeoutExpired):
            pass
        self.kill()

    def _close_handles(self) -> None:
        for h in (self.conn, self.log):
            try:
                h.close()
            except OSError:
                pass

    def stderr_tail(self, n: int = STDERR_TAIL) -> str:
        try:
            self.log.flush()
            size = self.log.seek(0, os.SEEK_END)
            self.log.seek(max(0, size - n))
            return self.log.read().decode("utf-8", errors="replace")
        except (OSError, ValueError):
            return ""

    # --- messages --------------------------------------------------------------------------
    def _recv(self, timeout: float, phase: list[str]) -> Any:
        """Next non-phase message; phase messages restart the clock. Raises WorkerLost or Cancelled."""
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0 and not self._answer_waiting():
                time.sleep(0.05)  # the worker's own watchdog dumped its stack just before: let the write land
                tail = self.stderr_tail()  # before kill(), which closes the log
                self.kill()
                raise WorkerLost("timeout", phase[0], f"no answer within {timeout:g} s", tail)
            try:
                ready = bool(self.poller.poll(int(max(0.0, min(remaining, 0.05)) * 1000) + 1))
            except (OSError, ValueError):
                ready = True
            if self.cancel is not None and self.cancel.is_set():
                self.kill()
                raise Cancelled()
            if not ready:
                continue
            try:
                msg = self.conn.recv()
            except (EOFError, OSError):
                self._died(phase[0])
            if msg[0] == "phase":
                phase[0] = msg[2]
                deadline = time.monotonic() + timeout
                continue
            return msg

    def _answer_waiting(self) -> bool:
        """Whether the worker's next message is already here: then this thread, not the op, was late (a busy
        process did not run it), and the time the answer waited to be read is no part of the op's."""
        try:
            return bool(self.poller.poll(0))
        except (OSError, ValueError):
            return False

    def _drain_phases(self) -> None:
        """Read what a dead worker left in the socket, so its last announced phase is known."""
        try:
            while self.poller.poll(0):
                msg = self.conn.recv()
                if msg[0] == "phase":
                    self.phase = msg[2]
        except (EOFError, OSError, ValueError):
            pass

    def _died(self, phase: str) -> None:
        try:
            code = self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            code = None
        tail = self.stderr_tail()
        self.kill()
        if code is None:
            how = "stopped answering"
        elif code < 0:
            how = f"was killed by {_signal_name(code)}"
            if code == -signal.SIGKILL:
                how += " (out of memory, or killed from outside)"
            elif code == -signal.SIGXCPU:
                how += " (CPU time limit)"
        else:
            how = f"exited with status {code}"
        raise WorkerLost("crash", phase, f"the process {how} during the {phase}", tail)

    def setup(
        self,
        root: Path,
        op: OpConfig,
        validation: ValidationConfig,
        timeout: float,
        calibration: bool = False,
        threads: int | None = None,
    ) -> dict[str, Any]:
        """Load ``op`` in the worker; ``threads``: intra-op threads its framework may use (None: its default)."""
        self.conn.send(("setup", str(root), op, validation, str(root), calibration, threads))
        msg = self._recv(timeout, ["setup"])
        if msg[0] == "setup_error":
            raise SetupFailed(msg[1])
        self.op_name = op.name
        return msg[1]

    def submit(self, spec: CaseSpec, snapshot: dict[str, Any] | None) -> None:
        """Queue a case; the worker runs queued cases back to back (see :meth:`result`)."""
        try:
            self.conn.send(("case", spec.to_dict(), snapshot))
        except OSError:  # it died on a case already queued: report that one, as a read would
            self._drain_phases()
            self._died(self.phase)
        self.inflight += 1

    def result(self, timeout: float) -> CaseResult:
        """The result of the oldest queued case; its phases each get ``timeout`` (WorkerLost names the phase)."""
        phase = [self.phase]
        msg = self._recv(timeout, phase)
        self.phase = phase[0]
        if msg[0] != "result":
            raise WorkerLost("crash", self.phase, f"unexpected worker message {msg[0]!r}: {msg[1:]}")
        self.inflight -= 1
        self.phase = "op"  # the next queued case starts with its op
        result: CaseResult = msg[1]
        return result

    def run_case(self, spec: CaseSpec, snapshot: dict[str, Any] | None, timeout: float) -> CaseResult:
        self.submit(spec, snapshot)
        return self.result(timeout)
