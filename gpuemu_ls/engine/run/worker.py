"""The worker process: hosts one op at a time and runs its cases with :func:`case.run_case`.

Started by :mod:`supervisor` as ``python -m gpuemu_ls.engine.run.worker FD``, it talks over a socket
(pickled messages, numpy buffers in binary) and never over stdout, which user code may scribble on.
Before each phase of a case it says which phase (op / reference / compare) it enters, so that a
crash or a hang is pinned on the right party. It dies with its parent (PR_SET_PDEATHSIG), has its
own process group and is a child subreaper, so nothing it starts outlives it or the supervisor, even
after ``setsid`` (:mod:`contain`). Workspace files never replace the modules it needs (:mod:`shadow`).
"""

from __future__ import annotations

import ctypes
import faulthandler
import gc
import os
import resource
import signal
import sys
from multiprocessing.connection import Connection
from pathlib import Path

from ..cases.plan import CaseSpec
from ..config.model import OpConfig, ValidationConfig
from . import contain, pick, shadow, triton_interp
from .case import CaseContext, run_case_guarded
from .runners import CallError, ScriptRunner
from .watchdog import WATCHDOG
from .workerenv import own_environ


def build_context(root: Path, op: OpConfig, validation: ValidationConfig) -> CaseContext:
    """Load the op and its reference; CallError (kind ``import``) names file and line when that fails."""
    triton_interp.watch()  # bf16 and counting from triton's import on, by the op's module or its first call
    op_runner = pick.op_runner(root, op, isolated=True)
    if op_runner is None:
        raise CallError(
            "import",
            f"op {op.name!r} has nothing runnable here (execution_mode = "
            f"{op.execution_mode!r}): run it through the Python API on the machine that has the kernel",
        )
    ref_runner = pick.reference_runner(root, op, isolated=True)
    return CaseContext(root, op, validation, op_runner, ref_runner, triton_patch=True)


def _share_cores(threads: int | None) -> None:
    """Let the op's framework use ``threads`` intra-op threads (the cores this worker's share): torch's default
    of every core per worker makes two workers on two cores spin against each other."""
    torch = sys.modules.get("torch")
    if threads and torch is not None and hasattr(torch, "set_num_threads"):
        try:
            torch.set_num_threads(threads)
        except Exception:  # a stub or a broken torch: its own default stands
            pass


def _kill_own_group(_signum: int, _frame: object) -> None:
    contain.kill_descendants(os.getpid())  # what the op started, setsid or not (this worker is their subreaper)
    os.killpg(0, signal.SIGKILL)  # this worker leads its process group: it and whatever the op started


def _die_with_parent() -> None:
    """When the supervisor dies (even by kill -9), take down this worker *and* what the op started.

    The kernel sends SIGTERM (PR_SET_PDEATHSIG) and the handler kills the whole group; a worker stuck in C
    code that holds the GIL still ends at its CPU limit (see _limit_cpu). Under the zygote, the zygote
    does this instead when the supervisor's socket closes.
    """
    signal.signal(signal.SIGTERM, _kill_own_group)
    contain.die_with_parent(signal.SIGTERM)


def default_memory_mb() -> int | None:
    """Half of the memory this machine (or its cgroup) has: one runaway case must not take the editor and
    the rest of the machine down with it. None where it cannot be read."""
    sizes = []
    try:
        sizes.append(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        pass
    try:
        text = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        if text.isdigit():
            sizes.append(int(text))
    except OSError:
        pass
    return max(256, min(sizes) // 2 // 2**20) if sizes else None


def _memory_note(limit_mb: int | None) -> str:
    """Which memory limit a case that ran out of memory hit."""
    return f"memory_limit_mb = {limit_mb}" if limit_mb else f"the default limit, {default_memory_mb()} MB"


def _apply_limits(memory_mb: int | None) -> None:
    """``memory_limit_mb`` caps the address space (RLIMIT_AS), as documented. Without it, the default caps
    the data segment (RLIMIT_DATA: private writable memory) at half the machine's memory: unlike the address
    space, it leaves the large inaccessible reservations of GPU runtimes and allocators alone."""
    which, limit_mb = (resource.RLIMIT_AS, memory_mb) if memory_mb else (resource.RLIMIT_DATA, default_memory_mb())
    if limit_mb:
        limit = limit_mb * 1024 * 1024
        try:
            soft, hard = resource.getrlimit(which)
            if hard != resource.RLIM_INFINITY:
                limit = min(limit, hard)
            if soft == resource.RLIM_INFINITY or soft > limit:
                resource.setrlimit(which, (limit, hard if memory_mb is None else limit))
        except (ValueError, OSError):
            pass


#: glibc's own ceilings for its adaptive malloc thresholds (mallopt's M_MMAP_THRESHOLD, M_TRIM_THRESHOLD): what
#: any process that once freed a 32 MiB block runs with.
_MALLOPT = ((-3, 32 << 20), (-1, 64 << 20))


def _steady_heap() -> None:
    """Let each case reuse the heap pages the previous one freed.

    With glibc's starting thresholds a case's arrays (a few hundred KiB to a few MiB each) are mapped fresh
    or trimmed away after each case, and every page is faulted in again: ~480 page faults a case on a
    softmax [64,1024], a fifth of its time. Arrays above 32 MiB still map and unmap at once. A no-op where
    the C library has no ``mallopt`` (not glibc)."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return
    for param, value in _MALLOPT:
        mallopt(param, value)


def _limit_cpu(seconds: float) -> None:
    """Let this case use ``seconds`` more CPU time (all threads), then SIGXCPU: a runaway loop ends even if
    the supervisor's wall-clock timeout were not there."""
    try:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        _, hard = resource.getrlimit(resource.RLIMIT_CPU)
        soft = int(usage.ru_utime + usage.ru_stime + seconds) + 1
        if hard != resource.RLIM_INFINITY:
            soft = min(soft, hard)
        resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))
    except (ValueError, OSError):
        pass


