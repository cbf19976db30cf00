"""Stores that cannot be read, written or trusted, through the real CLI, gate and language server.

Each bad store is made from a real store (a real ``gpuemu test`` run): interior pages overwritten (header
intact), truncated, empty, garbage, a read-only file or folder (with and without rows still in the WAL), a
newer schema, a full disk (RLIMIT_FSIZE: EFBIG), runs killed with -9. Every reading command and the gate
must give one clear message naming the file (exit 2) or read what can be read, never a traceback;
``gpuemu store check|repair|reset`` must say what is wrong and keep the old file; read-only stores stay
readable and unchanged; a newer schema is never written; a full disk loses nothing already stored; a
killed run reads as ``interrupted``.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
import resource
import shutil
import signal
import sqlite3
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import relkit
from kit.store import db_path

from gpuemu_ls.engine.store.prune import RETENTION_TABLES

WRONG_PY = """import os
import time

import numpy as np


def double(x):
    return x * 2


def wrong(x):
    return x * 3


def slow(x):
    time.sleep(float(os.environ.get("SLOW_SECONDS", "0")))
    return x * 2


def reference(x):
    return np.asarray(x, dtype=np.float64) * 2.0
"""


def store_ws(root: Path, *, big: bool = False) -> Path:
    """Ops ``double`` (passes), ``wrong`` (fails every case) and ``slow`` (passes, sleeping $SLOW_SECONDS)."""
    toml = relkit.HEADER.format(name="store", validation="timeout = 60\n", quick=4)
    dims = (
        "B = 64\nN = 4096" if big else "B = { min = 1, max = 4, default = 2 }\nN = { min = 2, max = 16, default = 8 }"
    )
    for name in ("double", "wrong", "slow"):
        toml += relkit.op_block(name, f'module = "kern:{name}"\nreference = "kern:reference"', dims=dims)
    return relkit.write_ws(root, toml, {"kern.py": WRONG_PY})


@pytest.fixture(scope="module")
def template(module_tmp: Path) -> tuple[Path, int]:
    """A workspace whose store holds one real run of 40 cases per op; and a seed of a stored failing case."""
    root = store_ws(module_tmp / "template")
    proc = relkit.run_cli(root, "test", "--quick", "--iterations", "40", "--no-progress")
    assert proc.returncode == 1 and relkit.no_traceback(proc.stdout + proc.stderr), proc.stderr
    seed = relkit.store_rows(db_path(root), "SELECT seed FROM cases WHERE op = 'wrong' AND status = 'failed'")
    return root, int(seed[0][0])


def copy_ws(template: tuple[Path, int], dest: Path) -> tuple[Path, Path, int]:
    root, seed = template
    shutil.copytree(root, dest)
    return dest, db_path(dest), seed


def digest(*paths: Path) -> str:
    """What the files hold (an empty -wal that a read-only reader of a writable folder creates is no change)."""
    h = hashlib.sha256()
    for p in paths:
        h.update((p.read_bytes() if p.exists() else b"") or b"<absent or empty>")
    return h.hexdigest()


def clean(proc: subprocess.CompletedProcess[str]) -> str:
    out = proc.stdout + proc.stderr
    assert relkit.no_traceback(out), out[-3000:]
    assert "DatabaseError" not in out and "sqlite3." not in out, out[-3000:]
    return out


def store_error(proc: subprocess.CompletedProcess[str], db: Path, *words: str) -> None:
    """Exit 2, one message naming the store file and holding ``words``, no traceback."""
    clean(proc)
    assert proc.returncode == 2, (proc.returncode, proc.stdout[-2000:], proc.stderr[-2000:])
    assert str(db) in proc.stderr, proc.stderr
    for w in words:
        assert w in proc.stderr, (w, proc.stderr)


def reading(seed: int) -> list[tuple[str, ...]]:
    """Every command that only reads the store."""
    return [
        ("ops",),
        ("ops", "--format", "json"),
        ("failures",),
        ("failures", "--all"),
        ("report",),
        ("report", "--format", "junit"),
        ("reproduce", "--op", "wrong", "--seed", str(seed), "--no-repro"),
        ("baseline", "store", "nightly"),
        ("store", "runs"),
    ]


def writing(root: Path, **kw: Any) -> list[subprocess.CompletedProcess[str]]:
    """``gpuemu test`` and the gate (``gpuemu-ls --check``), one quick case of each op."""
    return [
        relkit.run_cli(root, "test", "--quick", "--iterations", "1", "--no-progress", **kw),
        relkit.run_check(root, "--quick", "--iterations", "1", "--no-progress", **kw),
    ]


# --- damaged files -----------------------------------------------------------------------------------
def damage(db: Path, kind: str) -> None:
    data = bytearray(db.read_bytes())
    page = int.from_bytes(data[16:18], "big")
    pages = len(data) // page
    rng = random.Random(kind)
    if kind == "interior_pages":  # every page but the first (the header) loses its b-tree header
        for p in range(1, pages):
            data[p * page : p * page + 64] = b"\xa5" * 64
    elif kind == "middle_pages":  # garbage over the middle third of the file, page-aligned
        for p in range(pages // 3, 2 * pages // 3):
            data[p * page : (p + 1) * page] = rng.randbytes(page)
    elif kind == "truncated":
        data = data[: (pages // 2) * page + 123]
    elif kind == "truncated_in_header":
        data = data[:60]
    elif kind == "zero_length":
        data = bytearray()
    elif kind == "garbage":
        data = bytearray(rng.randbytes(len(data)))
    elif kind == "header_then_garbage":
        data = data[:100] + rng.randbytes(len(data) - 100)
    else:
        raise AssertionError(kind)
    db.write_bytes(bytes(data))


def _readable_rows(path: Path, table: str) -> int:
    """Rows of ``table`` SQLite itself can still read from a damaged file, one rowid at a time."""
    import sqlite3

    conn = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    try:
        try:
            top = conn.execute(f"SELECT max(rowid) FROM {table}").fetchone()[0] or 0
        except sqlite3.DatabaseError:
            top = 10_000
        found = 0
        for rowid in range(1, top + 1):
            try:
                found += conn.execute(f"SELECT count(*) FROM {table} WHERE rowid = ?", (rowid,)).fetchone()[0]
            except sqlite3.DatabaseError:
                continue
        return found
    except sqlite3.DatabaseError:
        return 0
    finally:
        conn.close()


DAMAGED = ["interior_pages", "truncated", "truncated_in_header", "zero_length", "garbage", "header_then_garbage"]


@pytest.mark.parametrize("kind", DAMAGED)
def test_a_damaged_store_is_one_clear_error_everywhere_and_repair_recovers(
    tmp_path: Path, template: tuple[Path, int], kind: str
) -> None:
    root, db, seed = copy_ws(template, tmp_path / "ws")
    damage(db, kind)
    relkit.record("faults", corrupt_store=1)
    bad = db.read_bytes()
    for args in reading(seed):
        store_error(relkit.run_cli(root, *args), db, "damaged", "gpuemu store repair", "gpuemu store reset")
    for proc in writing(root):
        store_error(proc, db, "damaged", "gpuemu store repair")
    assert db.read_bytes() == bad, "a command wrote into the damaged store"

    check = relkit.run_cli(root, "store", "check")
    clean(check)
    assert check.returncode == 1 and "damaged" in check.stdout, check.stdout + check.stderr

    repaired = relkit.run_cli(root, "store", "repair")
    clean(repaired)
    assert repaired.returncode == 0, repaired.stdout + repaired.stderr
    kept = sorted(db.parent.glob(f"{db.name}.corrupt-*"))
    kept = [k for k in kept if not k.name.endswith(("-wal", "-shm"))]
    assert len(kept) == 1 and kept[0].read_bytes() == bad, "the damaged file was not kept as it was"
    assert relkit.integrity(db) == "ok"
    assert relkit.run_cli(root, "store", "check").returncode == 0
    ops = relkit.run_cli(root, "ops")
    assert ops.returncode == 0 and relkit.no_traceback(ops.stderr), ops.stderr
    if kind == "truncated":  # every verdict still readable in the first half is recovered, not "never run"
        readable = _readable_rows(kept[0], "op_results")
        assert relkit.counts(db)["op_results"] >= readable, (readable, relkit.counts(db))
        if readable:
            assert "failed" in ops.stdout or "passed" in ops.stdout, ops.stdout
    again = relkit.run_cli(root, "test", "--quick", "--iterations", "1", "--no-progress")
    assert again.returncode == 1 and relkit.no_traceback(again.stdout + again.stderr), again.stderr
    assert relkit.integrity(db) == "ok"


def test_damage_in_the_middle_reads_what_it_can_and_repair_keeps_the_rest(
    tmp_path: Path, template: tuple[Path, int]
) -> None:
    """Garbage over the middle third of a real store (the header and the verdict pages intact): commands
    that touch a damaged page say so (exit 2), the others answer; repair keeps every readable case."""
    root, db, seed = copy_ws(template, tmp_path / "ws")
    total = relkit.counts(db)["cases"]
    run = relkit.store_rows(db, "SELECT id FROM runs")[0][0]
    pinned = relkit.run_cli(root, "store", "pin", run)
    assert pinned.returncode == 0, pinned.stdout + pinned.stderr
    conn = sqlite3.connect(db)
    with conn:  # retention's records, as a prune leaves them
        for sql in RETENTION_TABLES.values():
            conn.execute(sql)
        conn.execute("INSERT INTO pruned_seeds VALUES ('wrong', 7, 1e9)")
        conn.execute("INSERT INTO kept_failures VALUES ('gone-run', 'ci', 'quick', 1e9)")
    conn.close()
    damage(db, "middle_pages")
    relkit.record("faults", corrupt_store=1)
    for args in reading(seed):
        proc = relkit.run_cli(root, *args)
        clean(proc)
        if proc.returncode == 2 and "baseline" not in args:
            assert str(db) in proc.stderr and "damaged" in proc.stderr, proc.stderr
    store_error(relkit.run_cli(root, "failures", "--all"), db, "damaged")  # scans every case
    for proc in writing(root):
        clean(proc)
        assert proc.returncode in (1, 2), proc.stdout + proc.stderr
    check = relkit.run_cli(root, "store", "check", "--format", "json")
    clean(check)
    found = json.loads(check.stdout)
    assert check.returncode == 1 and found["problems"], found
    repaired = relkit.run_cli(root, "store", "repair", "--format", "json")
    clean(repaired)
    done = json.loads(repaired.stdout)
    assert repaired.returncode == 0 and done["kept"] and Path(done["kept"]).exists(), done
    assert 0 < done["recovered"]["cases"] < total + 10, done
    assert done["recovered"]["runs"] >= 1 and done["recovered"]["op_results"] >= 3, done
    assert relkit.integrity(db) == "ok"
    after = relkit.run_cli(root, "failures", "--all")
    assert after.returncode == 0 and "wrong" in after.stdout, after.stdout + after.stderr
    assert relkit.store_rows(db, "SELECT run_id FROM pins") == [(run,)], "repair dropped the pinned run"
    assert relkit.store_rows(db, "SELECT op, seed FROM pruned_seeds") == [("wrong", 7)]
    assert relkit.store_rows(db, "SELECT run_id FROM kept_failures") == [("gone-run",)]


def test_store_reset_keeps_the_old_file_and_starts_empty(tmp_path: Path, template: tuple[Path, int]) -> None:
    root, db, _ = copy_ws(template, tmp_path / "ws")
    damage(db, "garbage")
    bad = db.read_bytes()
    proc = relkit.run_cli(root, "store", "reset")
    clean(proc)
    assert proc.returncode == 0 and "kept the old store as" in proc.stdout, proc.stdout + proc.stderr
    kept = [k for k in db.parent.glob(f"{db.name}.corrupt-*") if not k.name.endswith(("-wal", "-shm"))]
    assert len(kept) == 1 and kept[0].read_bytes() == bad
    ops = relkit.run_cli(root, "ops")
    assert ops.returncode == 0 and ops.stdout.count("never run") == 3, ops.stdout
    healthy = relkit.run_cli(root, "store", "reset")  # a healthy store is kept as .old-<time>
    assert healthy.returncode == 0 and list(db.parent.glob(f"{db.name}.old-*")), healthy.stdout
    assert relkit.run_cli(root, "store", "check").returncode == 0


# --- read-only stores ----------------------------------------------------------------------------------
def _rows_in_wal(db: Path) -> None:
    """Commit one more run that stays in the WAL (a writer that ended without a checkpoint)."""
    code = (
        "import os, sqlite3, sys\n"
        "c = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
        "c.execute('PRAGMA wal_autocheckpoint = 0')\n"
        "c.execute(\"INSERT INTO runs (id, started_at, source, mode, status) VALUES ('in-the-wal', 1e9, 'cli',"
        " 'quick', 'passed')\")\n"
        "os._exit(0)\n"
    )
    subprocess.run([relkit.PY, "-c", code, str(db)], check=True, timeout=60)
    assert (db.parent / (db.name + "-wal")).stat().st_size > 0


@pytest.fixture
def restore_modes() -> Iterator[list[Path]]:
    paths: list[Path] = []
    yield paths
    for p in paths:
        if p.exists():
            p.chmod(0o700 if p.is_dir() else 0o600)


@pytest.mark.parametrize("where", ["file", "folder", "folder_wal", "folder_wal_no_shm"])
def test_a_read_only_store_is_read_in_full_and_never_written(
    tmp_path: Path, template: tuple[Path, int], where: str, restore_modes: list[Path]
) -> None:
    root, db, seed = copy_ws(template, tmp_path / "ws")
    wal, shm = db.parent / (db.name + "-wal"), db.parent / (db.name + "-shm")
    if where.startswith("folder_wal"):
        _rows_in_wal(db)
        if where.endswith("no_shm"):
            shm.unlink()
    before = digest(db, wal)
    restore_modes += [db.parent, db]
    db.chmod(0o400)
    if where.startswith("folder"):
        db.parent.chmod(0o500)
    relkit.record("security", cases=1)
    cap = relkit.drop_dac_caps

    ops = relkit.run_cli(root, "ops", preexec_fn=cap)
    clean(ops)
    assert ops.returncode == 0 and "never run" not in ops.stdout, ops.stdout + ops.stderr
    assert any(line.startswith("wrong") and " failed " in line for line in ops.stdout.splitlines()), ops.stdout
    failures = relkit.run_cli(root, "failures", preexec_fn=cap)
    clean(failures)
    assert failures.returncode == 0 and "failing cases" in failures.stdout, failures.stdout + failures.stderr
    report = relkit.run_cli(root, "report", "--format", "json", preexec_fn=cap)
    clean(report)
    doc = json.loads(report.stdout)
    assert report.returncode == 1 and {o["name"]: o["status"] for o in doc["ops"]}["wrong"] == "failed", doc
    replay = relkit.run_cli(root, "reproduce", "--op", "wrong", "--seed", str(seed), preexec_fn=cap)
    clean(replay)
    assert replay.returncode == 1 and "stored snapshot" in replay.stdout and "FAILED" in replay.stdout, (
        replay.stdout + replay.stderr
    )
    assert "not stored" in replay.stderr, replay.stderr
    runs = relkit.run_cli(root, "store", "runs", "--format", "json", preexec_fn=cap)
    clean(runs)
    ids = {r["id"] for r in json.loads(runs.stdout)["runs"]}
    assert runs.returncode == 0 and len(ids) >= 1, runs.stdout
    if where.startswith("folder_wal"):
        assert "in-the-wal" in ids, "rows committed to the WAL were not read"
    check = relkit.run_cli(root, "store", "check", preexec_fn=cap)
    assert check.returncode == 0 and " ok" in check.stdout, check.stdout + check.stderr
    for proc in writing(root, preexec_fn=cap):
        store_error(proc, db, "read-only")
    if where.startswith("folder"):
        store_error(relkit.run_cli(root, "store", "reset", preexec_fn=cap), db, "read-only")
    assert digest(db, wal) == before, "a reading command changed a read-only store"


def test_a_read_only_folder_without_a_store_reads_as_empty(tmp_path: Path, restore_modes: list[Path]) -> None:
    root = store_ws(tmp_path / "ws")
    (root / ".gpuemu").mkdir(mode=0o500)
    restore_modes.append(root / ".gpuemu")
    ops = relkit.run_cli(root, "ops", preexec_fn=relkit.drop_dac_caps)
    assert ops.returncode == 0 and ops.stdout.count("never run") == 3, ops.stdout + ops.stderr
    proc = relkit.run_cli(
        root, "test", "--quick", "--iterations", "1", "--no-progress", preexec_fn=relkit.drop_dac_caps
    )
    store_error(proc, db_path(root))


# --- a newer schema ----------------------------------------------------------------------------------
@pytest.mark.parametrize("compatible", [True, False])
def test_a_newer_schema_is_never_written(tmp_path: Path, template: tuple[Path, int], compatible: bool) -> None:
    root, db, seed = copy_ws(template, tmp_path / "ws")
    conn = sqlite3.connect(str(db), isolation_level=None)
    conn.execute("PRAGMA user_version = 99")
    if not compatible:
        conn.execute("ALTER TABLE cases DROP COLUMN detail")
    conn.close()
    before = digest(db)
    relkit.record("config", cases=1)
    for proc in writing(root):
        store_error(proc, db, "newer gpuemu", "schema 99")
    store_error(relkit.run_cli(root, "minimize", "--op", "wrong", "--seed", str(seed)), db, "newer gpuemu")
    ops = relkit.run_cli(root, "ops")
    failures = relkit.run_cli(root, "failures", "--all")
    if compatible:
        for proc in (ops, failures):
            clean(proc)
            assert proc.returncode == 0 and "newer gpuemu" in proc.stderr, proc.stdout + proc.stderr
        assert "never run" not in ops.stdout and "wrong" in failures.stdout
    else:
        store_error(failures, db, "newer gpuemu", "cases.detail")
    assert digest(db) == before, "a store of a newer schema was written"


# --- a full disk --------------------------------------------------------------------------------------
def _fsize(limit: int) -> Callable[[], None]:
    def pre() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return pre


@pytest.mark.parametrize("face", ["cli", "gate"])
def test_a_full_disk_says_disk_full_and_keeps_every_stored_run(tmp_path: Path, face: str) -> None:
    """EFBIG (RLIMIT_FSIZE) in the middle of a run's large transaction (1 MiB snapshots of failing cases)."""
    root = store_ws(tmp_path / "ws", big=True)
    first = relkit.run_cli(root, "test", "--quick", "--iterations", "1", "--op", "double", "--op", "wrong")
    assert first.returncode == 1, first.stderr
    db = db_path(root)
    before = relkit.fingerprint(db)
    wal = db.parent / (db.name + "-wal")
    limit = db.stat().st_size + (wal.stat().st_size if wal.exists() else 0) + 300_000
    args = ("--quick", "--iterations", "6", "--op", "wrong", "--no-progress")
    if face == "cli":
        proc = relkit.run_cli(root, "test", *args, preexec_fn=_fsize(limit))
    else:
        proc = relkit.run_check(root, *args, preexec_fn=_fsize(limit))
    relkit.record("faults", full_disk=1)
    store_error(proc, db, "disk full", "cannot write the result store")
    assert "no transaction is active" not in proc.stderr, proc.stderr
    assert relkit.integrity(db) == "ok"
    problems = relkit.intact_since(db, before)
    relkit.record("rows", written=len(before["cases"]), lost=sum(p.startswith("cases") for p in problems))
    assert problems == []
    ops = relkit.run_cli(root, "ops")
    assert ops.returncode == 0 and "never run" in ops.stdout and " failed " in ops.stdout, ops.stdout


