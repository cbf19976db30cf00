"""One protocol-script call in a fork of the worker: real file descriptors and a fresh interpreter state.

A script runs unchanged only if it sees what ``python script.py < request > response`` gives it:
``sys.stdin.fileno()`` is 0 and ``open(0)`` reads the request, ``sys.stdout.buffer``,
``sys.stderr.buffer`` and ``reconfigure()`` exist, and nothing is left over from the previous case (a
counter in a helper module, a patched library). So each call forks the worker, which has imported
numpy and the script's libraries but never the script or its workspace modules. In the child, fd 0
reads the request from an in-memory file, fd 1 writes into another, fd 2 stays the worker's log (a
crash or hang dump lands where the supervisor looks for it), and the script runs as ``__main__``. The
child reports how it ended in a third in-memory file. A child that dies without a report
(``os._exit``, a signal) takes the worker down the same way, so the supervisor reports it exactly as it
would a worker running the script itself.
"""

from __future__ import annotations

import ast
import atexit
import builtins
import faulthandler
import importlib
import importlib.util
import io
import os
import pickle
import select
import signal
import sys
import tempfile
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import contain
from .watchdog import WATCHDOG


def available() -> bool:
    """Whether calls can be forked here (POSIX)."""
    return hasattr(os, "fork") and hasattr(os, "waitstatus_to_exitcode")


def _anon_file(name: str) -> int:
    """An in-memory file (memfd on Linux, an unlinked temporary file elsewhere), open read-write."""
    if hasattr(os, "memfd_create"):
        try:
            return os.memfd_create(name, os.MFD_CLOEXEC)
        except OSError:
            pass
    fd, path = tempfile.mkstemp(prefix=f"gpuemu-{name}-")
    os.unlink(path)
    return fd


def _read_all(fd: int) -> bytes:
    size = os.fstat(fd).st_size
    chunks, at = [], 0
    while at < size:
        chunk = os.pread(fd, min(size - at, 1 << 30), at)
        if not chunk:
            break
        chunks.append(chunk)
        at += len(chunk)
    return b"".join(chunks)


def _write_all(fd: int, parts: list[bytes]) -> None:
    """Replace the file's content with ``parts``, one after the other (never joined into one more copy).

    Written over the old content, then cut to length: truncating first would free the in-memory file's
    pages and write each page anew (0.4 ms for a float64 [64,1024] request).
    """
    at = 0
    for part in parts:
        view, done = memoryview(part), 0
        while done < len(view):
            done += os.pwrite(fd, view[done:], at + done)
        at += done
    os.ftruncate(fd, at)
    os.lseek(fd, 0, os.SEEK_SET)


def _ready(fd: int) -> bool:
    """Whether ``fd`` can be read without blocking (data or end of file)."""
    poller = select.poll()  # not select(): a worker may hold fds past FD_SETSIZE
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(0))


def _offset(fd: int) -> int | None:
    try:
        return os.lseek(fd, 0, os.SEEK_CUR)
    except OSError:
        return None


@dataclass
class Ended:
    """How a script call ended: its exit status, or the error it raised, and what it wrote."""

    status: Any = 0
    error: dict[str, Any] | None = None
    stdout: str = ""
    stderr: str = field(default="", repr=False)


def preload(code: types.CodeType, local_dirs: list[Path]) -> None:
    """Import, here in the worker, the libraries the script imports (not its workspace modules).

    Each forked call then finds them loaded, as a warm script would: a case costs the script's work,
    not its imports. Failures are left for the script's own run to report.
    """
    names: list[str] = []
    try:
        tree = ast.parse(_source(code))
    except (SyntaxError, ValueError):
        return
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module)
            names += [f"{node.module}.{a.name}" for a in node.names if a.name != "*"]
    for name in dict.fromkeys(names):
        top = name.partition(".")[0]
        if any((d / f"{top}.py").exists() or (d / top).is_dir() for d in local_dirs):
            continue  # the workspace's own: imported fresh by each call
        if name in sys.modules:
            continue
        try:
            if "." in name and importlib.util.find_spec(name) is None:
                continue
            importlib.import_module(name)
        except BaseException:  # the script's own run reports it
            continue


def _source(code: types.CodeType) -> str:
    try:
        return Path(code.co_filename).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return ""


def _stream(fd: int, mode: str, **options: Any) -> io.TextIOWrapper:
    """A text stream on ``fd`` like the one ``python`` makes for its standard streams (UTF-8)."""
    return io.TextIOWrapper(open(fd, mode, closefd=False), encoding="utf-8", **options)


@dataclass
class _Child:
    """A forked child set up as ``python path``, waiting for one byte on ``go`` before it runs."""

    pid: int
    go: int  # write end: a byte starts the script, end of file sends the child away
    done: int  # read end: a byte once the child's report is written
    code: types.CodeType
    path: Path


