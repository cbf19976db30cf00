"""Store reads that cost what they return (issue 31 item 1): on a generated, ANALYZEd store of many runs and
ops, the reads the faces make use an index for what they select, and an old store gains the indexes on its
next open for writing. Checked with EXPLAIN QUERY PLAN, not with timings."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from gpuemu_ls.engine.store.db import READ_INDEXES, Store
from gpuemu_ls.session.workspace import MINIMIZE_RUNS, minimized_cases_sql

RUNS, OPS, CASES = 6, 120, 20


def generate(path: Path) -> None:
    """A store of RUNS thorough runs of OPS ops with CASES cases each, a few failing, then ANALYZEd."""
    Store(path).close()
    conn = sqlite3.connect(path)
    with conn:
        for r in range(RUNS):
            run = f"run{r:03d}"
            conn.execute(
                "INSERT INTO runs (id, started_at, finished_at, source, mode, status) VALUES (?, ?, ?, 'cli',"
                " 'thorough', 'finished')",
                (run, 1000.0 + r, 1001.0 + r),
            )
            conn.executemany(
                "INSERT INTO op_results (run_id, op, kind, status, finished_at) VALUES (?, ?, 'op', ?, ?)",
                [(run, f"op{o:04d}", "failed" if o % 20 == 0 else "passed", 1000.0 + r + o / 1e4) for o in range(OPS)],
            )
            conn.executemany(
                "INSERT INTO cases (run_id, op, seed, status, created_at) VALUES (?, ?, ?, ?, ?)",
                [
                    (run, f"op{o:04d}", s, "failed" if o % 20 == 0 and s % 3 == 0 else "passed", 1000.0 + r)
                    for o in range(OPS)
                    for s in range(CASES)
                ],
            )
        conn.execute("ANALYZE")
    conn.close()


def plan(store: Store, sql: str, params: tuple | dict = ()) -> str:
    return " | ".join(r[-1] for r in store.db.execute(f"EXPLAIN QUERY PLAN {sql}", params).fetchall())


@pytest.fixture
def store(tmp_path: Path) -> Store:
    path = tmp_path / "gpuemu.db"
    generate(path)
    s = Store(path, readonly=True)
    yield s
    s.close()


def test_the_failures_of_one_op_of_a_run_read_only_that_op(store: Store) -> None:
    """`gpuemu failures` reads each op's non-passing cases of its latest run: an index on (run_id, op), in rowid
    order, so neither a scan of the run's other ops' cases nor a sort (74 s at 1,000 ops before)."""
    text = plan(
        store,
        "SELECT * FROM cases WHERE run_id = :run_id AND op = :op AND status != 'passed' ORDER BY id",
        {"run_id": "run003", "op": "op0040"},
    )
    assert "idx_cases_run_id_op" in text and "(run_id=? AND op=?)" in text, text
    assert "TEMP B-TREE" not in text, text
    rows = store.cases(run_id="run003", op="op0040", not_passed=True)
    assert [r["seed"] for r in rows] == [s for s in range(CASES) if s % 3 == 0]


def test_the_latest_result_per_op_is_read_without_loading_the_history(store: Store) -> None:
    text = plan(
        store,
        "SELECT *, max(finished_at) AS _latest FROM op_results WHERE kind = :kind GROUP BY kind, op",
        {"kind": "op"},
    )
    assert "idx_op_results_kind_op_finished_at" in text and "TEMP B-TREE" not in text, text
    latest = store.latest_op_results(kind="op")
    assert len(latest) == OPS and {r["run_id"] for r in latest.values()} == {f"run{RUNS - 1:03d}"}
    assert "_latest" not in latest["op0000"]
    both = store.latest_op_results()
    assert set(both) == {f"op:op{o:04d}" for o in range(OPS)}


def test_the_servers_refresh_reads_minimized_cases_through_the_run_index(store: Store, tmp_path: Path) -> None:
    """Each refresh of the language server's views reads the minimize runs' cases: by run, never a scan of every
    case stored (the join it replaced did one at each run's end while 1,000 ops validated)."""
    assert store.query(MINIMIZE_RUNS) == []  # no minimize run: nothing more is read
    text = plan(store, minimized_cases_sql(2), ("run001", "run004"))
    assert "SCAN cases" not in text and "idx_cases_run_id" in text, text
    with sqlite3.connect(tmp_path / "gpuemu.db") as conn:
        conn.execute(
            "INSERT INTO runs (id, started_at, finished_at, source, mode, status) VALUES ('m1', 1, 2, 'minimize',"
            " 'quick', 'finished')"
        )
        conn.execute(
            "INSERT INTO cases (run_id, op, seed, status, created_at, kind) VALUES ('m1', 'op0040', 7, 'failed', 2,"
            " 'mismatch')"
        )
    runs = [r["id"] for r in store.query(MINIMIZE_RUNS)]
    assert runs == ["m1"]
    assert [(r["op"], r["seed"]) for r in store.query(minimized_cases_sql(1), tuple(runs))] == [("op0040", 7)]


def test_latest_failures_are_the_latest_runs_own(store: Store) -> None:
    rows = store.latest_failures()
    assert {r["run_id"] for r in rows} == {f"run{RUNS - 1:03d}"}
    assert len(rows) == (OPS // 20) * len(range(0, CASES, 3))


def test_an_old_store_read_only_says_it_is_slow_and_gains_the_indexes_on_its_next_write(tmp_path: Path) -> None:
    path = tmp_path / "gpuemu.db"
    generate(path)
    conn = sqlite3.connect(path)
    with conn:
        for name, _, _ in READ_INDEXES:
            conn.execute(f"DROP INDEX [{name}]")
    conn.close()
    reader = Store(path, readonly=True)  # a reader never writes: still answers, by a scan, and says it is slow
    assert len(reader.latest_op_results(kind="op")) == OPS
    assert any("slow on it until a gpuemu run writes it" in n for n in reader.notes), reader.notes
    reader.close()
    Store(path).close()
    again = Store(path, readonly=True)  # migrated: nothing to say
    assert not again.notes, again.notes
    again.close()
    conn = sqlite3.connect(path)
    names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
    conn.close()
    assert {name for name, _, _ in READ_INDEXES} <= names
