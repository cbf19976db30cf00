"""Reliability and security suite: shared fixtures, and the figures it measures (tests/reliability/FIGURES.md).

Every test that injects a fault, tries a bad input, counts rows or drives the protocol fuzzer calls
``relkit.record(category, key=n)``; each process appends those counts to
``.results/records-<run>-<pid>.jsonl`` (``<run>`` is the xdist test-run id, so the workers of one run
add up). At session end each process, under a file lock, sums the records of its run into
``.results/figures.json`` and ``FIGURES.md`` when every part of the suite contributed (a partial run
writes ``.results/figures-partial.json`` and ``.results/FIGURES-partial.md`` instead).
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from pathlib import Path
from typing import Any

import pytest
import relkit

FIGURES = relkit.HERE / "FIGURES.md"
#: The parts of the suite whose records make the figures complete.
REQUIRED = ("config", "ops", "limits", "security", "concurrency", "faults", "rows", "fuzz", "server")


def pytest_configure(config: pytest.Config) -> None:
    relkit.run_uid()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if not relkit.RESULTS.exists():
        return
    relkit.record("session", failed=int(session.testsfailed), collected=int(session.testscollected))
    uid = relkit.run_uid()
    with open(relkit.RESULTS / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        totals: dict[str, dict[str, int]] = {}
        tests: set[str] = set()
        for f in relkit.RESULTS.glob("records-*.jsonl"):
            if f.name.startswith(f"records-{uid}-"):
                for line in f.read_text(encoding="utf-8").splitlines():
                    rec = json.loads(line)
                    cat = rec.pop("cat")
                    if rec.get("test"):
                        tests.add(rec["test"])
                    rec.pop("test", None)
                    for k, v in rec.items():
                        have = totals.setdefault(cat, {}).get(k, 0)
                        # every xdist worker collects the whole suite: "collected" is a maximum, not a sum
                        totals[cat][k] = max(have, int(v)) if (cat, k) == ("session", "collected") else have + int(v)
            elif time.time() - f.stat().st_mtime > 3600:  # records of old runs
                f.unlink(missing_ok=True)
        complete = all(c in totals for c in REQUIRED)
        doc = {
            "run": uid,
            "finished_at": time.time(),
            "complete": complete,
            "totals": totals,
            "tests_recording": len(tests),
        }
        text = render_figures(totals)
        if complete and os.environ.get("GPUEMU_REL_NO_FIGURES") is None:
            (relkit.RESULTS / "figures.json").write_text(json.dumps(doc, indent=2, sort_keys=True), encoding="utf-8")
            FIGURES.write_text(text, encoding="utf-8")
        else:
            (relkit.RESULTS / "figures-partial.json").write_text(json.dumps(doc, indent=2, sort_keys=True))
            (relkit.RESULTS / "FIGURES-partial.md").write_text(text, encoding="utf-8")


def _g(totals: dict[str, dict[str, int]], cat: str, key: str) -> int:
    return int(totals.get(cat, {}).get(key, 0))


def render_figures(t: dict[str, dict[str, int]]) -> str:
    faults = t.get("faults", {})
    fault_words = {
        "worker_kill9": "kill -9 of a worker mid-case",
        "cli_kill9": "kill -9 of a CLI run (mid-case or mid-write)",
        "server_kill9": "kill -9 of the language server (mid-case or mid-write)",
        "writer_kill9": "kill -9 of a store writer mid-transaction",
        "full_disk": "full disk on write (RLIMIT_FSIZE or a tiny tmpfs)",
        "zygote_kill9": "kill -9 of the zygote",
        "corrupt_store": "a store file overwritten with garbage",
    }
    breakdown = ", ".join(f"{fault_words.get(k, k)}: {v}" for k, v in sorted(faults.items()))
    rows = [
        ("Bad-input cases tried: configuration, files and paths", _g(t, "config", "cases")),
        ("Bad-input cases tried: ops and references (raise, exit, abort, segfault, hang, ...)", _g(t, "ops", "cases")),
        ("Worker-limit cases (wall time, CPU time, RLIMIT_AS, process group)", _g(t, "limits", "cases")),
        ("Security cases (trust, paths, shell, permissions, reproductions)", _g(t, "security", "cases")),
        (
            "Concurrent writers on one store (server, CLI runs, Python API, raw writers)",
            _g(t, "concurrency", "writers"),
        ),
        (f"Faults injected ({breakdown})", sum(faults.values())),
        ("Store rows written and counted afterwards", _g(t, "rows", "written")),
        ("Rows lost", _g(t, "rows", "lost")),
        ('"database is locked" surfaced to a user', _g(t, "concurrency", "locked_errors")),
        ("Protocol fuzzing: steps sent to the server", _g(t, "fuzz", "steps")),
        ("Protocol fuzzing: hypothesis examples", _g(t, "fuzz", "examples")),
        ("Language servers started", _g(t, "server", "started")),
        ("Server crashes or restarts", _g(t, "server", "unexpected_exits")),
    ]
    lines = [
        "# Reliability figures",
        "",
        "Measured by `pytest tests/reliability` (written by tests/reliability/conftest.py; do not edit by hand).",
        "",
        "| figure | count |",
        "|---|---:|",
        *(f"| {name} | {value} |" for name, value in rows),
        "",
        f"Tests failed in the measuring run: {_g(t, 'session', 'failed')} "
        f"(of {_g(t, 'session', 'collected')} collected).",
        "",
    ]
    return "\n".join(lines)


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
