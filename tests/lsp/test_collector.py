"""Garbage collection while the server's jobs run (issue 31, benchmark 15): what survives a full collection is
frozen while any job is live, so later full collections never scan it again; when the last job ends,
everything is unfrozen and the cycles that died frozen are reclaimed. Real JobRunner threads and real gc."""

from __future__ import annotations

import gc
import threading
import weakref
from pathlib import Path
from typing import Any

from gpuemu_ls.session.jobs import JobRunner
from gpuemu_ls.session.workspace import WorkspaceSession


class Node:
    def __init__(self) -> None:
        self.me = self  # a cycle: only the collector frees it


def test_full_collections_skip_what_survived_while_jobs_run_and_cycles_are_freed_after(tmp_path: Path) -> None:
    runner = JobRunner(lambda event: None)
    release = threading.Event()
    seen: dict[str, Any] = {}

    def work(job: object) -> None:
        kept = [Node() for _ in range(2000)]  # long-lived while the job runs
        gc.collect()
        first = kept[0]
        seen["frozen"] = gc.get_freeze_count()
        seen["scanned_again"] = any(o is first for o in gc.get_objects())  # generations 0-2: what a collection scans
        seen["ref"] = weakref.ref(first)
        del kept, first  # the cycles die frozen: no collection can free them yet
        gc.collect()
        seen["alive_while_frozen"] = seen["ref"]() is not None
        release.wait(30)

    try:
        job = runner.task(WorkspaceSession(tmp_path), "hold", work)
        while "alive_while_frozen" not in seen:
            threading.Event().wait(0.01)
        assert seen["frozen"] >= 2000 and not seen["scanned_again"], seen
        assert seen["alive_while_frozen"], seen
        release.set()
        assert job.future is not None
        job.future.result(timeout=30)
        for _ in range(200):  # the last job ended: unfrozen, and the dead cycles collected
            if seen["ref"]() is None:
                break
            threading.Event().wait(0.05)
        assert seen["ref"]() is None, "cycles that died frozen were never reclaimed"
        assert gc.get_freeze_count() == 0
    finally:
        runner.shutdown()
        gc.unfreeze()


def test_what_lives_when_a_run_starts_is_frozen_before_any_collection(tmp_path: Path) -> None:
    """The first full collection of a run must not scan everything the server held before it (60-100 ms)."""
    runner = JobRunner(lambda event: None)
    before = [Node() for _ in range(500)]
    seen: dict[str, Any] = {}

    def work(job: object) -> None:
        seen["frozen"] = gc.get_freeze_count()
        seen["scanned"] = any(o is before[0] for o in gc.get_objects())

    try:
        gc.collect()
        gc.disable()  # no collection may run between the job's start and its look
        job = runner.task(WorkspaceSession(tmp_path), "look", work)
        assert job.future is not None
        job.future.result(timeout=30)
        assert seen["frozen"] >= 500 and not seen["scanned"], seen
    finally:
        gc.enable()
        runner.shutdown()
        gc.unfreeze()
