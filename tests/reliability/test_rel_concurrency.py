"""Concurrency: the server, two CLI runs, the Python API and raw store writers write one store at once.

All of them start together (a start file releases the raw writers; the rest are started back to back)
on one workspace and one SQLite file. Afterwards every row is counted: each run holds exactly the cases
its producer says it ran (the CLI's JSON report, the server's op verdicts, the API's results, the
writers' acknowledged commits), the total is their sum, ``PRAGMA integrity_check`` passes, and no
output, log or message anywhere says "database is locked".
"""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path

import pytest
import relkit
from kit.store import db_path

OPS = 3
ITER = 4
API_ROUNDS = 2
WRITERS = 2
WRITER_TX = 25
WRITER_BATCH = 4

API_SCRIPT = r"""
import json, sys
from pathlib import Path
root = Path(sys.argv[1])
out = []
try:
    from gpuemu_ls import Client
except ImportError:  # the Python API is not there: write through the Store like it would
    Client = None
if Client is not None:
    with Client(root, source="api") as client:
        for _ in range(int(sys.argv[2])):
            for name in client.ops():
                r = client.test_op(name, quick=True, iterations=int(sys.argv[3]))
                out.append({"run_id": r.run_id, "cases": r.total, "status": r.status})
else:
    from gpuemu_ls.engine.config.load import load_config
    from gpuemu_ls.engine.store.db import Store
    from gpuemu_ls.engine.run.validate import RunOptions, run_validation
    cfg = load_config(root)
    for _ in range(int(sys.argv[2])):
        res = run_validation(cfg, RunOptions(mode="quick", iterations=int(sys.argv[3]), source="api"),
                             store=Store.for_workspace(root))
        for o in res.outcomes:
            out.append({"run_id": res.run_id, "cases": len(o.cases), "status": o.status})
print(json.dumps(out))
"""


def _locked(text: str) -> int:
    return text.lower().count("database is locked")