class ScriptFork:
    """Runs a compiled script once per call in a forked child (see the module docstring).

    A child reports before it exits, so its exit (~2 ms of unmapping a float64 [64,1024] script's memory) is
    off the case's path; it is reaped at the next call. Where the worker has a core to spare (``prefork``),
    the next call's child is also forked and set up while the current one runs (a spare): the fork (~1 ms
    of page tables in this process) and the set-up (~1.5 ms, and its first page faults) are then off the
    path too. The script itself still starts only when its call does, on that call's request, with what
    the worker had imported (the spare is forked from the same place in the same call of the same runner:
    nothing a case leaves in this process reaches it).
    """

    def __init__(self) -> None:
        self.stdin = _anon_file("gpuemu-stdin")
        self.stdout = _anon_file("gpuemu-stdout")
        self.report = _anon_file("gpuemu-report")
        self.watchdog: float | None = None  # seconds before a hung script's stack goes to the log
        self.rearm = True  # re-arm this process's dump after a call (False: it runs no user code to watch)
        self.pending: int | None = None  # the last call's child, done but perhaps still exiting
        self.spare: _Child | None = None  # the next call's child, set up and waiting
        self.prefork = False  # fork the spare (the worker's choice: only where it has a core to spare)

    def close(self) -> None:
        """Send the spare away, reap the last child and free the in-memory files."""
        self._drop_spare()
        self._reap()
        for fd in (self.stdin, self.stdout, self.report):
            _close(fd)

    def run(
        self,
        code: types.CodeType,
        path: Path,
        request: list[bytes],
        explain: Callable[[BaseException], dict[str, Any]],
        tail: int,
    ) -> Ended:
        """Run ``code`` as ``python path`` with ``request`` (its bytes, in pieces) on stdin; ``explain`` describes
        what it raises."""
        self._reap()
        _write_all(self.stdin, request)
        os.lseek(self.stdout, 0, os.SEEK_SET)  # the child cuts it to what it wrote (its pages are kept)
        os.ftruncate(self.report, 0)
        os.lseek(self.report, 0, os.SEEK_SET)
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (AttributeError, OSError, ValueError):
                pass
        err_start = _offset(2)
        WATCHDOG.disarm()  # its watchdog thread would not exist in the child
        before = set(contain.descendants(os.getpid()))
        child = self._take_spare(code, path)
        if child is None or not _send(child.go, b"1"):  # no spare, or it died before its call (killed)
            if child is not None:
                _end_spare(child)
            child = self._spawn(code, path, explain)
            _send(child.go, b"1")
        _close(child.go)
        spare: _Child | None = None
        try:
            if self.prefork:
                spare = self._spawn(code, path, explain, child.done)  # sets up while this call's child runs
            status = self._wait(child.pid, child.done)
        finally:
            _close(child.done)
        self.spare = spare
        # what the script started ends with its call, setsid or double-forked (this worker is their subreaper):
        # a leftover that holds the result store's lock would stall the run's writes. The child itself may
        # still be exiting after its report (it is reaped at the next call); the spare waits for that call.
        left = set(contain.descendants(os.getpid())) - before - {child.pid} - ({spare.pid} if spare else set())
        if left:
            contain.kill_pids(left)
            contain.reap_children(0.2)
        if self.watchdog and self.rearm:
            WATCHDOG.arm(self.watchdog)
        raw = _read_all(self.report)
        if not raw:
            if status is None:  # a report that says it is done but is empty: cannot happen, but never guess
                status = self._reap()
            _die_like(status if status is not None else 1 << 8)
        report: dict[str, Any] = pickle.loads(raw)
        err_end = _offset(2)
        stderr = ""
        if err_start is not None and err_end is not None and err_end > err_start:
            n = min(err_end - err_start, tail * 4)
            stderr = os.pread(2, n, err_end - n).decode("utf-8", errors="replace")[-tail:]
        return Ended(
            report.get("status", 0),
            report.get("error"),
            _read_all(self.stdout).decode("utf-8", errors="replace"),
            stderr,
        )

    def _spawn(
        self,
        code: types.CodeType,
        path: Path,
        explain: Callable[[BaseException], dict[str, Any]],
        *others: int,
    ) -> _Child:
        """Fork a child that sets itself up as ``python path`` and waits for its go; ``others``: this side's
        pipe ends of other children, which the new one closes (it holds nothing of another child's)."""
        go_r, go_w = os.pipe()
        done_r, done_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            for fd in (go_w, done_r, *others):
                _close(fd)
            self._child(code, path, explain, go_r, done_w)
        _close(go_r)
        _close(done_w)
        return _Child(pid, go_w, done_r, code, path)

    def _take_spare(self, code: types.CodeType, path: Path) -> _Child | None:
        """The spare, when it was set up for this script and is still waiting."""
        spare = self.spare
        self.spare = None
        if spare is None:
            return None
        if spare.code is code and spare.path == path and not _ready(spare.done):
            try:
                if os.waitpid(spare.pid, os.WNOHANG) == (0, 0):
                    return spare
            except ChildProcessError:
                pass
        _end_spare(spare)
        return None

    def _drop_spare(self) -> None:
        spare, self.spare = self.spare, None
        if spare is not None:
            _end_spare(spare)

    def _wait(self, pid: int, done: int) -> int | None:
        """Wait until the child has reported (None) or ended without a report (its wait status).

        The child's exit (unmapping its memory: ~2 ms for a [64,1024] float64 script) happens after its
        report, so it is not waited for; the child is reaped at the next call. Its report is final by then.
        Where pidfds are missing (not Linux), the child's exit is waited for, as before.
        """
        try:
            pidfd = os.pidfd_open(pid)
        except (AttributeError, OSError):
            return os.waitpid(pid, 0)[1]
        try:
            poller = select.poll()
            poller.register(done, select.POLLIN)
            poller.register(pidfd, select.POLLIN)
            while True:
                try:
                    events = dict(poller.poll())
                except InterruptedError:
                    continue
                # the child ended (pidfd) with nothing on the pipe: a descendant may still hold it open
                if done not in events and not _ready(done):
                    return os.waitpid(pid, 0)[1]
                if os.read(done, 1):  # a byte: reported
                    self.pending = pid
                    return None
                return os.waitpid(pid, 0)[1]  # end of file: the child (and all that held the pipe) ended
        finally:
            os.close(pidfd)

    def _reap(self) -> int | None:
        """Reap the previous call's child, which reported before it exited; its wait status."""
        pid, self.pending = self.pending, None
        if pid is None:
            return None
        try:
            return os.waitpid(pid, 0)[1]
        except ChildProcessError:  # reaped by a sweep of this worker's children
            return None

    def _child(
        self,
        code: types.CodeType,
        path: Path,
        explain: Callable[[BaseException], dict[str, Any]],
        go: int,
        done: int,
    ) -> None:
        """In the fork: become ``python path`` on real fds, wait for the go, run, report, never return."""
        report: dict[str, Any] = {"status": 0}
        try:
            contain.die_with_parent()
            for sig in (signal.SIGTERM, signal.SIGCHLD):
                signal.signal(sig, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.default_int_handler)
            os.dup2(self.stdin, 0)
            os.dup2(self.stdout, 1)
            sys.stdin = sys.__stdin__ = _stream(0, "rb")
            sys.stdout = sys.__stdout__ = _stream(1, "wb")
            sys.stderr = sys.__stderr__ = _stream(2, "wb", errors="backslashreplace", line_buffering=True)
            sys.argv = [str(path)]
            sys.path.insert(0, str(path.parent))  # as `python script.py` does: siblings import
            main = types.ModuleType("__main__")
            main.__file__ = str(path)
            main.__builtins__ = builtins  # type: ignore[attr-defined]
            sys.modules["__main__"] = main
            atexit._clear()  # the worker's exit handlers are not the script's
            if not _receive(go):  # sent away unused (another script, the op changed, the worker ends)
                os._exit(0)
            os.close(go)
            if self.watchdog:
                WATCHDOG.arm(self.watchdog)
            try:
                exec(code, main.__dict__)
            except SystemExit as exc:
                report["status"] = exc.code if isinstance(exc.code, int) or exc.code is None else str(exc.code)
            except BaseException as exc:
                report["error"] = explain(exc)
            atexit._run_exitfuncs()
            for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
                try:
                    stream.flush()
                except (AttributeError, OSError, ValueError):
                    pass
            # fd 1 shares its offset with the in-memory file: what the script wrote ends there
            os.ftruncate(self.stdout, os.lseek(self.stdout, 0, os.SEEK_CUR))
        except BaseException as exc:  # gpuemu's own code failed around the script
            report = {"error": {"internal": f"gpuemu internal error running the script: {type(exc).__name__}: {exc}"}}
        try:
            _write_all(self.report, [pickle.dumps(report)])
            os.write(done, b"1")
        finally:
            os._exit(0)


