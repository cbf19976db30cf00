"""Reliability and security suite: shared fixtures, and the figures it measures (see figures.py).

Every test that injects a fault, tries a bad input, counts rows or drives the protocol fuzzer calls
``relkit.record(category, key=n)``; each process appends those counts to
``.results/records-<run>-<pid>.jsonl`` (``<run>`` is the xdist test-run id, so the workers of one run
add up). At session end each process, under a file lock, sums the records of its run into
``.results/figures.json`` and ``.results/FIGURES.md`` when every part of the suite contributed (a partial
run writes ``.results/figures-partial.json`` and ``.results/FIGURES-partial.md`` instead). ``.results/`` is
ignored by git: a test run never writes a tracked file. The tracked ``FIGURES.md`` is regenerated only on
request: ``python -m tests.reliability.figures``, or ``GPUEMU_WRITE_FIGURES=1`` for the run itself.
"""

from __future__ import annotations

import fcntl
from pathlib import Path
from typing import Any

import figures
import pytest
import relkit


def pytest_configure(config: pytest.Config) -> None:
    relkit.run_uid()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if not relkit.RESULTS.exists():
        return
    relkit.record("session", failed=int(session.testsfailed), collected=int(session.testscollected))
    with open(relkit.RESULTS / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        figures.finish_run(relkit.RESULTS, relkit.run_uid(), write_tracked=figures.wanted())


# --- fixtures ----------------------------------------------------------------------------------
@pytest.fixture
def cleanup_pids() -> Any:
    """A list a test appends pids it started to; whatever is left alive is killed afterwards (by pid)."""
    pids: list[int] = []
    yield pids
    relkit.kill_all([p for p in pids if relkit.alive(p)])


@pytest.fixture(scope="module")
def module_tmp(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Path:
    return tmp_path_factory.mktemp(request.module.__name__.replace("test_", ""))