CASE_MARK = "--- gpuemu: case seed="


def _announce(conn: Connection, seed: int, phase: str, watchdog: float | None) -> None:
    """Tell the supervisor a case left its op phase (a case starts in it), so a crash is blamed right.

    Each phase gets the supervisor's full timeout, so the stack dump is re-armed to fire just before it
    (an arming still fresh stands, :mod:`watchdog`): a hung op or reference then leaves the line it is
    stuck on in the log (see validate.crash_site). ``watchdog`` is None when both run as forked scripts,
    each of which arms its own: this process then runs none of the user's code, and arming here would only
    be cancelled again before each fork.
    """
    if watchdog is not None:
        WATCHDOG.arm(watchdog)
    if phase != "op":
        conn.send(("phase", seed, phase))


def serve(conn: Connection) -> None:
    """Answer messages until the supervisor says exit or goes away."""
    ctx: CaseContext | None = None
    cpu_seconds = 60.0
    in_process: float | None = 54.0  # the dump's delay where the op or its reference runs in this process
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        tag = msg[0]
        if tag != "case":
            WATCHDOG.disarm()  # armed by the last case, whose next message this is
        if tag == "exit":
            return
        if tag == "setup":
            _, root, op, validation, cwd, calibration, threads = msg
            for runner in (ctx.op_runner, ctx.ref_runner) if ctx else ():
                if isinstance(runner, ScriptRunner) and runner.fork:
                    runner.fork.close()  # its spare child and the last one, done but not reaped
            contain.kill_descendants(os.getpid())  # what the previous op left running ends with it
            try:
                os.chdir(cwd)
                ctx = build_context(Path(root), op, validation)
                ctx.calibration = calibration
                _share_cores(threads)
                timeout = op.timeout or validation.timeout
                cpu_seconds = timeout * max(1, os.cpu_count() or 1) + 1.0
                watchdog = max(0.05, 0.9 * timeout)
                forks = [r.fork for r in (ctx.op_runner, ctx.ref_runner) if isinstance(r, ScriptRunner) and r.fork]
                # user code runs in this process (not both forked scripts, which arm their own): arm the dump here
                in_process = watchdog if len(forks) < 2 else None
                for fork in forks:
                    fork.watchdog, fork.rearm = watchdog, in_process is not None
                    # a spare child sets up on another core while a call runs: a gain where this worker has
                    # cores to itself (one job on two cores: 49 -> 40 ms a softmax case), a loss where every
                    # core is busy (two jobs on two: 21 -> 27 ms, the spares' set-up and copied pages)
                    fork.prefork = (threads or 1) >= 2
                gc.freeze()  # forked script calls then copy no page for the collector's sake
                conn.send(("ready", {"op": ctx.op_runner.where, "reference": ctx.ref_runner.where}))
            except CallError as exc:
                ctx = None
                conn.send(
                    ("setup_error", {"kind": exc.kind, "message": exc.message, "file": exc.file, "line": exc.line})
                )
            except Exception as exc:  # e.g. a framework that is not installed
                ctx = None
                conn.send(
                    (
                        "setup_error",
                        {"kind": "import", "message": f"{type(exc).__name__}: {exc}", "file": None, "line": None},
                    )
                )
        elif tag == "case":
            _, spec_dict, snapshot = msg
            spec = CaseSpec.from_dict(spec_dict)
            if ctx is None:
                conn.send(("internal_error", "case before a successful setup"))
                continue
            _limit_cpu(cpu_seconds)
            os.write(2, f"{CASE_MARK}{spec.seed} ---\n".encode())  # validate.crash_site reads from here on
            try:
                result = run_case_guarded(
                    ctx,
                    spec,
                    snapshot,
                    phase=lambda p, s=spec.seed, w=in_process: _announce(conn, s, p, w),
                    memory_note=lambda limit=ctx.validation.memory_limit_mb: _memory_note(limit),
                )
            finally:
                if not conn.poll(0):  # no case queued behind this one: an idle worker dumps no stack
                    WATCHDOG.disarm()
            for c in result.comparisons:
                c.mask = None  # diagnosis features are already taken; the mask stays here
            conn.send(("result", result))


def run(fd: int, memory_mb: int | None) -> None:
    """Serve on the channel ``fd`` (stdout/stderr already point at the worker's log)."""
    contain.make_subreaper()  # orphans of what the op starts stay below this worker, to be killed with it
    shadow.protect()  # before the workspace is on sys.path
    _apply_limits(memory_mb)
    _steady_heap()
    faulthandler.enable(all_threads=False)  # a segfault or abort leaves the Python stack in the log
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)  # user code that reads stdin gets EOF, not the protocol
    try:
        serve(Connection(fd))
    finally:
        contain.kill_descendants(os.getpid())  # a clean exit leaves nothing behind either
        contain.reap_children()


def main(argv: list[str] | None = None) -> int:
    args = argv if argv is not None else sys.argv[1:]
    own_environ()
    _die_with_parent()
    run(int(args[0]), int(args[1]) if len(args) > 1 and args[1] != "0" else None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
