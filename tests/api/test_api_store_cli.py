"""A client run's failures reach the same store the CLI and the editor read: `gpuemu failures`,
`gpuemu reproduce`, `gpuemu ops`, `gpuemu report --merge` of exported JSON (real subprocesses)."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import numpy as np
import pytest
from kit.ops import np_softmax, np_softmax_no_max

from gpuemu_ls import Client
from gpuemu_ls.api import client_replay_text
from gpuemu_ls.engine.store.db import Store


@pytest.fixture
def failed_client_run(client_ws: Path) -> tuple[Path, list]:
    with Client(client_ws) as c:
        result = c.fuzz_op_client_side("softmax", np_softmax_no_max, iterations=24)
    assert not result.ok
    return client_ws, result.failures


def test_gpuemu_failures_shows_the_client_run(failed_client_run, gpuemu_cli) -> None:
    root, failures = failed_client_run
    text = gpuemu_cli(root, "failures")
    assert text.returncode == 0, text.stderr
    for f in failures:
        assert f"seed={f.seed} dtype={f.dtype}" in text.stdout
        assert f"replay: gpuemu reproduce --op softmax --seed {f.seed}" in text.stdout
    bugs = sum(f.status == "failed" for f in failures)
    assert f"{bugs} failing cases" in text.stdout, text.stdout
    doc = json.loads(gpuemu_cli(root, "failures", "--format", "json").stdout)
    assert sorted(r["seed"] for r in doc["failures"]) == sorted(f.seed for f in failures)
    ops = gpuemu_cli(root, "ops")
    assert any(line.split()[:2] == ["softmax", "failed"] for line in ops.stdout.splitlines()), ops.stdout


def test_gpuemu_reproduce_finds_the_stored_snapshot_of_a_client_case(failed_client_run, gpuemu_cli) -> None:
    root, failures = failed_client_run
    f = failures[0]
    out = gpuemu_cli(root, "reproduce", "--op", "softmax", "--seed", str(f.seed))
    assert out.returncode == 1  # a client-side op never passes here
    assert f"op softmax, seed {f.seed}: client-side op" in out.stdout and "showing the stored result" in out.stdout
    assert "inputs: snapshot " in out.stdout  # the exact inputs are in the store, byte for byte
    assert f"dtype={f.dtype}" in out.stdout and f"layout={f.layout}" in out.stdout


def test_gpuemu_reproduce_prints_the_stored_comparison_and_the_api_replay(failed_client_run, gpuemu_cli) -> None:
    root, failures = failed_client_run
    out = gpuemu_cli(root, "reproduce", "--op", "softmax", "--seed", str(failures[0].seed))
    assert "Max absolute difference" in out.stdout and ".reproduce('softmax'" in out.stdout


def test_client_replay_text_shows_the_stored_case_and_how_to_replay_it(failed_client_run, tmp_path: Path) -> None:
    root, failures = failed_client_run
    f = next((x for x in failures if x.kind == "mismatch"), failures[0])
    with Client(root) as c:
        store = c.store
        assert store is not None
        text, code = client_replay_text(c.config, c.op("softmax"), f.seed, store, cwd=root)
        row = store.find_case("softmax", f.seed)
        snap = store.load_snapshot(row["snapshot_id"])
        missing, code_missing = client_replay_text(c.config, c.op("softmax"), 999_999, store, cwd=root)
    assert code == 1 and code_missing == 1
    assert f"op softmax, seed {f.seed}: client-side op" in text
    assert "stored by run" in text and "source api" in text
    assert f"dtype={f.dtype}" in text and "not equal to tolerance" in text
    assert f"FAILED (stored) [{f.kind}" in text
    assert f"inputs: snapshot {row['snapshot_id'][:12]} in .gpuemu/gpuemu.db" in text
    assert f"Client({str(root.resolve())!r}).reproduce('softmax', {f.seed}, run_op)" in text
    npz = root / ".gpuemu" / "repro" / f"softmax_{f.seed}.npz"
    assert f"inputs written to .gpuemu/repro/softmax_{f.seed}.npz" in text
    data = np.load(npz)
    dtypes = json.loads(str(data["__dtypes__"]))
    x = data["x"].view(np.dtype(snap["x"].dtype)) if dtypes["x"] == "bfloat16" else data["x"]
    assert x.tobytes() == snap["x"].tobytes()
    assert "no stored case" in missing


def test_replay_through_the_api_is_byte_for_byte_the_stored_case(failed_client_run) -> None:
    root, failures = failed_client_run
    with Client(root) as c:
        for f in [f for f in failures if f.status == "failed"][:3]:  # bugs (an edge finding replays as edge)
            seen = {}

            def run_op(inputs, axis, seen=seen):
                seen["x"] = np.array(inputs["x"])
                return np_softmax_no_max(inputs, axis)

            again = c.reproduce("softmax", f.seed, run_op)
            fixed = c.reproduce("softmax", f.seed, np_softmax)
            assert again.source.startswith("stored snapshot") and not again.passed
            assert again.case is not None and again.case.kind == f.kind
            assert again.max_diff == f.max_abs or (again.max_diff is None and f.max_abs is None)
            stored = c.store.load_snapshot(c.store.find_case("softmax", f.seed)["snapshot_id"])
            assert seen["x"].tobytes() == stored["x"].tobytes()
            assert fixed.passed, fixed.report()
            regenerated = c.reproduce("softmax", f.seed, np_softmax, regenerate=True)
            assert regenerated.source.startswith("regenerated")


def test_exported_results_merge_into_a_junit_report(failed_client_run, gpuemu_cli, tmp_path: Path) -> None:
    root, failures = failed_client_run
    out = tmp_path / "gpu-box.json"
    with Client(root) as c:
        c.export_results(out)
    junit = gpuemu_cli(root, "report", "--merge", str(out), "--format", "junit")
    assert junit.returncode == 1, junit.stderr
    assert 'name="softmax"' in junit.stdout and "<failure" in junit.stdout
    assert f"seed={failures[0].seed}" in junit.stdout or f"seed {failures[0].seed}" in junit.stdout


def test_client_and_cli_write_the_store_at_once(client_ws: Path, gpuemu_cli) -> None:
    """WAL + immediate transactions: a client writing while a CLI run writes loses no row."""
    errors: list[BaseException] = []

    def client_work() -> None:
        try:
            with Client(client_ws) as c:
                for _ in range(3):
                    c.fuzz_op_client_side("softmax", np_softmax, iterations=12)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    t = threading.Thread(target=client_work)
    t.start()
    cli = gpuemu_cli(client_ws, "test", "--op", "softmax_mod", "--no-progress")
    t.join()
    assert not errors and cli.returncode == 0, cli.stdout + cli.stderr
    store = Store(client_ws / ".gpuemu" / "gpuemu.db")
    try:
        assert store.count("runs") == 4
        assert store.count("cases") == 3 * 12 + 12
    finally:
        store.close()


def test_client_runs_keep_to_the_store_retention(client_ws: Path) -> None:
    """`[store] keep_runs` applies after each run of the Python API as after a CLI run (issue 31): a suite that
    checks ops on every commit keeps the last N runs and every op's latest result, not a year of runs."""
    (client_ws / "gpuemu.toml").write_text((client_ws / "gpuemu.toml").read_text() + "\n[store]\nkeep_runs = 2\n")
    with Client(client_ws) as c:
        for _ in range(5):
            assert c.fuzz_op_client_side("softmax", np_softmax, iterations=2).ok
        path = c.store_path
    store = Store(path, readonly=True)
    try:
        runs = store.query("SELECT id FROM runs WHERE source = 'api'")
        latest = {r["run_id"] for r in store.latest_op_results().values()}
    finally:
        store.close()
    assert len(runs) <= 2 + len(latest) and len(runs) < 5, runs
