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
    """Replace the file's content with ``parts``, one after the other (never joined into one more copy)."""
    os.ftruncate(fd, 0)
    at = 0
    for part in parts:
        view, done = memoryview(part), 0
        while done < len(view):
            done += os.pwrite(fd, view[done:], at + done)
        at += done
    os.lseek(fd, 0, os.SEEK_SET)


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


class ScriptFork:
    """Runs a compiled script once per call in a forked child (see the module docstring)."""

    def __init__(self) -> None:
        self.stdin = _anon_file("gpuemu-stdin")
        self.stdout = _anon_file("gpuemu-stdout")
        self.report = _anon_file("gpuemu-report")
        self.watchdog: float | None = None  # seconds before a hung script's stack goes to the log
        self.rearm = True  # re-arm this process's dump after a call (False: it runs no user code to watch)

    def close(self) -> None:
        for fd in (self.stdin, self.stdout, self.report):
            try:
                os.close(fd)
            except OSError:
                pass

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
        _write_all(self.stdin, request)
        for fd in (self.stdout, self.report):
            os.ftruncate(fd, 0)
            os.lseek(fd, 0, os.SEEK_SET)
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (AttributeError, OSError, ValueError):
                pass
        err_start = _offset(2)
        WATCHDOG.disarm()  # its watchdog thread would not exist in the child
        before = set(contain.descendants(os.getpid()))
        pid = os.fork()
        if pid == 0:
            self._child(code, path, explain)
        _, status = os.waitpid(pid, 0)
        # what the script started ends with its call, setsid or double-forked (this worker is their subreaper):
        # a leftover that holds the result store's lock would stall the run's writes
        left = set(contain.descendants(os.getpid())) - before
        if left:
            contain.kill_pids(left)
            contain.reap_children(0.2)
        if self.watchdog and self.rearm:
            WATCHDOG.arm(self.watchdog)
        raw = _read_all(self.report)
        if not raw:
            _die_like(status)
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

    def _child(self, code: types.CodeType, path: Path, explain: Callable[[BaseException], dict[str, Any]]) -> None:
        """In the fork: become ``python path`` on real fds, run, report, never return."""
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
        except BaseException as exc:  # gpuemu's own code failed around the script
            report = {"error": {"internal": f"gpuemu internal error running the script: {type(exc).__name__}: {exc}"}}
        try:
            _write_all(self.report, [pickle.dumps(report)])
        finally:
            os._exit(0)


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
