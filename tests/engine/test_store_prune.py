"""`gpuemu store prune` (issue 31, retention): the last K runs of each mode stay, and so does every run that
holds an op's latest result; the rest goes with its op results, cases and the snapshots nothing else refers
to, and the file shrinks. A dry run removes nothing. End to end: real gate runs, then `failures` still shows
the latest state and a pruned failing seed still replays."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from kit.cli import gpuemu, out
from kit.ops import op_toml, project_toml
from kit.workspace import write_files

from gpuemu_ls.engine.errors import UsageError
from gpuemu_ls.engine.store.db import Store
from gpuemu_ls.engine.store.prune import prune


def generate(path: Path) -> None:
    """Runs r000..r009, alternating quick/thorough, after a minimize run m000; op 'old' last ran in r000 (an --op
    run); each run has two cases per op with a snapshot each, and r008's second case shares r001's snapshot."""
    Store(path).close()
    conn = sqlite3.connect(path)
    blob = b"x" * 20_000
    with conn:
        # the oldest run of all: a minimized case (`gpuemu minimize`), which is the user's and never pruned
        conn.execute(
            "INSERT INTO runs (id, started_at, source, mode, status) VALUES ('m000', 999, 'cli', 'minimize', 'failed')"
        )
        for r in range(10):
            run, mode = f"r{r:03d}", "quick" if r % 2 else "thorough"
            conn.execute(
                "INSERT INTO runs (id, started_at, source, mode, status) VALUES (?, ?, 'cli', ?, 'finished')",
                (run, 1000.0 + r, mode),
            )
            for op in ["new"] + (["old"] if r == 0 else []):
                conn.execute(
                    "INSERT INTO op_results (run_id, op, kind, status, finished_at) VALUES (?, ?, 'op', 'failed', ?)",
                    (run, op, 1000.0 + r),
                )
                for seed in range(2):
                    snap = "s001-new-0" if (r, seed) == (8, 1) and op == "new" else f"s{r:03d}-{op}-{seed}"
                    if (r, seed) != (8, 1) or op != "new":
                        conn.execute(
                            "INSERT INTO snapshots (id, op, seed, data, created_at) VALUES (?, ?, ?, ?, 0)",
                            (snap, op, seed, blob + snap.encode()),
                        )
                    conn.execute(
                        "INSERT INTO cases (run_id, op, seed, status, snapshot_id, created_at)"
                        " VALUES (?, ?, ?, 'failed', ?, 0)",
                        (run, op, seed, snap),
                    )
    conn.close()


def rows(path: Path, sql: str) -> list[tuple]:
    conn = sqlite3.connect(path)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


def test_prune_keeps_the_last_runs_of_each_mode_and_every_latest_result(tmp_path: Path) -> None:
    path = tmp_path / "gpuemu.db"
    generate(path)
    before = {r[0] for r in rows(path, "SELECT id FROM snapshots")}
    dry = prune(path, keep_runs=2, dry_run=True)
    assert dry.runs == ["r001", "r002", "r003", "r004", "r005"]  # oldest first; r000 holds op 'old'
    assert (dry.op_results, dry.cases, dry.snapshots) == (5, 10, 9)  # s001-new-0 is still r008's
    assert {r[0] for r in rows(path, "SELECT id FROM snapshots")} == before  # a dry run removes nothing

    done = prune(path, keep_runs=2)
    assert done.runs == dry.runs and (done.op_results, done.cases, done.snapshots) == (5, 10, 9)
    kept = ["m000", "r000", "r006", "r007", "r008", "r009"]
    assert sorted(r[0] for r in rows(path, "SELECT id FROM runs")) == kept
    assert rows(path, "SELECT count(*) FROM cases WHERE run_id IN ('r001','r002','r003','r004','r005')") == [(0,)]
    snaps = {r[0] for r in rows(path, "SELECT id FROM snapshots")}
    assert "s001-new-0" in snaps and "s001-new-1" not in snaps and "s000-old-0" in snaps
    referenced = {r[0] for r in rows(path, "SELECT snapshot_id FROM cases")}
    assert referenced <= snaps
    assert done.vacuumed and done.size_after < done.size_before, done
    latest = Store(path, readonly=True).latest_op_results(kind="op")
    assert {op: r["run_id"] for op, r in latest.items()} == {"new": "r009", "old": "r000"}
    again = prune(path, keep_runs=2)
    assert again.runs == [] and again.kept_runs == 6


def test_prune_of_a_missing_store_creates_nothing(tmp_path: Path) -> None:
    done = prune(tmp_path / "none.db")
    assert done.runs == [] and not (tmp_path / "none.db").exists() and done.notes


OPS = """
import numpy as np


