"""Faults: kill -9 of a worker, the zygote, a CLI, the server or a store writer; a full disk on write.

A worker killed mid-case costs that case (reported as an error naming the signal), a fresh worker runs
the rest; a CLI, server or writer killed mid-transaction leaves a store that passes ``PRAGMA
integrity_check``, holds every committed row and no part of the interrupted transaction, and can be
written again; a full disk (RLIMIT_FSIZE with SIGXFSZ ignored, or a tiny tmpfs) is a clear error and
no corruption. No process a killed run started outlives it.
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import relkit
from kit.store import db_path

WRITER = str(relkit.HERE / "store_writer.py")

SLOW_PY = """import os
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def slow_double(x):
    with open(os.path.join(HERE, "pids.txt"), "a") as fh:
        fh.write(f"{os.getpid()}\\n")
    time.sleep({delay})
    return x * 2


def reference(x):
    return np.asarray(x, dtype=np.float64) * 2.0


def wrong_big(x):
    return x * 3
"""


def slow_ws(root: Path, *, delay: float = 1.0, iterations: int = 4) -> Path:
    toml = relkit.HEADER.format(name="faults", validation="timeout = 60\n", quick=iterations)
    toml += relkit.op_block("slow", 'module = "kern:slow_double"\nreference = "kern:reference"')
    return relkit.write_ws(root, toml, {"kern.py": SLOW_PY.replace("{delay}", str(delay))})


def big_ws(root: Path, *, iterations: int = 12) -> Path:
    """One op failing every case on 1 MiB inputs: one large add_cases transaction (snapshots) per run."""
    toml = relkit.HEADER.format(name="bigwrite", validation="", quick=iterations)
    toml += relkit.op_block(
        "wrong_big", 'module = "kern:wrong_big"\nreference = "kern:reference"', dims="B = 64\nN = 4096"
    )
    return relkit.write_ws(root, toml, {"kern.py": SLOW_PY.replace("{delay}", "0")})


def _pids(root: Path) -> list[int]:
    try:
        return [int(x) for x in (root / "pids.txt").read_text().split()]
    except (OSError, ValueError):
        return []


def _wal_size(db: Path) -> int:
    try:
        return (db.parent / (db.name + "-wal")).stat().st_size
    except OSError:
        return 0


# --- kill -9 of a worker mid-case -----------------------------------------------------------------
@pytest.mark.parametrize("mode", ["zygote", "no_zygote"])
def test_worker_kill9_mid_case_is_one_error_and_the_run_goes_on(
    tmp_path: Path, mode: str, cleanup_pids: list[int]
) -> None:
    root = slow_ws(tmp_path / "ws")
    tag = relkit.new_tag()
    env = relkit.child_env({relkit.TAG_VAR: tag}, no_zygote=mode == "no_zygote")
    out = tmp_path / "out.json"
    proc = relkit.start_cli(
        root, "test", "--quick", "--iterations", "4", "--no-progress", "--format", "json", "--output", str(out), env=env
    )
    cleanup_pids.append(proc.pid)
    first = relkit.wait_until(lambda: _pids(root), 120, "the first case to start")[0]
    workers = relkit.worker_pids(proc.pid)
    assert first in workers, (first, workers, [relkit.cmdline(p) for p in relkit.descendants(proc.pid)])
    if mode == "zygote":
        assert relkit.zygote_pids(proc.pid), "no zygote under the CLI"
        assert relkit.WORKER_MARK not in relkit.cmdline(first)
    else:
        assert not relkit.zygote_pids(proc.pid) and relkit.WORKER_MARK in relkit.cmdline(first)
    os.kill(first, signal.SIGKILL)
    relkit.record("faults", worker_kill9=1)
    stdout, stderr = proc.communicate(timeout=180)
    assert proc.returncode == 1, stdout + stderr
    assert relkit.no_traceback(stdout + stderr), stderr
    doc = json.loads(out.read_text(encoding="utf-8"))
    entry = doc["ops"][0]
    assert entry["cases"] == 4 and entry["passed"] == 3 and entry["errors"] == 1, entry
    (err,) = entry["failures"]
    assert err["kind"] == "op_crash" and "SIGKILL" in err["message"], err
    later = _pids(root)[1:]
    assert later and first not in later, f"the killed worker was not replaced: {_pids(root)}"
    db = db_path(root)
    assert relkit.integrity(db) == "ok"
    rows = relkit.store_rows(db, "SELECT status, kind FROM cases WHERE run_id = ?", (doc["run_id"],))
    assert sorted(rows) == [("error", "op_crash"), ("passed", None), ("passed", None), ("passed", None)], rows
    relkit.record("rows", written=4, lost=4 - len(rows))
    assert relkit.wait_gone(relkit.tagged(tag), 15) == []


def test_zygote_kill9_mid_case_costs_one_case(tmp_path: Path, cleanup_pids: list[int]) -> None:
    """The fork server itself dies: the case running is an error, a new zygote serves the rest."""
    root = slow_ws(tmp_path / "ws")
    tag = relkit.new_tag()
    out = tmp_path / "out.json"
    proc = relkit.start_cli(
        root,
        "test",
        "--quick",
        "--iterations",
        "3",
        "--no-progress",
        "--format",
        "json",
        "--output",
        str(out),
        env=relkit.child_env({relkit.TAG_VAR: tag}),
    )
    cleanup_pids.append(proc.pid)
    relkit.wait_until(lambda: _pids(root), 120, "the first case to start")
    (zygote,) = relkit.zygote_pids(proc.pid)
    os.kill(zygote, signal.SIGKILL)
    relkit.record("faults", zygote_kill9=1)
    stdout, stderr = proc.communicate(timeout=180)
    assert proc.returncode == 1 and relkit.no_traceback(stdout + stderr), stdout + stderr
    entry = json.loads(out.read_text(encoding="utf-8"))["ops"][0]
    assert entry["cases"] == 3 and entry["passed"] == 2 and entry["errors"] == 1, entry
    assert entry["failures"][0]["kind"] == "op_crash"
    assert relkit.integrity(db_path(root)) == "ok"
    assert relkit.wait_gone(relkit.tagged(tag), 15) == []


@pytest.mark.asyncio
async def test_worker_kill9_in_the_server(tmp_path: Path) -> None:
    """The same through the language server: the case is an error, the server answers, the worker is new."""
    root = slow_ws(tmp_path / "ws", delay=0.8)
    tag = relkit.new_tag()
    client = await relkit.start_server(root, env=relkit.child_env({relkit.TAG_VAR: tag}))
    relkit.record("server", started=1)
    try:
        run = asyncio.ensure_future(
            relkit.request(client, "gpuemu/runOps", {"ids": ["op:slow"], "mode": "quick", "iterations": 3})
        )
        first = (await relkit.wait_for(lambda: _pids(root), 120, "the first case", client))[0]
        assert first in relkit.worker_pids(client.server_pid)
        os.kill(first, signal.SIGKILL)
        relkit.record("faults", worker_kill9=1)
        assert await relkit.answers(client, root)  # answers while the run goes on
        got = await asyncio.wait_for(run, 180)
        assert [r["status"] for r in got["results"]] == ["error"], got
        final = [s for s in client.op_states if s.get("name") == "slow" and s.get("state") == "error"]
        assert final and final[-1]["cases"] == 3, client.op_states[-3:]
        assert len(set(_pids(root))) >= 2
        db = db_path(root)
        assert relkit.integrity(db) == "ok"
        kinds = sorted(k or "" for (k,) in relkit.store_rows(db, "SELECT kind FROM cases"))
        assert kinds == ["", "", "op_crash"], kinds
        code = await relkit.stop_server(client)
    finally:
        await relkit.force_close(client)
    relkit.clean_exit(code)
    assert relkit.wait_gone(relkit.tagged(tag), 15) == []


# --- kill -9 of a CLI or the server mid-write ------------------------------------------------------
def _populated(root: Path) -> dict[str, Any]:
    """Give the store earlier rows (a real CLI run of another op), and return their fingerprint."""
    proc = relkit.run_cli(root, "test", "--quick", "--iterations", "2", "--no-progress", "--op", "wrong_big")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    return relkit.fingerprint(db_path(root))


def _consistent_after_kill(root: Path, before: dict[str, Any], planned: int) -> int:
    """Integrity, every earlier row, and all-or-nothing for the killed run; returns rows of the killed run."""
    db = db_path(root)
    assert relkit.integrity(db) == "ok"
    problems = relkit.intact_since(db, before)
    relkit.record("rows", written=len(before["cases"]), lost=sum(p.startswith("cases") for p in problems))
    assert problems == []
    new_runs = [r for (r,) in relkit.store_rows(db, "SELECT id FROM runs") if repr(r) not in before["runs"]]
    assert len(new_runs) == 1, new_runs
    n = relkit.store_rows(db, "SELECT count(*) FROM cases WHERE run_id = ?", (new_runs[0],))[0][0]
    assert n in (0, planned), f"a partial transaction survived: {n} of {planned} rows"
    return int(n)


def _reopen_and_write(root: Path) -> None:
    proc = relkit.run_cli(root, "test", "--quick", "--iterations", "1", "--no-progress")
    assert proc.returncode == 1 and relkit.no_traceback(proc.stdout + proc.stderr), proc.stdout + proc.stderr
    assert relkit.integrity(db_path(root)) == "ok"


def test_cli_kill9_mid_write_leaves_a_consistent_store(tmp_path: Path, cleanup_pids: list[int]) -> None:
    root = big_ws(tmp_path / "ws")
    before = _populated(root)
    db = db_path(root)
    wal0 = _wal_size(db)
    tag = relkit.new_tag()
    proc = subprocess.Popen(
        [*relkit.CLI, "-C", str(root), "test", "--quick", "--no-progress"],
        env=relkit.child_env({relkit.TAG_VAR: tag}),
        cwd=str(root),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    cleanup_pids.append(proc.pid)
    grew = relkit.wait_until(
        lambda: proc.poll() is not None or _wal_size(db) > wal0 + 2_000_000,
        240,
        "the run's transaction to spill into the WAL",
        step=0.005,
    )
    mid_write = proc.poll() is None
    proc.kill()
    proc.wait(30)
    relkit.record("faults", cli_kill9=1)
    assert grew and mid_write, "the CLI finished before it could be killed mid-write"
    _consistent_after_kill(root, before, planned=12)
    assert relkit.wait_gone(relkit.tagged(tag), 15) == [], "workers outlived the killed CLI"
    _reopen_and_write(root)


@pytest.mark.asyncio
async def test_server_kill9_mid_write_leaves_a_consistent_store(tmp_path: Path) -> None:
    root = big_ws(tmp_path / "ws")
    before = _populated(root)
    db = db_path(root)
    wal0 = _wal_size(db)
    tag = relkit.new_tag()
    client = await relkit.start_server(root, env=relkit.child_env({relkit.TAG_VAR: tag}))
    relkit.record("server", started=1)
    try:
        run = asyncio.ensure_future(
            relkit.request(client, "gpuemu/runOps", {"ids": ["op:wrong_big"], "mode": "quick", "iterations": 12})
        )
        await relkit.wait_for(
            lambda: _wal_size(db) > wal0 + 2_000_000 or client._server.returncode is not None,
            240,
            "the server's transaction to spill into the WAL",
        )
        assert client._server.returncode is None
        os.kill(client.server_pid, signal.SIGKILL)
        relkit.record("faults", server_kill9=1)
    finally:
        await relkit.force_close(client)
    run.cancel()
    _consistent_after_kill(root, before, planned=12)
    assert relkit.wait_gone(relkit.tagged(tag), 15) == [], "the zygote or workers outlived the killed server"
    _reopen_and_write(root)


def test_writer_kill9_mid_transaction_keeps_every_commit(tmp_path: Path, cleanup_pids: list[int]) -> None:
    """Raw store writers (the Store class every face uses), each killed at a different point of a large
    transaction: every acknowledged commit is there in full, nothing of the interrupted one."""
    db = tmp_path / "store" / "gpuemu.db"
    lost = written = 0
    for trial, delay in enumerate((0.0, 0.15, 0.4)):
        proc = subprocess.Popen(
            [relkit.PY, WRITER, str(db), "50", "8", "--snapshot-kb", "512"],
            env=relkit.child_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        cleanup_pids.append(proc.pid)
        acked: list[int] = []
        run_id = None
        assert proc.stdout is not None
        while True:  # wait for `trial + 1` commits, then kill inside the next transaction
            line = proc.stdout.readline()
            assert line, proc.stderr.read() if proc.stderr else ""
            if line.startswith("run "):
                run_id = line.split()[1]
            elif line.startswith("committed"):
                acked.append(int(line.split()[2]))
                if len(acked) > trial:
                    break
        time.sleep(delay)
        proc.kill()
        proc.wait(30)
        relkit.record("faults", writer_kill9=1)
        rest = proc.stdout.read()
        acked += [int(x.split()[2]) for x in rest.splitlines() if x.startswith("committed")]
        assert relkit.integrity(db) == "ok"
        per_seed = dict(
            relkit.store_rows(db, "SELECT seed, count(*) FROM cases WHERE run_id = ? GROUP BY seed", (run_id,))
        )
        for seed in acked:
            lost += 8 - per_seed.get(seed, 0)
        assert all(per_seed.get(s) == 8 for s in acked), (acked, per_seed)
        assert all(c == 8 for c in per_seed.values()), f"a partial transaction: {per_seed}"
        written += sum(per_seed.values())
    relkit.record("rows", written=written, lost=lost)
    ok = subprocess.run(
        [relkit.PY, WRITER, str(db), "2", "3"], env=relkit.child_env(), capture_output=True, text=True, timeout=120
    )
    assert ok.returncode == 0, ok.stderr


# --- a full disk ---------------------------------------------------------------------------------
def _fsize(limit: int) -> Any:
    def pre() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return pre


def test_full_disk_writer_gets_a_clear_error_and_no_corruption(tmp_path: Path) -> None:
    db = tmp_path / "store" / "gpuemu.db"
    first = subprocess.run(
        [relkit.PY, WRITER, str(db), "5", "4"], env=relkit.child_env(), capture_output=True, text=True, timeout=120
    )
    assert first.returncode == 0, first.stderr
    before = relkit.fingerprint(db)
    n0 = relkit.counts(db)
    limit = db.stat().st_size + _wal_size(db) + 200_000
    full = subprocess.run(
        [relkit.PY, WRITER, str(db), "10", "8", "--snapshot-kb", "256", "--fsize", str(limit)],
        env=relkit.child_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    relkit.record("faults", full_disk=1)
    assert full.returncode == 3, (full.returncode, full.stderr[-2000:])
    assert "STORE_ERROR: cannot write the result store" in full.stderr and str(db) in full.stderr, full.stderr
    assert "disk full" in full.stderr and "no transaction is active" not in full.stderr, full.stderr
    assert relkit.no_traceback(full.stderr)
    assert relkit.integrity(db) == "ok"
    problems = relkit.intact_since(db, before)
    relkit.record("rows", written=n0["cases"], lost=sum(p.startswith("cases") for p in problems))
    assert problems == []
    acked = [int(x.split()[2]) for x in full.stdout.splitlines() if x.startswith("committed")]
    assert relkit.counts(db)["cases"] == n0["cases"] + 8 * len(acked)
    again = subprocess.run(
        [relkit.PY, WRITER, str(db), "2", "2"], env=relkit.child_env(), capture_output=True, text=True, timeout=120
    )
    assert again.returncode == 0, again.stderr


def test_full_disk_cli_run_says_so_and_keeps_the_store(tmp_path: Path) -> None:
    root = big_ws(tmp_path / "ws", iterations=6)
    before = _populated(root)
    db = db_path(root)
    limit = db.stat().st_size + _wal_size(db) + 300_000
    proc = relkit.run_cli(root, "test", "--quick", "--no-progress", preexec_fn=_fsize(limit))
    relkit.record("faults", full_disk=1)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out[-3000:]
    assert "error: cannot write the result store" in proc.stderr and str(db) in proc.stderr, out[-3000:]
    assert "disk full" in proc.stderr, out[-3000:]
    assert relkit.no_traceback(out), out[-3000:]
    assert relkit.integrity(db) == "ok"
    assert relkit.intact_since(db, before) == []
    _reopen_and_write(root)


@pytest.fixture
def tiny_tmpfs(tmp_path: Path) -> Any:
    mnt = tmp_path / "tiny fs"
    mnt.mkdir()
    try:
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mnt)], capture_output=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired):
        pytest.skip("cannot mount a tmpfs here (needs root); RLIMIT_FSIZE tests cover full disks")
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode(errors='replace').strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True, timeout=30)


@pytest.mark.asyncio
async def test_full_tmpfs_cli_and_server(tmp_path: Path, tiny_tmpfs: Path) -> None:
    """The store on a 8 MiB tmpfs that fills up (ENOSPC): the CLI says so and exits 2, the server shows the
    error and keeps answering, the store stays consistent and readable."""
    root = big_ws(tmp_path / "ws", iterations=6)
    db = tiny_tmpfs / "gpuemu.db"
    env = relkit.child_env({"GPUEMU_STORE": str(db)})
    small = relkit.run_cli(root, "test", "--quick", "--iterations", "1", "--no-progress", env=env)
    assert small.returncode == 1 and relkit.no_traceback(small.stdout + small.stderr), small.stderr
    before = relkit.fingerprint(db)
    proc = relkit.run_cli(root, "test", "--quick", "--no-progress", env=env)
    relkit.record("faults", full_disk=1)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert (
        "cannot write the result store" in proc.stderr
        and "disk full" in proc.stderr
        and relkit.no_traceback(proc.stdout + proc.stderr)
    ), proc.stderr[-3000:]
    assert relkit.integrity(db) == "ok" and relkit.intact_since(db, before) == []
    client = await relkit.start_server(root, {**relkit.QUIET, "storePath": str(db)})
    relkit.record("server", started=1)
    try:
        got = await relkit.request(client, "gpuemu/runOps", {"ids": ["op:wrong_big"], "mode": "quick", "iterations": 6})
        relkit.record("faults", full_disk=1)
        assert got["results"], got
        await relkit.wait_for(
            lambda: any("cannot write the result store" in m.message for m in client.messages),
            60,
            "the server's message about the full store",
            client,
        )
        assert await relkit.answers(client, root)
        code = await relkit.stop_server(client)
    finally:
        await relkit.force_close(client)
    relkit.clean_exit(code)
    assert relkit.integrity(db) == "ok" and relkit.intact_since(db, before) == []
    shutil.rmtree(root / ".gpuemu", ignore_errors=True)


@pytest.mark.asyncio
@pytest.mark.parametrize("damage", ["random_bytes", "sqlite_header_then_garbage"])
async def test_a_corrupt_store_is_a_clear_error_not_a_crash(tmp_path: Path, damage: str) -> None:
    """A store file overwritten with garbage: the CLI and the gate say which file and why (exit 2, no
    traceback), the server reports it and keeps answering."""
    relkit.record("faults", corrupt_store=1)
    root = relkit.good_ws(tmp_path / "ws")
    db = db_path(root)
    db.parent.mkdir(mode=0o700)
    junk = os.urandom(20_000)
    db.write_bytes(junk if damage == "random_bytes" else b"SQLite format 3\x00" + junk)
    for proc in (relkit.run_cli(root, "test", "--quick", "--no-progress"), relkit.run_check(root, "--quick")):
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert f"cannot open the result store {db}: it is damaged" in proc.stderr, proc.stderr
        assert relkit.no_traceback(proc.stdout + proc.stderr), proc.stderr
    client = await relkit.start_server(root)
    relkit.record("server", started=1)
    try:
        got = await relkit.request(client, "gpuemu/runOps", {"ids": ["op:double"]})
        assert got is not None
        await relkit.wait_for(
            lambda: any("result store" in m.message for m in client.messages), 60, "a message about the store", client
        )
        assert await relkit.answers(client, root)
        code = await relkit.stop_server(client)
    finally:
        await relkit.force_close(client)
    relkit.clean_exit(code)
    assert db.read_bytes().endswith(junk), "the damaged file was overwritten"