def _close(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass


def _send(fd: int, byte: bytes) -> bool:
    """Write ``byte``; False when the reader is gone (the child died before its call)."""
    try:
        return os.write(fd, byte) == 1
    except OSError:
        return False


def _receive(fd: int) -> bool:
    """Wait for one byte on ``fd``; False at end of file."""
    while True:
        try:
            return bool(os.read(fd, 1))
        except InterruptedError:
            continue


def _end_spare(spare: _Child) -> None:
    """Send an unused spare away, close this side of its pipes and reap it: end of file on its go, then SIGKILL
    (another child may hold a copy of the pipe's write end, so end of file alone might never come)."""
    _close(spare.go)
    _close(spare.done)
    try:
        os.kill(spare.pid, signal.SIGKILL)
        os.waitpid(spare.pid, 0)
    except (ProcessLookupError, ChildProcessError):
        pass


def _die_like(status: int) -> None:
    """The script's process died without a report: the worker dies the same way, leaving nothing behind.

    The supervisor then reports the signal or exit status of the script itself, as it always has.
    """
    contain.kill_descendants(os.getpid())
    code = os.waitstatus_to_exitcode(status)
    if code < 0:
        faulthandler.disable()  # the child already dumped its stack; the worker's would hide it
        signal.signal(-code, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [-code])
        os.kill(os.getpid(), -code)
        code = 128 - code
    os._exit(code)


__all__ = ["Ended", "ScriptFork", "available", "preload"]
