"""Work-done progress and the log of runs: each validation or lint job's progress, and, when a job ends, its
line in the server's log and its run's progress (the run's own line when it was the last job)."""

from __future__ import annotations

from typing import Any

from lsprotocol import types as lsp

from ..session.jobs import Job
from . import Server


def run_ended(ls: Server, job: Job, kind: str, event: dict[str, Any]) -> None:
    """The log line of an op or kernel that ended, and of its run when it was the last; the run's progress."""
    result = event.get("result")
    line, batch, over = ls.runlog.finish(job, kind, result)
    outcome = result.outcomes[0] if job.kind == "validate" and getattr(result, "outcomes", None) else None
    detail = "\n".join(t for t in (getattr(outcome, "message", ""), getattr(outcome, "diagnosis", "")) if t)
    ls.log_line(line, verbose=detail or None)
    if batch is None:
        return
    if batch.token is not None and not over:
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
    """The work-done progress of one validation or lint job: begun when it starts, reported as its cases end,
    ended with how it ended."""
    token = ls.tokens.get(job.id)
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
