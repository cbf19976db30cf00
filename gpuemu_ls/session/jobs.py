"""Background work for the server: validations, lint, minimize, reproduce, calibrate, off the event loop.

Each job runs in a thread that drives engine calls; the ops themselves run in worker processes, so a
kernel that spins or crashes costs its case, never the server. A job per op: a new save supersedes
(cancels) the running validation of the same op. Jobs report through one callback with plain event
dicts; the server turns them into progress, diagnostics and ``gpuemu/opState`` notifications.
"""

from __future__ import annotations

import itertools
import threading
import time
import traceback
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as futures_wait
from dataclasses import dataclass, field
from typing import Any

from ..engine.cases.plan import PlanCancelled
from ..engine.errors import GpuemuError
from ..engine.run.validate import RunOptions, RunResult, plan_op, run_validation
from ..engine.store.db import Store
from . import collector, priority
from .workspace import WorkspaceSession

Event = dict[str, Any]
_ids = itertools.count(1)
#: Seconds between two progress events of one validation for cases that passed (its first case and every case
#: that did not pass are always told, and its end carries the last count): each became an ``opState`` and a
#: progress report, thousands while 1,000 ops validated.
PROGRESS_INTERVAL = 0.2


@dataclass
class Job:
    kind: str  # validate | lint | task
    session: WorkspaceSession
    name: str  # op or kernel name, or a task label
    mode: str = "quick"
    iterations: int | None = None
    reason: str = ""
    id: int = field(default_factory=lambda: next(_ids))
    cancel: threading.Event = field(default_factory=threading.Event)
    future: Future[Any] | None = None
    total: int = 0
    done: int = 0
    failed: int = 0
    error: Exception | None = None  # why ``work`` raised: the future then yields None, a caller re-raises it

    @property
    def key(self) -> tuple[str, str, str]:
        return (str(self.session.root), self.kind, self.name)