def test_a_full_disk_before_the_store_exists(tmp_path: Path) -> None:
    root = store_ws(tmp_path / "ws")
    proc = relkit.run_cli(root, "test", "--quick", "--iterations", "1", "--no-progress", preexec_fn=_fsize(1000))
    relkit.record("faults", full_disk=1)
    store_error(proc, db_path(root), "disk full")
    left = [p.name for p in (root / ".gpuemu").iterdir()] if (root / ".gpuemu").exists() else []
    half_made = [n for n in left if n.startswith(".") and n != ".gitignore"]  # the folder's own .gitignore stays
    assert not half_made, f"a half-made store was left behind: {left}"
    again = relkit.run_cli(root, "test", "--quick", "--iterations", "1", "--no-progress")
    assert again.returncode == 1 and relkit.no_traceback(again.stderr), again.stderr


# --- runs killed with -9 -------------------------------------------------------------------------------
def _running(db: Path) -> list[str]:
    """Runs marked ``running`` in the file itself (read-only: polling must not create an empty store file)."""
    if not db.exists():
        return []
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=60)
        try:
            return [r[0] for r in conn.execute("SELECT id FROM runs WHERE status = 'running'").fetchall()]
        finally:
            conn.close()
    except sqlite3.Error:
        return []


def _listed(root: Path, **kw: Any) -> dict[str, str]:
    proc = relkit.run_cli(root, "store", "runs", "--format", "json", **kw)
    clean(proc)
    assert proc.returncode == 0, proc.stderr
    return {r["id"]: r["status"] for r in json.loads(proc.stdout)["runs"]}