def scale(x):
    y = (2 * np.asarray(x, dtype=np.float32)).astype(x.dtype)
    if x.shape[-1] % 16:
        y[..., -1] += 1  # the last column of a partial tile is wrong
    return y


def ref(x):
    return 2.0 * x
"""


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    toml = project_toml(validation={"dtypes": ["float32"]}) + op_toml(
        "scale", module="ops:scale", reference="ops:ref", dims={"B": (1, 8, 4), "N": (1, 64, 32)}
    )
    return write_files(tmp_path / "ws", {"gpuemu.toml": toml, "ops.py": OPS})


def test_prune_end_to_end_keeps_pinned_and_baseline_runs(ws: Path) -> None:
    """Real runs, then prune: the latest state is untouched and a pruned failing seed still replays. Retention
    (issue 31): `baseline store` records and pins the runs it was taken from, `store pin RUN` (a prefix will do)
    keeps any run, `store runs` says which are pinned and why, and `store unpin` hands a run back."""
    assert gpuemu("test", "--quick", "--seed", "1", cwd=ws).returncode == 1
    stored = gpuemu("baseline", "store", "nightly", cwd=ws)
    assert stored.returncode == 0 and "pinned 1 stored run" in stored.stdout, out(stored)
    for seed in (2, 3):
        assert gpuemu("test", "--quick", "--seed", str(seed), cwd=ws).returncode == 1
    runs = json.loads(gpuemu("store", "runs", "--format", "json", cwd=ws).stdout)["runs"]
    middle, first = runs[1]["id"], runs[2]["id"]
    assert json.loads(gpuemu("baseline", "show", "nightly", cwd=ws).stdout)["runs"] == [first]
    failures = gpuemu("failures", cwd=ws).stdout
    pinned = gpuemu("store", "pin", middle[:8], "--reason", "bisect", cwd=ws)
    assert pinned.returncode == 0 and f"pinned run {middle[:12]}" in pinned.stdout, out(pinned)
    listed = gpuemu("store", "runs", cwd=ws).stdout
    assert "[pinned: bisect]" in listed and "[pinned: baseline nightly]" in listed, listed
    dry = gpuemu("store", "prune", "--keep-runs", "1", "--dry-run", cwd=ws)
    assert dry.returncode == 0 and "would remove 0 runs" in dry.stdout, out(dry)
    assert "unpinned" in gpuemu("store", "unpin", middle[:8], cwd=ws).stdout
    dry = gpuemu("store", "prune", "--keep-runs", "1", "--dry-run", cwd=ws)
    assert dry.returncode == 0 and "would remove 1 run (" in dry.stdout, out(dry)
    done = gpuemu("store", "prune", "--keep-runs", "1", "--format", "json", cwd=ws)
    assert done.returncode == 0 and json.loads(done.stdout)["runs"] == [middle], out(done)
    assert gpuemu("failures", cwd=ws).stdout == failures  # the latest state is untouched
    assert gpuemu("store", "check", cwd=ws).returncode == 0
    # a failing seed of a pruned run still replays: regenerated from (op, seed)
    replay = gpuemu("reproduce", "--op", "scale", "--seed", "2", cwd=ws)
    assert replay.returncode == 1 and "scale" in replay.stdout, out(replay)
    for args, says in (
        (["store", "prune", "--keep-runs", "0"], "--keep-runs"),
        (["store", "pin"], "needs a run id"),
        (["store", "pin", "ffff0000"], "no stored run"),
    ):
        bad = gpuemu(*args, cwd=ws)
        assert bad.returncode == 2 and says in bad.stderr, out(bad)


def test_keep_runs_applies_after_every_run(ws: Path) -> None:
    """`[store] keep_runs = 2`: the store never holds more than 2 runs of a mode (the latest result of every op
    kept); "all" keeps everything; `store prune` keeps what the workspace says unless --keep-runs; a value that
    is neither a count nor "all" is a configuration error."""
    toml = (ws / "gpuemu.toml").read_text()
    (ws / "gpuemu.toml").write_text(toml + "\n[store]\nkeep_runs = 2\n")
    for seed in range(1, 5):
        assert gpuemu("test", "--quick", "--seed", str(seed), cwd=ws).returncode == 1
    runs = json.loads(gpuemu("store", "runs", "--format", "json", cwd=ws).stdout)["runs"]
    assert len(runs) == 2, runs
    assert "FAIL scale" in gpuemu("failures", cwd=ws).stdout
    (ws / "gpuemu.toml").write_text(toml + '\n[store]\nkeep_runs = "all"\n')
    for seed in range(5, 8):
        assert gpuemu("test", "--quick", "--seed", str(seed), cwd=ws).returncode == 1
    assert len(json.loads(gpuemu("store", "runs", "--format", "json", cwd=ws).stdout)["runs"]) == 5
    assert "would remove 0 runs" in gpuemu("store", "prune", "--dry-run", cwd=ws).stdout  # "all": every run
    (ws / "gpuemu.toml").write_text(toml + "\n[store]\nkeep_runs = 3\n")  # `store prune` reads it too
    assert "would remove 2 runs" in gpuemu("store", "prune", "--dry-run", cwd=ws).stdout
    assert "would remove 1 run (" in gpuemu("store", "prune", "--keep-runs", "4", "--dry-run", cwd=ws).stdout
    (ws / "gpuemu.toml").write_text(toml + '\n[store]\nkeep_runs = "some"\n')
    bad = gpuemu("test", "--quick", cwd=ws)
    assert bad.returncode == 2 and "keep_runs" in bad.stderr, out(bad)


def test_a_run_prunes_only_its_own_kind_and_the_editors_runs_are_left_to_store_prune(tmp_path: Path) -> None:
    """The language server stores a run per op and job: 20 of them are one round of an 18-op workspace, so
    after a `gpuemu test` run only the CLI's own runs are pruned, and the editor's runs never automatically."""
    from gpuemu_ls.engine.store.prune import retain

    path = tmp_path / "gpuemu.db"
    generate(path)
    conn = sqlite3.connect(path)
    with conn:
        conn.executemany(
            "INSERT INTO runs (id, started_at, source, mode, status) VALUES (?, ?, 'server', 'quick', 'passed')",
            [(f"e{i:03d}", 500.0 + i) for i in range(30)],
        )
    conn.close()
    store = Store(path)
    try:
        assert retain(store, 2, "server") == []
        gone = retain(store, 2, "cli")
    finally:
        store.close()
    assert gone == ["r001", "r002", "r003", "r004", "r005"]
    assert rows(path, "SELECT count(*) FROM runs WHERE source = 'server'") == [(30,)]


def test_pinned_runs_survive_every_prune_until_unpinned(tmp_path: Path) -> None:
    """`gpuemu store pin RUN` (and a stored baseline's runs) are kept whatever their age; unpinned, the rule
    judges them again. Prefixes resolve to one run, an ambiguous or unknown one is a usage error."""
    path = tmp_path / "gpuemu.db"
    generate(path)
    store = Store(path)
    try:
        store.pin(store.resolve_run("r003"), "baseline nightly")
        store.pin("r004", "")
        assert store.pinned_runs() == {"r003": "baseline nightly", "r004": ""}
        for bad, says in (("r00", "ambiguous"), ("zz", "no stored run"), ("", "give a run id")):
            with pytest.raises(UsageError, match=says):
                store.resolve_run(bad)
    finally:
        store.close()
    assert prune(path, keep_runs=2).runs == ["r001", "r002", "r005"]
    store = Store(path)
    try:
        assert store.unpin("r003") and not store.unpin("r003")
    finally:
        store.close()
    assert prune(path, keep_runs=2).runs == ["r003"]
    assert sorted(r[0] for r in rows(path, "SELECT id FROM runs")) == [
        "m000",
        "r000",
        "r004",
        "r006",
        "r007",
        "r008",
        "r009",
    ]


def test_a_store_made_before_pins_gets_the_table_on_its_next_write_and_reads_without_it(tmp_path: Path) -> None:
    path = tmp_path / "gpuemu.db"
    generate(path)
    conn = sqlite3.connect(path)
    conn.execute("DROP TABLE pins")
    conn.close()
    old = Store(path, readonly=True)
    assert old.pinned_runs() == {}  # an old store, read as it is
    old.close()
    assert prune(path, keep_runs=2, dry_run=True).runs == ["r001", "r002", "r003", "r004", "r005"]
    Store(path).close()
    assert rows(path, "SELECT name FROM sqlite_master WHERE name = 'pins'") == [("pins",)]