class JobRunner:
    """Runs jobs on a small thread pool; one live job per (workspace, kind, name)."""

    def __init__(self, on_event: Callable[[Event], None], parallel: int = 1) -> None:
        self.on_event = on_event
        self.pool = ThreadPoolExecutor(max_workers=max(1, parallel) + 1, thread_name_prefix="gpuemu-job")
        self.live: dict[tuple[str, str, str], Job] = {}
        self.lock = threading.Lock()

    def _emit(self, event: Event) -> None:
        try:
            self.on_event(event)
        except Exception:  # the server's handler must never kill a job thread
            traceback.print_exc()

    def _start(self, job: Job, work: Callable[[Job], Any]) -> Job:
        with self.lock:
            old = self.live.get(job.key)
            if old is not None:
                old.cancel.set()  # superseded: its worker is killed at the next poll
            self.live[job.key] = job
        collector.keep_pauses_short()  # while jobs run, full collections scan only what is new
        self._emit({"type": "queued", "job": job})

        def run() -> Any:
            priority.background()
            if job.cancel.is_set():
                self._finish(job, {"type": "cancelled", "job": job})
                return None
            self._emit({"type": "started", "job": job})
            try:
                result = work(job)
            except Exception as exc:
                job.error = exc
                self._finish(
                    job,
                    {
                        "type": "failed",
                        "job": job,
                        # the engine's own errors (a damaged or full store) say what to do: no type name
                        "error": str(exc) if isinstance(exc, GpuemuError) else f"{type(exc).__name__}: {exc}",
                        "traceback": traceback.format_exc(),
                    },
                )
                return None
            if job.cancel.is_set():
                self._finish(job, {"type": "cancelled", "job": job, "result": result})
            else:
                self._finish(job, {"type": "finished", "job": job, "result": result})
            return result

        job.future = self.pool.submit(run)
        return job

    def _finish(self, job: Job, event: Event) -> None:
        with self.lock:
            if self.live.get(job.key) is job:
                del self.live[job.key]
            idle = not self.live
        self._emit(event)
        if idle:  # the last job: the cycles frozen while jobs ran are reclaimed now, when nothing waits on it
            collector.settle()
            with self.lock:
                if self.live:  # a job started while it collected: its run keeps its pauses short too
                    collector.keep_pauses_short()

    # --- job kinds -----------------------------------------------------------------------
    def validate(
        self, session: WorkspaceSession, op: str, *, mode: str, iterations: int | None, reason: str = ""
    ) -> Job:
        return self._start(Job("validate", session, op, mode, iterations, reason), self._validate)

    def _validate(self, job: Job) -> RunResult | None:
        cfg = job.session.config
        if cfg is None:
            return None
        op = cfg.op(job.name)
        try:  # planning a big run takes a while: a superseded run or an exiting server stops it at once
            specs = plan_op(cfg, op, job.mode, job.iterations, None, cancel=job.cancel)
        except PlanCancelled:
            return None
        job.total = len(specs)

        shown = float("-inf")  # when a progress event was last sent

        def on_case(_op: str, case: Any, i: int, n: int) -> None:
            nonlocal shown
            job.done, job.total = i, n
            job.failed += case.status not in ("passed", "edge")
            # a case that did not pass is told at once (the Test Explorer shows it as it happens); the end tells the
            # last count
            if case.status != "passed" or time.monotonic() - shown >= PROGRESS_INTERVAL:
                shown = time.monotonic()
                self._emit({"type": "progress", "job": job, "case": case})
            priority.give_way()  # between two cases: the editor's request or edit check first

        options = RunOptions(
            mode=job.mode,
            iterations=job.iterations,
            ops=[job.name],
            jobs=1,
            source="server",
            cancel=job.cancel,
            on_case=on_case,
            command=f"gpuemu-ls ({job.reason})",
        )
        store = Store(job.session.store_file)  # a connection of this thread's own
        try:
            return run_validation(cfg, options, store=store, specs_by_op={job.name: specs})
        finally:
            store.close()

    def lint(self, session: WorkspaceSession, kernel: str, reason: str = "") -> Job:
        return self._start(Job("lint", session, kernel, reason=reason), self._lint)

    def _lint(self, job: Job) -> list[dict[str, Any]]:
        from ..engine.run.kernels import lint_entries

        cfg = job.session.config
        if cfg is None:
            return []
        entries = lint_entries(cfg, [job.name])
        store = Store(job.session.store_file)
        try:
            run_id = store.begin_run(
                source="server",
                mode="lint",
                seed=None,
                iterations=None,
                workspace=cfg.root,
                config_hash="",
                command="gpuemu-ls lint",
            )
            for e in entries:
                store.add_op_result(
                    run_id, e["name"], "kernel", e["status"], duration=e["elapsed"], message=e["message"], detail=e
                )
            store.finish_run(run_id, "passed" if all(e["status"] == "passed" for e in entries) else "failed")
        finally:
            store.close()
        return entries

    def task(self, session: WorkspaceSession, label: str, fn: Callable[[Job], Any]) -> Job:
        """Any other engine call (minimize, reproduce, calibrate) as a cancellable job."""
        return self._start(Job("task", session, label), fn)

    def is_live(self, session: WorkspaceSession, kind: str, name: str) -> bool:
        """Whether a job of this kind and name runs (or waits) in the workspace: a file opened meanwhile need
        not start it again (which would cancel it)."""
        with self.lock:
            return (str(session.root), kind, name) in self.live

    def cancel_all(self) -> None:
        with self.lock:
            jobs = list(self.live.values())
        for j in jobs:
            j.cancel.set()

    def shutdown(self, wait: float = 10.0) -> None:
        """Cancel every job and give the running ones ``wait`` seconds to stop (their workers are killed at
        the next poll), so none is still writing when the sessions close."""
        with self.lock:
            running = [j.future for j in self.live.values() if j.future is not None]
        self.cancel_all()
        self.pool.shutdown(wait=False, cancel_futures=True)
        if running:
            futures_wait(running, timeout=wait)