@pytest.mark.parametrize("face", ["cli", "gate"])
def test_a_run_killed_with_kill9_reads_as_interrupted(
    tmp_path: Path, face: str, cleanup_pids: list[int], restore_modes: list[Path]
) -> None:
    root = store_ws(tmp_path / "ws")
    db = db_path(root)
    tag = relkit.new_tag()
    env = relkit.child_env({relkit.TAG_VAR: tag, "SLOW_SECONDS": "30"})
    args = ["--quick", "--iterations", "4", "--op", "slow", "--no-progress"]
    cmd = [*relkit.CLI, "-C", str(root), "test", *args] if face == "cli" else [*relkit.CHECK, str(root), *args]
    proc = subprocess.Popen(cmd, env=env, cwd=str(root), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    cleanup_pids.append(proc.pid)
    run_id = relkit.wait_until(lambda: (_running(db) or [None])[0], 120, "the run row")
    assert _listed(root)[run_id] == "running", "a live run was marked interrupted"
    live = relkit.run_cli(root, "test", "--quick", "--iterations", "1", "--op", "double", "--no-progress")
    assert live.returncode == 0, live.stderr
    assert _running(db) == [run_id], "a writer marked a live run interrupted"
    proc.kill()
    proc.wait(30)
    relkit.record("faults", cli_kill9=1)
    relkit.kill_all(relkit.tagged(tag))
    assert _listed(root)[run_id] == "interrupted"
    assert _running(db) == [run_id], "a reading command wrote to the store"
    ro = tmp_path / "artifact"  # the same store as a read-only CI artifact
    shutil.copytree(root, ro)
    restore_modes += [ro / ".gpuemu"]
    (ro / ".gpuemu").chmod(0o500)
    assert _listed(ro, preexec_fn=relkit.drop_dac_caps)[run_id] == "interrupted"
    after = relkit.run_cli(root, "test", "--quick", "--iterations", "1", "--op", "double", "--no-progress")
    assert after.returncode == 0, after.stderr
    assert relkit.store_rows(db, "SELECT status FROM runs WHERE id = ?", (run_id,)) == [("interrupted",)]
    text = relkit.run_cli(root, "store", "runs")
    assert any(run_id[:12] in line and "interrupted" in line for line in text.stdout.splitlines()), text.stdout
    check = relkit.run_cli(root, "store", "check")
    assert check.returncode == 0 and "1 interrupted" in check.stdout, check.stdout


# --- the language server -------------------------------------------------------------------------------
@pytest.mark.asyncio
@pytest.mark.parametrize("kind", ["interior_pages", "newer_schema"])
async def test_the_server_reports_a_bad_store_and_keeps_serving(
    tmp_path: Path, template: tuple[Path, int], kind: str
) -> None:
    root, db, _ = copy_ws(template, tmp_path / "ws")
    if kind == "newer_schema":
        conn = sqlite3.connect(str(db), isolation_level=None)
        conn.execute("PRAGMA user_version = 99")
        conn.close()
    else:
        damage(db, kind)
    before = digest(db)
    client = await relkit.start_server(root)
    relkit.record("server", started=1)
    try:
        got = await relkit.request(client, "gpuemu/runOps", {"ids": ["op:double"], "mode": "quick", "iterations": 1})
        assert got is not None
        words = "damaged" if kind == "interior_pages" else "newer gpuemu"
        await relkit.wait_for(
            lambda: any(str(db) in m.message and words in m.message for m in client.messages),
            60,
            f"a message naming the store and saying {words!r}",
            client,
        )
        assert await relkit.answers(client, root)
        if kind == "newer_schema":  # still read: the stored verdicts show
            found = await relkit.request(client, "gpuemu/discoverOps", {})
            states = {o["name"]: o["status"] for o in _ops(found)}
            assert states.get("wrong") == "failed", found
        code = await relkit.stop_server(client)
    finally:
        await relkit.force_close(client)
    relkit.clean_exit(code)
    assert digest(db) == before, "the server wrote to a store it cannot trust"


def _ops(found: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for ws in found.get("workspaces", []):
        out += [i for i in ws.get("items", []) if i.get("kind") == "op"]
    return out


def test_a_store_path_that_is_a_folder_is_never_read_written_or_moved(tmp_path: Path) -> None:
    root = store_ws(tmp_path / "ws")
    folder = tmp_path / "not a file"
    folder.mkdir()
    env = relkit.child_env({"GPUEMU_STORE": str(folder)})
    for args in (("ops",), ("failures",), ("report",), ("store", "runs"), ("store", "repair"), ("store", "reset")):
        store_error(relkit.run_cli(root, *args, env=env), folder)
    for proc in writing(root, env=env):
        store_error(proc, folder, "not a file")
    assert folder.is_dir() and not list(folder.iterdir())


SLOW_KERN = """\
import time

import numpy as np


def slow(x):
    time.sleep(0.25)
    return x * 2


def reference(x):
    return np.asarray(x, dtype=np.float64) * 2.0
"""


def _slow_ws(root: Path) -> Path:
    toml = relkit.HEADER.format(name="slow", validation="iterations = 24\n", quick=2)
    toml += relkit.op_block("slow", 'module = "kern:slow"\nreference = "kern:reference"')
    return relkit.write_ws(root, toml, {"kern.py": SLOW_KERN})


def _running_run(root: Path) -> None:
    db = root / ".gpuemu" / "gpuemu.db"
    relkit.wait_until(
        lambda: db.exists() and relkit.store_rows(db, "SELECT id FROM runs WHERE status = 'running'"),
        60,
        "a running run",
    )


@pytest.mark.parametrize("action", ["reset", "repair"])
def test_store_maintenance_refuses_while_a_run_writes_and_the_run_keeps_its_results(
    tmp_path: Path, action: str
) -> None:
    """`store reset`/`repair` during a run diverted its results into the renamed file (`ops` then said "never
    run"). The run holds the store's lock: maintenance refuses, exit 2, and the run's results stay where
    `gpuemu ops` reads them."""
    root = _slow_ws(tmp_path / "ws")
    run = relkit.start_cli(root, "test", "--no-progress")
    try:
        _running_run(root)
        done = relkit.run_cli(root, "store", action)
        assert done.returncode == 2 and "while a run writes it" in done.stderr, done.stdout + done.stderr
        out, err = run.communicate(timeout=120)
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == 0 and "stored" in out and "NOT stored" not in out, out + err
    ops = relkit.run_cli(root, "ops")
    assert ops.returncode == 0 and "never run" not in ops.stdout and "passed" in ops.stdout, ops.stdout
    assert relkit.run_cli(root, "store", "reset").returncode == 0  # nothing running now: it goes ahead
    relkit.record("concurrency", writers=2)


def test_a_forced_reset_during_a_run_is_said_and_never_reported_as_stored(tmp_path: Path) -> None:
    root = _slow_ws(tmp_path / "ws")
    run = relkit.start_cli(root, "test", "--no-progress")
    try:
        _running_run(root)
        done = relkit.run_cli(root, "store", "reset", "--force")
        assert done.returncode == 0, done.stdout + done.stderr
        out, err = run.communicate(timeout=120)
    finally:
        if run.poll() is None:
            run.kill()
    assert "NOT stored: the result store was replaced during the run" in out, out + err
    relkit.record("faults", injected=1)


@pytest.mark.asyncio
async def test_the_server_reads_the_new_store_after_a_reset(tmp_path: Path) -> None:
    """An open server kept reading the file a reset moved aside, and stopped seeing CLI results."""
    root = relkit.good_ws(tmp_path / "ws")
    assert relkit.run_cli(root, "test", "--quick").returncode == 0
    client = await relkit.start_server(root, {**relkit.QUIET, "pollStoreSeconds": 0.2})
    relkit.record("server", started=1)
    try:

        async def status() -> str:
            found = await relkit.request(client, "gpuemu/discoverOps", {})
            return found["workspaces"][0]["items"][0]["status"]

        assert await status() == "passed"
        assert relkit.run_cli(root, "store", "reset").returncode == 0
        (root / "kern.py").write_text((root / "kern.py").read_text().replace("return x * 2", "return x * 3"))
        assert relkit.run_cli(root, "test", "--quick").returncode == 1  # a failure lands in the new store
        for _ in range(100):
            if await status() == "failed":
                break
            await asyncio.sleep(0.2)
        assert await status() == "failed", "the server kept reading the store that the reset moved aside"
        code = await relkit.stop_server(client)
    finally:
        await relkit.force_close(client)
    relkit.clean_exit(code)
