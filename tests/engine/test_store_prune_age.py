"""Retention's age rule (issue 31): the failing cases of a pruned run stay, with their input snapshots, for
`[store] keep_failures_days` (default 90) after the run started, so `reproduce` still replays them byte for
byte; older ones go, and `reproduce` of such a seed says it was pruned instead of quietly regenerating it."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

import numpy as np
from kit.cli import gpuemu, out
from test_store_prune import OPS, rows

from gpuemu_ls.engine.store.db import Store, encode_arrays
from gpuemu_ls.engine.store.prune import DAY, prune, pruned_seed, retain

NOW = 2_000_000_000.0
AGES = [120, 100, 60, 10, 2, 1]  # days before NOW at which r0..r5 started


def generate(path: Path) -> None:
    """Runs r0..r5 (cli, quick), each with a passing case (seed 0) and a failing one (seed 10 + r) with a
    snapshot of its own; every op's latest result is r5's."""
    Store(path).close()
    conn = sqlite3.connect(path)
    with conn:
        for r, age in enumerate(AGES):
            started = NOW - age * DAY
            conn.execute(
                "INSERT INTO runs (id, started_at, source, mode, status) VALUES (?, ?, 'cli', 'quick', 'failed')",
                (f"r{r}", started),
            )
            conn.execute(
                "INSERT INTO op_results (run_id, op, kind, status, finished_at) VALUES (?, 'a', 'op', 'failed', ?)",
                (f"r{r}", started),
            )
            conn.execute(
                "INSERT INTO snapshots (id, op, seed, data, created_at) VALUES (?, 'a', ?, ?, ?)",
                (f"s{r}", 10 + r, encode_arrays({"x": np.full(500, r, np.float32)}), started),
            )
            conn.executemany(
                "INSERT INTO cases (run_id, op, seed, status, snapshot_id, created_at) VALUES (?, 'a', ?, ?, ?, ?)",
                [(f"r{r}", 0, "passed", None, started), (f"r{r}", 10 + r, "failed", f"s{r}", started)],
            )
    conn.close()


def test_failing_cases_of_pruned_runs_stay_until_they_are_keep_failures_days_old(tmp_path: Path) -> None:
    path = tmp_path / "gpuemu.db"
    generate(path)
    dry = prune(path, keep_runs=2, dry_run=True, now=NOW)
    done = prune(path, keep_runs=2, now=NOW)
    assert done.runs == dry.runs == ["r0", "r1", "r2", "r3"]
    # r0, r1 (100+ days) go whole; r2, r3 keep their failing case and its snapshot, lose the passing one
    counts = (done.op_results, done.cases, done.snapshots, done.kept_failures)
    assert counts == (dry.op_results, dry.cases, dry.snapshots, dry.kept_failures) == (4, 6, 2, 2), done
    assert sorted(r[0] for r in rows(path, "SELECT id FROM runs")) == ["r4", "r5"]
    assert sorted(rows(path, "SELECT run_id, seed FROM cases WHERE run_id IN ('r2', 'r3')")) == [("r2", 12), ("r3", 13)]
    assert sorted(r[0] for r in rows(path, "SELECT id FROM snapshots")) == ["s2", "s3", "s4", "s5"]
    store = Store(path, readonly=True)
    kept = store.load_snapshot(store.find_case("a", 13)["snapshot_id"])
    assert kept is not None and kept["x"][0] == 3  # replayable as stored
    assert pruned_seed(store, "a", 10) is not None and pruned_seed(store, "a", 13) is None
    store.close()
    # 50 days later r2's failing case is 110 days old and goes with its snapshot; r3's (60 days) stays
    later = prune(path, keep_runs=2, dry_run=True, now=NOW + 50 * DAY)
    assert later.runs == [] and later.aged_out_runs == ["r2"] and (later.cases, later.snapshots) == (1, 1)
    assert prune(path, keep_runs=2, now=NOW + 50 * DAY).aged_out_runs == ["r2"]
    assert rows(path, "SELECT run_id FROM cases WHERE run_id IN ('r2', 'r3')") == [("r3",)]
    assert sorted(r[0] for r in rows(path, "SELECT id FROM snapshots")) == ["s3", "s4", "s5"]


def test_retention_after_a_run_ages_out_kept_failures_even_with_keep_runs_all(tmp_path: Path) -> None:
    """0 days: a removed run's failing cases go with it; "all" (None) keeps them; keep_runs "all" (None) still
    lets kept failures age out."""
    path = tmp_path / "gpuemu.db"
    generate(path)
    store = Store(path)
    try:
        assert retain(store, 4, "cli", None, now=NOW) == ["r0", "r1"]
        assert rows(path, "SELECT count(*) FROM cases WHERE run_id IN ('r0', 'r1')") == [(2,)]  # kept forever
        assert retain(store, None, "cli", 90, now=NOW) == []  # no run goes; the kept failures aged out
        assert rows(path, "SELECT count(*) FROM cases WHERE run_id IN ('r0', 'r1')") == [(0,)]
        assert retain(store, 2, "cli", 0, now=NOW) == ["r2", "r3"]
        assert rows(path, "SELECT count(*) FROM cases WHERE run_id IN ('r2', 'r3')") == [(0,)]
    finally:
        store.close()


def test_reproduce_replays_a_10_day_old_pruned_failure_and_refuses_a_100_day_old_one(tmp_path: Path) -> None:
    """A real fuzz run's cases split into two runs that started 100 and 10 days ago, then `store prune
    --keep-runs 1`: the 10-day-old failing case replays from its stored snapshot; the 100-day-old one says it
    was pruned (exit 2) and replays with --regenerate."""
    from kit.ops import op_toml, project_toml
    from kit.workspace import write_files

    from gpuemu_ls.engine.config.load import load_config
    from gpuemu_ls.engine.errors import ConfigError

    toml = project_toml(validation={"dtypes": ["float32"]}) + op_toml(
        "scale", module="ops:scale", reference="ops:ref", dims={"B": (1, 8, 4), "N": (1, 64, 32)}
    )
    ws = write_files(tmp_path / "ws", {"gpuemu.toml": toml, "ops.py": OPS})
    assert gpuemu("fuzz", "--op", "scale", "--seed", "1", "--iterations", "6", cwd=ws).returncode == 1
    db = ws / ".gpuemu" / "gpuemu.db"
    failing = {}
    conn = sqlite3.connect(db)
    with conn:
        for run, age, seeds in (("old", 100, (1, 2, 3)), ("young", 10, (4, 5, 6))):
            conn.execute(
                "INSERT INTO runs (id, started_at, source, mode, status) VALUES (?, ?, 'cli', 'fuzz', 'failed')",
                (run, time.time() - age * DAY),
            )
            conn.execute(f"UPDATE cases SET run_id = ? WHERE seed IN {seeds}", (run,))
            found = conn.execute("SELECT min(seed) FROM cases WHERE run_id = ? AND status = 'failed'", (run,))
            failing[age] = found.fetchone()[0]
    conn.close()
    done = gpuemu("store", "prune", "--keep-runs", "1", cwd=ws)
    assert done.returncode == 0 and "removed 2 runs" in done.stdout and "1 failing case" in done.stdout, out(done)
    young = gpuemu("reproduce", "--op", "scale", "--seed", str(failing[10]), "--format", "json", cwd=ws)
    assert young.returncode == 1 and json.loads(young.stdout)["source"].startswith("stored snapshot"), out(young)
    old = gpuemu("reproduce", "--op", "scale", "--seed", str(failing[100]), cwd=ws)
    assert old.returncode == 2 and "pruned; use --regenerate" in old.stderr, out(old)
    again = gpuemu("reproduce", "--op", "scale", "--seed", str(failing[100]), "--regenerate", cwd=ws)
    assert again.returncode == 1, out(again)
    for value, ok in (("30", True), ('"all"', True), ('"soon"', False), ("-1", False)):
        text = toml + f"\n[store]\nkeep_failures_days = {value}\n"
        try:
            days = load_config(ws, text=text).store.keep_failures_days
            assert ok and days == (None if value == '"all"' else 30.0)
        except ConfigError as exc:
            assert not ok and "keep_failures_days" in str(exc)