@pytest.mark.asyncio
async def test_server_two_clis_the_api_and_writers_lose_no_row(tmp_path: Path, cleanup_pids: list[int]) -> None:
    root = relkit.good_ws(tmp_path / "shared ws", ops=OPS, quick=ITER)
    (root / "kern.py").write_text(
        relkit.GOOD_PY.replace("    return x * 2\n", "    time.sleep(0.1)\n    return x * 2\n").replace(
            "import numpy as np", "import time\n\nimport numpy as np"
        ),
        encoding="utf-8",
    )
    db = db_path(root)
    tag = relkit.new_tag()
    log = tmp_path / "server.log"
    client = await relkit.start_server(
        root, {**relkit.QUIET, "jobs": 2}, env=relkit.child_env({relkit.TAG_VAR: tag}), log_file=log
    )
    relkit.record("server", started=1)
    start, stop = tmp_path / "go", tmp_path / "stop"
    procs: dict[str, subprocess.Popen[str]] = {}
    reports = {}
    try:
        for name, no_zygote in (("cli-1", False), ("cli-2", True)):
            reports[name] = tmp_path / f"{name}.json"
            procs[name] = relkit.start_cli(
                root,
                "test",
                "--quick",
                "--no-progress",
                "--format",
                "json",
                "--output",
                str(reports[name]),
                env=relkit.child_env({relkit.TAG_VAR: tag}, no_zygote=no_zygote),
            )
        procs["api"] = subprocess.Popen(
            [relkit.PY, "-c", API_SCRIPT, str(root), str(API_ROUNDS), str(ITER)],
            env=relkit.child_env({relkit.TAG_VAR: tag}),
            cwd=str(root),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(WRITERS):
            procs[f"writer-{i}"] = subprocess.Popen(
                [
                    relkit.PY,
                    str(relkit.HERE / "store_writer.py"),
                    str(db),
                    str(WRITER_TX),
                    str(WRITER_BATCH),
                    "--start-file",
                    str(start),
                    "--until-file",
                    str(stop),
                    "--op",
                    f"writer{i}",
                ],
                env=relkit.child_env({relkit.TAG_VAR: tag}),
                cwd=str(tmp_path),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        cleanup_pids += [p.pid for p in procs.values()]
        server_run = asyncio.ensure_future(
            relkit.request(client, "gpuemu/runOps", {"mode": "quick", "iterations": ITER}, timeout=300)
        )
        start.touch()
        outputs = {}
        for name, p in procs.items():  # the writers write until everyone else is done
            if name.startswith("writer"):
                continue
            out, err = await asyncio.to_thread(p.communicate, timeout=300)
            outputs[name] = (p.returncode, out, err)
        got = await asyncio.wait_for(server_run, 300)
        stop.touch()
        for name, p in procs.items():
            if name.startswith("writer"):
                out, err = await asyncio.to_thread(p.communicate, timeout=300)
                outputs[name] = (p.returncode, out, err)
        assert await relkit.answers(client, root)
        code = await relkit.stop_server(client)
    finally:
        await relkit.force_close(client)
    relkit.clean_exit(code)

    locked = sum(_locked(o + e) for _, o, e in outputs.values()) + _locked(log.read_text(errors="replace"))
    locked += sum(_locked(m.message) for m in client.messages)
    expected: dict[str, int] = {}  # run id -> cases its producer says it stored
    for name in ("cli-1", "cli-2"):
        rc, out, err = outputs[name]
        assert rc == 0, f"{name}: {rc}\n{out[-2000:]}\n{err[-2000:]}"
        doc = json.loads(reports[name].read_text(encoding="utf-8"))
        expected[doc["run_id"]] = sum(e["cases"] for e in doc["ops"])
        assert expected[doc["run_id"]] == OPS * ITER
    rc, out, err = outputs["api"]
    assert rc == 0, err[-3000:]
    for r in json.loads(out.splitlines()[-1]):
        assert r["status"] == "passed", r
        expected[r["run_id"]] = expected.get(r["run_id"], 0) + r["cases"]
    for i in range(WRITERS):
        rc, out, err = outputs[f"writer-{i}"]
        assert rc == 0, err
        run_id = next(line.split()[1] for line in out.splitlines() if line.startswith("run "))
        acked = [line for line in out.splitlines() if line.startswith("committed")]
        assert len(acked) >= WRITER_TX
        expected[run_id] = len(acked) * WRITER_BATCH
    assert [r["status"] for r in got["results"]] == ["passed"] * OPS, got
    server_runs = [r for (r,) in relkit.store_rows(db, "SELECT id FROM runs WHERE source = 'server'")]
    assert len(server_runs) == OPS
    for run_id in server_runs:
        verdict = relkit.store_rows(db, "SELECT sum(cases) FROM op_results WHERE run_id = ?", (run_id,))[0][0]
        expected[run_id] = int(verdict)
        assert expected[run_id] == ITER

    assert relkit.integrity(db) == "ok"
    spans = relkit.store_rows(db, "SELECT started_at, finished_at FROM runs")
    events = sorted([(a, 1) for a, _ in spans] + [(b, -1) for _, b in spans])
    open_now = most = 0
    for _, d in events:
        open_now += d
        most = max(most, open_now)
    assert most >= 5, f"at most {most} runs were writing at once: the producers did not overlap"
    stored = dict(relkit.store_rows(db, "SELECT run_id, count(*) FROM cases GROUP BY run_id"))
    lost = sum(max(0, n - stored.get(run_id, 0)) for run_id, n in expected.items())
    written = sum(expected.values())
    relkit.record("concurrency", writers=len(procs) + 1, locked_errors=locked)
    relkit.record("rows", written=written, lost=lost)
    assert lost == 0, {r: (n, stored.get(r)) for r, n in expected.items() if stored.get(r) != n}
    assert stored == expected, "rows of unknown runs, or more rows than reported"
    assert sum(stored.values()) == relkit.counts(db)["cases"]
    verdict_rows = relkit.store_rows(
        db,
        "SELECT o.run_id, sum(o.cases), (SELECT count(*) FROM cases c WHERE c.run_id = o.run_id) "
        "FROM op_results o GROUP BY o.run_id",
    )
    assert all(a == b for _, a, b in verdict_rows), verdict_rows
    assert locked == 0, "a 'database is locked' reached a user"
    unfinished = relkit.store_rows(db, "SELECT id, source FROM runs WHERE finished_at IS NULL")
    assert unfinished == [], unfinished
    assert relkit.wait_gone(relkit.tagged(tag), 15) == []


def test_many_writers_hammering_one_store(tmp_path: Path, cleanup_pids: list[int]) -> None:
    """Six processes commit 40 transactions each as fast as they can, released at the same instant."""
    db = tmp_path / "hammer" / "gpuemu.db"
    start = tmp_path / "go"
    n, tx, batch = 6, 40, 3
    procs = [
        subprocess.Popen(
            [
                relkit.PY,
                str(relkit.HERE / "store_writer.py"),
                str(db),
                str(tx),
                str(batch),
                "--start-file",
                str(start),
                "--op",
                f"w{i}",
            ],
            env=relkit.child_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(n)
    ]
    cleanup_pids += [p.pid for p in procs]
    for p in procs:  # every writer has imported everything and waits
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    start.touch()
    results = [p.communicate(timeout=300) for p in procs]
    locked = sum(_locked(o + e) for o, e in results)
    stored = dict(relkit.store_rows(db, "SELECT op, count(*) FROM cases GROUP BY op"))
    lost = sum(tx * batch - stored.get(f"w{i}", 0) for i in range(n))
    relkit.record("concurrency", writers=n, locked_errors=locked)
    relkit.record("rows", written=n * tx * batch, lost=lost)
    for p, (out, err) in zip(procs, results):
        assert p.returncode == 0, err
        assert out.count("committed") == tx
    assert relkit.integrity(db) == "ok"
    assert lost == 0 and locked == 0, (stored, locked)
    assert relkit.counts(db)["runs"] == n
