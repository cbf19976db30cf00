"""The reliability suite's figures: summed from the records of one run into ``.results/`` (ignored by git).

The tracked ``tests/reliability/FIGURES.md`` is written only on request, never by a plain test run:

* ``python -m tests.reliability.figures`` (from the repository root) renders it from the last complete run's
  ``.results/figures.json``;
* ``GPUEMU_WRITE_FIGURES=1 pytest tests/reliability`` writes it at the end of a complete run.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
RESULTS = HERE / ".results"
FIGURES = HERE / "FIGURES.md"
WRITE_ENV = "GPUEMU_WRITE_FIGURES"
#: The parts of the suite whose records make the figures complete.
REQUIRED = ("config", "ops", "limits", "security", "concurrency", "faults", "rows", "fuzz", "server")


def sum_records(results: Path, uid: str) -> tuple[dict[str, dict[str, int]], set[str]]:
    """Totals per category of run ``uid``'s records, and the tests that recorded; old runs' files are removed."""
    totals: dict[str, dict[str, int]] = {}
    tests: set[str] = set()
    for f in results.glob("records-*.jsonl"):
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
    return totals, tests


def finish_run(results: Path, uid: str, *, figures: Path = FIGURES, write_tracked: bool = False) -> Path:
    """Sum run ``uid`` into ``results``: ``figures.json`` and ``FIGURES.md`` when every part of the suite
    contributed, ``*-partial`` files otherwise. ``figures`` (the tracked file) is written only with
    ``write_tracked`` and a complete run. Returns the Markdown file written under ``results``."""
    totals, tests = sum_records(results, uid)
    complete = all(c in totals for c in REQUIRED)
    doc = {
        "run": uid,
        "finished_at": time.time(),
        "complete": complete,
        "totals": totals,
        "tests_recording": len(tests),
    }
    text = render_figures(totals)
    suffix = "" if complete else "-partial"
    (results / f"figures{suffix}.json").write_text(json.dumps(doc, indent=2, sort_keys=True), encoding="utf-8")
    written = results / f"FIGURES{suffix}.md"
    written.write_text(text, encoding="utf-8")
    if complete and write_tracked:
        figures.write_text(text, encoding="utf-8")
    return written


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
        "Measured by `pytest tests/reliability`, written by `python -m tests.reliability.figures` "
        "(tests/reliability/figures.py; do not edit by hand).",
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


def write_tracked(results: Path = RESULTS, figures: Path = FIGURES) -> str:
    """Render ``figures`` from the last complete run under ``results``; raises LookupError when there is none."""
    try:
        doc: dict[str, Any] = json.loads((results / "figures.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        doc = {}
    if not doc.get("complete"):
        raise LookupError(
            f"no complete run recorded in {results / 'figures.json'}: run `pytest tests/reliability` first"
        )
    text = render_figures(doc["totals"])
    figures.write_text(text, encoding="utf-8")
    return text


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m tests.reliability.figures``: rewrite FIGURES.md from the last complete run."""
    del argv
    try:
        write_tracked(RESULTS, FIGURES)
    except LookupError as exc:
        print(f"figures: {exc}", file=sys.stderr)
        return 1
    print(f"wrote {FIGURES}")
    return 0


def wanted() -> bool:
    """Whether this run should also write the tracked FIGURES.md (``GPUEMU_WRITE_FIGURES=1``)."""
    return os.environ.get(WRITE_ENV) == "1"


if __name__ == "__main__":
    sys.exit(main())
