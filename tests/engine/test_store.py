"""The SQLite store: rows and snapshots written and read back, permissions, WAL, concurrent writers."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from gpuemu_ls.engine import dtypes as dt
from gpuemu_ls.engine.cases.plan import CaseSpec
from gpuemu_ls.engine.oracle.compare import compare_output
from gpuemu_ls.engine.run.case import CaseResult
from gpuemu_ls.engine.store.db import Store, decode_arrays, encode_arrays, store_path


def spec(op: str = "softmax", seed: int = 0, dtype: str = "float32", layout: str = "strided") -> CaseSpec:
    return CaseSpec(op, seed, "boundary", dtype, layout, "normal", {"B": 2, "N": 3}, {"x": (2, 3)}, {"x": "normal"})


def result(op: str = "softmax", seed: int = 0, status: str = "failed", snapshot: bool = True) -> CaseResult:
    x = np.arange(6, dtype=np.float32).reshape(2, 3) + seed
    ref = x.astype(np.float64)
    c = compare_output("result", x * 2 if status == "failed" else x, ref, "float32", 1e-5, 1e-5)
    return CaseResult(
        op,
        seed,
        spec(op, seed),
        status,
        None if status == "passed" else "mismatch",
        "msg" if status != "passed" else "",
        comparisons=[c],
        snapshot={"x": x} if snapshot else None,
        tolerance=(1e-5, 1e-5),
    )


@pytest.fixture
def store(tmp_path: Path) -> Store:
    s = Store(tmp_path / ".gpuemu" / "gpuemu.db")
    yield s
    s.close()


def begin(store: Store, root: Path, source: str = "cli") -> str:
    return store.begin_run(source=source, mode="thorough", seed=0, iterations=4, workspace=root, config_hash="abc")


def test_runs_cases_op_results_and_snapshots_round_trip(store: Store, tmp_path: Path) -> None:
    run_id = begin(store, tmp_path)
    store.add_cases(run_id, [result(seed=0, status="passed", snapshot=False), result(seed=1), result(seed=2)])
    store.add_op_result(
        run_id,
        "softmax",
        "op",
        "failed",
        cases=3,
        passed=1,
        failed=2,
        stats={"max_abs": 6.0},
        duration=0.5,
        message="1/3 passed",
        diagnosis="fails iff N > 2",
        detail={"planned": 3},
    )
    store.finish_run(run_id, "failed")

    run = store.run(run_id)
    assert run["status"] == "failed" and run["source"] == "cli" and run["finished_at"] >= run["started_at"]
    assert run["pid"] == os.getpid() and store.latest_run()["id"] == run_id
    rows = store.cases(run_id=run_id)
    assert [(r["seed"], r["status"], r["kind"]) for r in rows] == [
        (0, "passed", None),
        (1, "failed", "mismatch"),
        (2, "failed", "mismatch"),
    ]
    r1 = rows[1]
    assert (r1["dtype"], r1["layout"], r1["distribution"], r1["strategy"]) == (
        "float32",
        "strided",
        "normal",
        "boundary",
    )
    assert r1["shapes"] == '{"x": [2, 3]}' and r1["mismatches"] == 6 and r1["max_abs"] == 6.0
    assert rows[0]["snapshot_id"] is None and r1["snapshot_id"]
    snap = store.load_snapshot(r1["snapshot_id"])
    assert snap["x"].tobytes() == (np.arange(6, dtype=np.float32).reshape(2, 3) + 1).tobytes()
    op = store.latest_op_results(kind="op")["softmax"]
    assert (op["status"], op["cases"], op["failed"], op["diagnosis"]) == ("failed", 3, 2, "fails iff N > 2")
    assert store.count("snapshots") == 2


def test_snapshot_round_trip_is_byte_for_byte_for_every_dtype() -> None:
    arrays = {}
    for name in dt.ALL_NAMES:
        base = np.arange(-5, 7).reshape(3, 4)
        if dt.is_float(name):
            vals = np.array([np.nan, -np.inf, np.inf, -0.0, 1 / 3, 6e4, 1e-40, -2.5, 0.0, 1.0, -1.0, 7.0])
            arrays[name] = vals.reshape(3, 4).astype(dt.numpy_dtype(name))
        elif name == "bool":
            arrays[name] = base % 2 == 0
        else:
            arrays[name] = np.abs(base).astype(dt.numpy_dtype(name))
    arrays["empty"] = np.zeros((0, 5), dtype=np.float16)
    back = decode_arrays(encode_arrays(arrays))
    assert list(back) == list(arrays)
    for name, arr in arrays.items():
        assert back[name].dtype == arr.dtype and back[name].shape == arr.shape
        assert back[name].tobytes() == arr.tobytes(), name
        assert back[name].flags.writeable


def test_snapshot_of_a_scalar_keeps_its_shape() -> None:
    back = decode_arrays(encode_arrays({"temperature": np.array(0.5, dtype=np.float32)}))
    assert back["temperature"].shape == ()


def test_snapshots_are_content_addressed(store: Store, tmp_path: Path) -> None:
    run_id = begin(store, tmp_path)
    store.add_cases(run_id, [result(seed=1), result(seed=1)])
    rows = store.cases(run_id=run_id)
    assert rows[0]["snapshot_id"] == rows[1]["snapshot_id"] and store.count("snapshots") == 1


def test_max_snapshots_caps_what_is_kept(store: Store, tmp_path: Path) -> None:
    run_id = begin(store, tmp_path)
    store.add_cases(run_id, [result(seed=s) for s in range(5)], max_snapshots=2)
    rows = store.cases(run_id=run_id)
    assert [bool(r["snapshot_id"]) for r in rows] == [True, True, False, False, False]


def test_file_and_folder_are_private_and_wal_is_on(store: Store) -> None:
    assert stat.S_IMODE(os.stat(store.path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(store.path.parent).st_mode) == 0o700
    assert store.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_gpuemu_store_overrides_the_location(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "ws"
    assert store_path(root) == root / ".gpuemu" / "gpuemu.db"
    target = tmp_path / "elsewhere" / "results.db"
    monkeypatch.setenv("GPUEMU_STORE", str(target))
    s = Store.for_workspace(root)
    try:
        assert s.path == target.resolve() and target.exists() and not (root / ".gpuemu").exists()
    finally:
        s.close()


def test_latest_failures_are_only_the_newest_runs(store: Store, tmp_path: Path) -> None:
    old = begin(store, tmp_path)
    store.add_cases(old, [result("softmax", 1), result("softmax", 2), result("gelu", 3)])
    store.add_op_result(old, "softmax", "op", "failed")
    store.add_op_result(old, "gelu", "op", "failed")
    time.sleep(0.01)
    new = begin(store, tmp_path)
    store.add_cases(new, [result("softmax", 2), result("softmax", 4, status="passed", snapshot=False)])
    store.add_op_result(new, "softmax", "op", "failed")
    rows = store.latest_failures()
    # softmax: only the newer run's failure; gelu: its latest (older) run still stands
    assert sorted((r["op"], r["seed"], r["run_id"] == new) for r in rows) == [("gelu", 3, False), ("softmax", 2, True)]
    assert [r["seed"] for r in store.latest_failures("softmax")] == [2]
    time.sleep(0.01)
    fixed = begin(store, tmp_path)
    store.add_cases(fixed, [result("softmax", 2, status="passed", snapshot=False)])
    store.add_op_result(fixed, "softmax", "op", "passed")
    assert store.latest_failures("softmax") == []


def test_find_case_prefers_rows_with_a_snapshot(store: Store, tmp_path: Path) -> None:
    first = begin(store, tmp_path)
    store.add_cases(first, [result("softmax", 7)])
    later = begin(store, tmp_path)
    store.add_cases(later, [result("softmax", 7, status="passed", snapshot=False)])
    row = store.find_case("softmax", 7)
    assert row["run_id"] == first and row["snapshot_id"]
    newest = begin(store, tmp_path)
    store.add_cases(newest, [result("softmax", 7)])
    assert store.find_case("softmax", 7)["run_id"] == newest
    assert store.find_case("softmax", 8) is None


def test_reopening_keeps_everything(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    s = Store(path)
    run_id = begin(s, tmp_path)
    s.add_cases(run_id, [result(seed=3)])
    s.close()
    s2 = Store(path)
    try:
        assert s2.cases(run_id=run_id)[0]["seed"] == 3
    finally:
        s2.close()


WRITER = textwrap.dedent("""
    import sys, time
    import numpy as np
    from gpuemu_ls.engine.run.case import CaseResult
    from gpuemu_ls.engine.cases.plan import CaseSpec
    from gpuemu_ls.engine.store.db import Store

    path, name, batches = sys.argv[1], sys.argv[2], int(sys.argv[3])
    store = Store(path)
    run_id = store.begin_run(source=name, mode="thorough", seed=0, iterations=0, workspace=path, config_hash="")
    for b in range(batches):
        cases = []
        for k in range(4):
            seed = b * 4 + k
            spec = CaseSpec(name, seed, "default", "float32", "contiguous", "normal", {"N": 3}, {"x": (3,)})
            snap = {"x": np.full(3, seed, dtype=np.float32), name: np.zeros(1)} if k == 0 else None
            cases.append(CaseResult(name, seed, spec, "failed" if k == 0 else "passed", snapshot=snap))
        store.add_cases(run_id, cases)
        store.add_op_result(run_id, f"{name}-{b}", "op", "passed", cases=4)
    store.finish_run(run_id, "passed")
    print("done", run_id)
""")


def test_concurrent_writers_lose_no_row(tmp_path: Path) -> None:
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    path = tmp_path / "shared" / "gpuemu.db"
    writers = [
        subprocess.Popen(
            [sys.executable, str(script), str(path), f"w{i}", "50"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(3)
    ]
    outs = [w.communicate(timeout=120) for w in writers]
    for w, (out, err) in zip(writers, outs):
        assert w.returncode == 0, err
        assert "locked" not in err.lower() and out.startswith("done")
    s = Store(path)
    try:
        assert s.count("runs") == 3 and s.count("cases") == 3 * 50 * 4
        assert s.count("op_results") == 3 * 50 and s.count("snapshots") == 3 * 50
        for i in range(3):
            seeds = sorted(r["seed"] for r in s.cases(op=f"w{i}"))
            assert seeds == list(range(200))
        assert {r["status"] for r in s.query("SELECT status FROM runs")} == {"passed"}
    finally:
        s.close()
