"""Keep every process an op starts inside its worker's process tree, and kill that tree whole.

A process group is not enough: an op can leave it with ``setsid`` (``start_new_session=True``, a
double fork), and an orphan is reparented to init, out of reach. On Linux a *child subreaper*
(``PR_SET_CHILD_SUBREAPER``) adopts the orphans of its descendants instead, so a worker that is one
keeps everything its op started in its own subtree, and the zygote above it (a subreaper too) catches
what is left when a worker dies. Killing a tree is then a walk of ``/proc/<pid>/task/*/children``,
repeated until nothing is left, since a process may fork while the walk runs.
"""

from __future__ import annotations

import os
import signal
import sys
import time

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36


def _prctl(option: int, value: int) -> bool:
    if sys.platform != "linux":
        return False
    try:
        import ctypes

        return bool(ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


def make_subreaper() -> bool:
    """Adopt the orphans of this process's descendants (Linux 3.4+); False where that is not possible."""
    return _prctl(PR_SET_CHILD_SUBREAPER, 1)


def die_with_parent(sig: int = signal.SIGKILL) -> bool:
    """Get ``sig`` when the parent dies (PR_SET_PDEATHSIG; not inherited across fork)."""
    return _prctl(PR_SET_PDEATHSIG, int(sig))


def _state(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            raw = fh.read()
    except OSError:
        return None
    return raw[raw.rfind(b")") + 2 :][:1].decode("ascii", "replace")


def _scan_children(pid: int) -> list[int]:
    """Children by ppid, for kernels without ``/proc/<pid>/task/<tid>/children``."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                raw = fh.read()
        except OSError:
            continue
        if int(raw[raw.rfind(b")") + 2 :].split()[1]) == pid:
            out.append(int(entry))
    return out


def children(pid: int) -> list[int]:
    """Live (not zombie) children of ``pid``; empty where /proc cannot tell."""
    found: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as fh:
                found += [int(p) for p in fh.read().split()]
        except FileNotFoundError:
            found = _scan_children(pid)
            break
        except (OSError, ValueError):
            continue
    return [p for p in dict.fromkeys(found) if _state(p) not in (None, "Z", "X")]


def descendants(pid: int) -> list[int]:
    """Every live descendant of ``pid``, parents before their children."""
    out: list[int] = []
    frontier = [pid]
    seen = {pid}
    while frontier:
        nxt = []
        for p in frontier:
            for c in children(p):
                if c not in seen:
                    seen.add(c)
                    out.append(c)
                    nxt.append(c)
        frontier = nxt
    return out


def _kill(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def kill_descendants(pid: int, budget: float = 2.0) -> int:
    """SIGKILL every descendant of ``pid`` (not ``pid`` itself) until none is left; how many were killed.

    Each pass stops what it finds before killing it, so nothing forks between the two; a child that a
    killed process forked in the meantime is reparented to the nearest subreaper (``pid``, when it is
    one) and found by the next pass.
    """
    if sys.platform != "linux":
        return 0
    killed: set[int] = set()
    deadline = time.monotonic() + budget
    while True:
        found = descendants(pid)
        if not found or time.monotonic() > deadline:
            return len(killed)
        for p in found:
            _kill(p, signal.SIGSTOP)
        for p in found:
            _kill(p, signal.SIGKILL)
        killed.update(found)
        time.sleep(0.001 if len(killed) < 64 else 0.01)


def kill_pids(pids: set[int]) -> None:
    """Stop, then SIGKILL, each of ``pids`` and what they start meanwhile (their descendants)."""
    if not pids or sys.platform != "linux":
        return
    found = set(pids)
    for p in list(pids):
        found.update(descendants(p))
    for p in found:
        _kill(p, signal.SIGSTOP)
    for p in found:
        _kill(p, signal.SIGKILL)


def reap_children(timeout: float = 0.5) -> None:
    """Reap this process's exited children (adopted orphans included) until none is left or ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            if time.monotonic() > deadline:
                return
            time.sleep(0.005)


def kill_tree(pid: int) -> None:
    """Stop ``pid``, kill everything below it, then kill it and its process group."""
    _kill(pid, signal.SIGSTOP)
    kill_descendants(pid)
    for kill in (os.killpg, os.kill):
        try:
            kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


__all__ = [
    "children",
    "descendants",
    "die_with_parent",
    "kill_descendants",
    "kill_pids",
    "kill_tree",
    "make_subreaper",
    "reap_children",
]
