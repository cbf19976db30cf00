"""A fork server for worker processes: Python, numpy and the engine imported once, workers forked in ms.

Starting a worker as a new interpreter costs a few hundred milliseconds (mostly imports), which is
most of the time between a save and its diagnostics. The zygote is one single-threaded process that
has imported everything a worker needs; each worker is ``os.fork()`` of it, in a new session (its
own process group, so a kill takes everything the op started), dying with the zygote
(``PR_SET_PDEATHSIG``), with its channel socket and log file handed over by ``SCM_RIGHTS``. The
zygote reaps its children and reports their exit status (so a segfault is still named), and exits
when its control socket closes, killing any worker left: nothing outlives the supervisor. The zygote is
a child subreaper (:mod:`contain`): a process an op detached with ``setsid`` is adopted by its worker
(a subreaper too) or, once that worker is gone, by the zygote, which kills it. Where the zygote cannot
run, :mod:`supervisor` falls back to starting workers as fresh interpreters.

The zygote starts without the current folder on ``sys.path`` (:func:`python_cmd`): a workspace file
named like a module the runner imports (``socket.py``, ``numpy.py``) must not replace it.
"""

from __future__ import annotations

import atexit
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

from . import contain, workerenv

_PACKAGE_PARENT = str(Path(__file__).resolve().parents[3])
#: How much lower than this process the processes that run ops are scheduled (``nice`` steps; 0: the same). The
#: language server sets it (:func:`run_ops_in_background`): on a machine of few cores its workers running ops
#: at full speed took the CPU from the process answering the editor, as clangd's background index would at
#: normal priority; the gate and the CLI, which only run ops, leave it at 0.
_BACKGROUND_NICE = 0


def run_ops_in_background(nice: int = 10) -> None:
    """Start every later zygote and worker ``nice`` steps below this process (a zygote's forks inherit it)."""
    global _BACKGROUND_NICE
    _BACKGROUND_NICE = max(0, nice)


def start_python(module: str, fd: int, *args: str, log: Any = subprocess.DEVNULL) -> subprocess.Popen[bytes]:
    """A fresh interpreter running ``module.main([fd, *args])`` (see :func:`python_cmd`) in its own session,
    given the socket ``fd``, this package importable and unbuffered output going to ``log``."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (_PACKAGE_PARENT, env.get("PYTHONPATH", "")) if p)
    env.setdefault("PYTHONUNBUFFERED", "1")
    workerenv.malloc_env(env)
    proc = subprocess.Popen(
        python_cmd(module, str(fd), *args),
        pass_fds=(fd,),
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=log,
        start_new_session=True,
        env=env,
    )
    if _BACKGROUND_NICE:
        try:  # before it reads its socket: every process it forks from here on inherits the priority
            os.setpriority(os.PRIO_PROCESS, proc.pid, min(19, os.getpriority(os.PRIO_PROCESS, 0) + _BACKGROUND_NICE))
        except OSError:
            pass  # gone already (its supervisor will say why), or no such call here: it runs at our priority
    return proc


def python_cmd(module: str, *args: str) -> list[str]:
    """``python -c`` running ``module.main(args)`` with no current-folder entry on ``sys.path``.

    ``python -m`` (and ``-c``) put the current folder first on ``sys.path``, and the runner's processes start
    in the user's workspace: its ``signal.py`` or ``numpy.py`` would be imported in place of the real one.
    """
    boot = (
        "import sys; sys.path[:] = [p for p in sys.path if p not in ('', '.')]; "
        f"from {module} import main; sys.exit(main([*sys.argv[1:]]))"
    )
    return [sys.executable, "-c", boot, *args]


class Zygote:
    """The supervisor's side: ask for workers, learn their exit statuses."""

    def __init__(self) -> None:
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.proc = start_python("gpuemu_ls.engine.run.zygote", child.fileno())
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
        """Close the control socket: the zygote kills every worker and what they started, then exits."""
        try:
            self.sock.shutdown(socket.SHUT_RDWR)  # close() alone would wait for the reader thread's recv
        except OSError:
            pass
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


@atexit.register
def _close_at_exit() -> None:
    """On a normal exit, wait for the zygote to have killed everything (it would on its own, a little later)."""
    if _zygote is not None:
        _zygote.close()


# --- the zygote process -------------------------------------------------------------------------


def _child(sock: socket.socket, fds: list[int], req: dict[str, Any]) -> None:
    """In the forked worker: become a session leader, take over the fds, serve, never return."""
    code = 0
    try:
        os.setsid()
        sock.close()
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        contain.die_with_parent()  # dies with the zygote (PDEATHSIG is not inherited across fork)
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


def _reap(sock: socket.socket, children: set[int]) -> None:
    """Reap every exited child; report workers' statuses (adopted orphans are only reaped)."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        if pid in children:
            children.discard(pid)
            try:
                sock.send(json.dumps(["exited", pid, status]).encode())
            except OSError:
                pass


def _kill_orphans(children: set[int]) -> None:
    """A child of the zygote that is not a live worker was left by a dead one: it and its tree go."""
    for pid in contain.children(os.getpid()):
        if pid not in children:
            contain.kill_tree(pid)


def main(argv: list[str] | int) -> int:
    workerenv.own_environ()
    from . import worker  # noqa: F401 - the imports every worker needs, done once here

    fd = int(argv[0]) if isinstance(argv, list) else argv
    sock = socket.socket(fileno=fd)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    contain.make_subreaper()
    children: set[int] = set()
    sock.send(json.dumps(["ready"]).encode())
    while True:
        _reap(sock, children)
        _kill_orphans(children)
        readable, _, _ = select.select([sock], [], [], 0.05)
        if not readable:
            continue
        try:
            data, fds, _flags, _addr = socket.recv_fds(sock, 4096, 4)
        except OSError:
            data, fds = b"", []
        if not data:  # the supervisor is gone: so are its workers and everything below them
            for pid in children:
                contain.kill_tree(pid)
            contain.kill_descendants(os.getpid())
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
    sys.exit(main(sys.argv[1:]))
