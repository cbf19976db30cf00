"""A fork server for worker processes: Python, numpy and the engine imported once, workers forked in ms.

Starting a worker as a new interpreter costs a few hundred milliseconds (mostly imports), which is
most of the time between a save and its diagnostics. The zygote is one single-threaded process that
has imported everything a worker needs; each worker is ``os.fork()`` of it, in a new session (its
own process group, so a kill takes everything the op started), dying with the zygote
(``PR_SET_PDEATHSIG``), with its channel socket and log file handed over by ``SCM_RIGHTS``. The
zygote reaps its children and reports their exit status (so a segfault is still named), and exits
when its control socket closes, killing any worker left: nothing outlives the supervisor. Where the
zygote cannot run, :mod:`supervisor` falls back to starting workers as fresh interpreters.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

_PACKAGE_PARENT = str(Path(__file__).resolve().parents[3])


class Zygote:
    """The supervisor's side: ask for workers, learn their exit statuses."""

    def __init__(self) -> None:
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (_PACKAGE_PARENT, env.get("PYTHONPATH", "")) if p)
        env.setdefault("PYTHONUNBUFFERED", "1")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "gpuemu_ls.engine.run.zygote", str(child.fileno())],
            pass_fds=(child.fileno(),),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            env=env,
        )
        child.close()
        self.sock = parent
        self.lock = threading.Lock()  # one spawn request at a time
        self.cond = threading.Condition()
        self.spawned: list[int] = []
        self.exits: dict[int, int] = {}
        self.ready = False
        self.closed = False
        self.reader = threading.Thread(target=self._read, name="gpuemu-zygote", daemon=True)
        self.reader.start()

    def _read(self) -> None:
        while True:
            try:
                data = self.sock.recv(4096)
            except OSError:
                data = b""
            with self.cond:
                if not data:
                    self.closed = True
                    self.cond.notify_all()
                    return
                msg = json.loads(data)
                if msg[0] == "ready":
                    self.ready = True
                elif msg[0] == "spawned":
                    self.spawned.append(int(msg[1]))
                elif msg[0] == "exited":
                    self.exits[int(msg[1])] = int(msg[2])
                self.cond.notify_all()

    def alive(self) -> bool:
        return not self.closed and self.proc.poll() is None

    def spawn(self, channel_fd: int, log_fd: int, memory_mb: int | None, timeout: float = 30.0) -> int:
        """Fork a worker serving ``channel_fd``, logging to ``log_fd``; its pid (RuntimeError if impossible)."""
        with self.lock:
            with self.cond:
                if not self.cond.wait_for(lambda: self.ready or self.closed, timeout):
                    raise RuntimeError("the zygote did not start")
                if self.closed:
                    raise RuntimeError("the zygote is gone")
                before = len(self.spawned)
            socket.send_fds(
                self.sock, [json.dumps({"op": "spawn", "memory_mb": memory_mb}).encode()], [channel_fd, log_fd]
            )
            with self.cond:
                if not self.cond.wait_for(lambda: len(self.spawned) > before or self.closed, timeout):
                    raise RuntimeError("the zygote did not answer")
                if self.closed:
                    raise RuntimeError("the zygote is gone")
                return self.spawned[before]

    def wait(self, pid: int, timeout: float | None) -> int | None:
        """The wait status of a worker once it exited, or None after ``timeout``."""
        with self.cond:
            self.cond.wait_for(lambda: pid in self.exits or self.closed, timeout)
            return self.exits.get(pid)

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()


class ForkedProcess:
    """What the supervisor needs of a ``Popen`` for a worker forked by the zygote."""

    def __init__(self, pid: int, zygote: Zygote) -> None:
        self.pid = pid
        self.zygote = zygote
        self.returncode: int | None = None

    def _code(self, status: int | None) -> int | None:
        if status is not None:
            self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def poll(self) -> int | None:
        if self.returncode is None:
            self._code(self.zygote.exits.get(self.pid))
        if self.returncode is None and self.zygote.closed:
            self.returncode = -signal.SIGKILL  # the zygote is gone, and its workers with it
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self._code(self.zygote.wait(self.pid, timeout))
        if self.returncode is None:
            if self.zygote.closed:
                self.returncode = -signal.SIGKILL
            else:
                raise subprocess.TimeoutExpired(str(self.pid), timeout or 0)
        return self.returncode


_zygote: Zygote | None = None
_zygote_lock = threading.Lock()


def get_zygote() -> Zygote | None:
    """The process-wide zygote, started on first use (None where it cannot run)."""
    global _zygote
    if os.environ.get("GPUEMU_NO_ZYGOTE") or not hasattr(socket, "send_fds") or sys.platform != "linux":
        return None
    with _zygote_lock:
        if _zygote is None or not _zygote.alive():
            try:
                _zygote = Zygote()
            except OSError:
                return None
        return _zygote


# --- the zygote process -------------------------------------------------------------------------


def _prctl_pdeathsig() -> None:
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)
    except (OSError, AttributeError):
        pass


def _child(sock: socket.socket, fds: list[int], req: dict[str, Any]) -> None:
    """In the forked worker: become a session leader, take over the fds, serve, never return."""
    code = 0
    try:
        os.setsid()
        sock.close()
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        _prctl_pdeathsig()  # dies with the zygote (PDEATHSIG is not inherited across fork)
        channel_fd, log_fd = fds
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        os.close(log_fd)
        from . import worker

        worker.run(channel_fd, req.get("memory_mb"))
    except BaseException:
        code = 1
    finally:
        os._exit(code)


def main(fd: int) -> int:
    from . import worker  # noqa: F401 - the imports every worker needs, done once here

    sock = socket.socket(fileno=fd)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    children: set[int] = set()
    sock.send(json.dumps(["ready"]).encode())
    while True:
        while children:  # reap and report
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            children.discard(pid)
            try:
                sock.send(json.dumps(["exited", pid, status]).encode())
            except OSError:
                pass
        readable, _, _ = select.select([sock], [], [], 0.05)
        if not readable:
            continue
        try:
            data, fds, _flags, _addr = socket.recv_fds(sock, 4096, 4)
        except OSError:
            data, fds = b"", []
        if not data:  # the supervisor is gone: so are its workers
            for pid in children:
                for kill in (os.killpg, os.kill):
                    try:
                        kill(pid, signal.SIGKILL)
                    except (ProcessLookupError, PermissionError):
                        pass
            return 0
        req = json.loads(data)
        pid = os.fork()
        if pid == 0:
            _child(sock, fds, req)
        for f in fds:
            os.close(f)
        children.add(pid)
        sock.send(json.dumps(["spawned", pid]).encode())


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1])))
