"""Runs as the server's log and status texts tell them: a run is the set of jobs one event started (a save,
opening the workspace, a run request), so the log has a line when it starts, one per op or kernel as it
ends (verdict, cases, seconds), and one when the last ends; and status texts say what they count
("running 3 of 18 ops"), never a bare number."""

from __future__ import annotations

import itertools
import threading
import time
from dataclasses import dataclass, field
from typing import Any

_ids = itertools.count(1)
VERDICT = {"passed": "PASS", "failed": "FAIL", "error": "ERROR", "not_run": "NOT RUN", "cancelled": "CANCELLED"}


@dataclass
class Batch:
    """One run: the jobs one event started."""

    reason: str
    mode: str
    root: str
    job_ids: set[int]
    ops: int
    kernels: int
    id: int = field(default_factory=lambda: next(_ids))
    started: float = field(default_factory=time.monotonic)
    finished: int = 0
    verdicts: dict[str, int] = field(default_factory=dict)
    token: str | None = None  # its work-done progress, when it has one
    reported_at: float = float("-inf")  # when its progress was last reported (monotonic)

    @property
    def total(self) -> int:
        return self.ops + self.kernels

    def what(self) -> str:
        parts = []
        if self.ops:
            parts.append(f"{self.ops} op{'s' if self.ops != 1 else ''}")
        if self.kernels:
            parts.append(f"{self.kernels} kernel{'s' if self.kernels != 1 else ''}")
        return " and ".join(parts) or "nothing"

    def status(self) -> str:
        """What is running, counted: "running 3 of 18 ops, 1 failed so far"."""
        noun = "ops" if not self.kernels else ("kernels" if not self.ops else "ops and kernels")
        text = f"running {min(self.finished + 1, self.total)} of {self.total} {noun}"
        bad = self.total_not_passed()
        return text + (f", {bad} not passed so far" if bad else "")

    def total_not_passed(self) -> int:
        return sum(n for v, n in self.verdicts.items() if v != "passed")

    def summary(self) -> str:
        counts = ", ".join(f"{n} {v.replace('_', ' ')}" for v, n in sorted(self.verdicts.items())) or "nothing ran"
        return f"{self.what()} in {time.monotonic() - self.started:.1f} s: {counts}"


class RunLog:
    """Which run each job belongs to, and the lines and status texts to send for it."""

    def __init__(self) -> None:
        self.by_job: dict[int, Batch] = {}
        self.lock = threading.Lock()

    def start(self, jobs: list[Any], reason: str, mode: str, root: str) -> Batch | None:
        """Record a run of ``jobs`` (validate and lint jobs); None when there are none."""
        if not jobs:
            return None
        ops = sum(1 for j in jobs if j.kind == "validate")
        batch = Batch(reason, mode, root, {j.id for j in jobs}, ops, len(jobs) - ops)
        with self.lock:
            for j in jobs:
                self.by_job[j.id] = batch
        return batch

    def batch_of(self, job_id: int) -> Batch | None:
        """The run a job belongs to, while it has not ended."""
        with self.lock:
            return self.by_job.get(job_id)

    def start_line(self, batch: Batch) -> str:
        mode = f"{batch.mode}, " if batch.ops else ""
        return f"run {batch.id} started: {batch.what()} ({mode}{batch.reason}) in {batch.root}"

    def finish(self, job: Any, kind: str, result: Any) -> tuple[str, Batch | None, bool]:
        """(the job's log line, its run, whether that run is now over) for a job that ended as ``kind``
        (finished, cancelled, failed)."""
        verdict, cases, seconds = _verdict(job, kind, result)
        what = "op" if job.kind == "validate" else "kernel"
        line = f"{VERDICT.get(verdict, verdict.upper())} {what} {job.name}: {cases} ({seconds:.2f} s)"
        with self.lock:
            batch = self.by_job.pop(job.id, None)
            if batch is None:
                return line, None, False
            batch.finished += 1
            batch.verdicts[verdict] = batch.verdicts.get(verdict, 0) + 1
            over = batch.finished >= batch.total
        return f"run {batch.id}: {line}", batch, over

    def end_line(self, batch: Batch) -> str:
        return f"run {batch.id} finished: {batch.summary()}"


def _verdict(job: Any, kind: str, result: Any) -> tuple[str, str, float]:
    """(verdict, cases in words, seconds) of an ended job."""
    if kind == "cancelled":
        return "cancelled", f"{job.done} of {job.total} cases before it was stopped", 0.0
    if kind == "failed":
        return "error", "internal error", 0.0
    if job.kind == "validate":
        outcomes = getattr(result, "outcomes", None) or []
        if not outcomes:
            return "not_run", "nothing ran", 0.0
        o = outcomes[0]
        passed = o.count("passed")
        text = f"{passed}/{len(o.cases)} cases passed"
        if len(o.cases) - passed:
            text += f", {len(o.cases) - passed} not"
        return o.status, text, float(o.elapsed or 0.0)
    entries = result or []
    if not entries:
        return "not_run", "nothing linted", 0.0
    e = entries[0]
    return e.get("status", "error"), str(e.get("summary") or e.get("message") or ""), float(e.get("elapsed") or 0.0)
