"""Work-done progress and the log of runs: each validation or lint job's progress in a small run, and, when a
job ends, its line in the server's log and its run's progress (the run's own line when it was the last job).

A run of more than :data:`OWN_PROGRESS_MAX` jobs has one progress, reported at most every
:data:`REPORT_INTERVAL`: a progress of each of its 1,000 jobs (create, begin, reports, end) was most of what the
server sent while they validated, and every message is one more the editor parses before it answers the user
(benchmark 15).
"""

from __future__ import annotations

import time
from typing import Any

from lsprotocol import types as lsp

from ..session.jobs import Job
from . import Server

#: Seconds between two reports of a run's progress (the first and its end are always sent).
REPORT_INTERVAL = 0.25
#: Jobs a run may have for each to show a progress of its own (a save of a file with a few ops).
OWN_PROGRESS_MAX = 8


def run_ended(ls: Server, job: Job, kind: str, event: dict[str, Any]) -> None:
    """The log line of an op or kernel that ended, and of its run when it was the last; the run's progress."""
    result = event.get("result")
    line, batch, over = ls.runlog.finish(job, kind, result)
    outcome = result.outcomes[0] if job.kind == "validate" and getattr(result, "outcomes", None) else None
    detail = "\n".join(t for t in (getattr(outcome, "message", ""), getattr(outcome, "diagnosis", "")) if t)
    ls.log_line(line, verbose=detail or None)
    if batch is None:
        return
    if batch.token is not None and not over and time.monotonic() - batch.reported_at >= REPORT_INTERVAL:
        batch.reported_at = time.monotonic()
        ls.work_done_progress.report(
            batch.token,
            lsp.WorkDoneProgressReport(
                message=batch.status(), percentage=int(100 * batch.finished / batch.total), cancellable=True
            ),
        )
    if over:
        ls.log_line(ls.runlog.end_line(batch))
        if batch.token is not None:
            ls.work_done_progress.end(batch.token, lsp.WorkDoneProgressEnd(message=batch.summary()))
            ls.batch_jobs.pop(batch.token, None)


def job_progress(ls: Server, job: Job, kind: str, event: dict[str, Any]) -> None:
    """The work-done progress of one validation or lint job, unless its run is big and counts it in its own:
    begun when it starts, reported as its cases end, ended with how it ended."""
    token = ls.tokens.get(job.id)
    batch = ls.runlog.batch_of(job.id) if kind == "started" else None
    if batch is not None and batch.token is not None and batch.total > OWN_PROGRESS_MAX:
        return
    if kind == "started" and job.kind in ("validate", "lint") and ls.supports("window", "work_done_progress"):
        token = f"gpuemu-{job.id}"
        ls.tokens[job.id] = token
        ls.token_jobs[token] = job
        ls.work_done_progress.create(token)
        what = "Validating" if job.kind == "validate" else "Linting"
        ls.work_done_progress.begin(
            token,
            lsp.WorkDoneProgressBegin(
                title=f"gpuemu: {what} {job.name}",
                cancellable=True,
                percentage=0,
                message=f"{job.mode} ({job.reason})" if job.kind == "validate" else job.reason,
            ),
        )
    elif kind == "progress" and token:
        pct = int(100 * job.done / job.total) if job.total else None
        ls.work_done_progress.report(
            token,
            lsp.WorkDoneProgressReport(
                message=f"{job.done} of {job.total} cases, {job.failed} not passed",
                percentage=pct,
                cancellable=True,
            ),
        )
    elif kind in ("finished", "cancelled", "failed") and token:
        done = {
            "finished": "done",
            "cancelled": "cancelled (superseded or stopped)",
            "failed": f"internal error: {event.get('error')}",
        }[kind]
        ls.work_done_progress.end(token, lsp.WorkDoneProgressEnd(message=done))
        ls.tokens.pop(job.id, None)
        ls.token_jobs.pop(token, None)
