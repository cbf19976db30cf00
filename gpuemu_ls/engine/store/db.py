"""The result store: one SQLite file per workspace, shared by the server, the CLI and the Python API.

WAL mode lets readers run beside a writer; every write is a short ``BEGIN IMMEDIATE`` transaction
(taking the write lock up front, so two writers never deadlock on a lock upgrade) retried with
back-off while another process holds the lock. Failures keep the exact input snapshot (compressed,
content-addressed), so ``reproduce`` replays byte for byte even if generation changes later. The
file and its folder are created readable by their owner only. sqlite-utils creates and migrates the
schema and runs the queries; writes go through explicit transactions.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import sqlite3
import time
import uuid
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import sqlite_utils

from ..._version import __version__
from .. import dtypes as dt

if TYPE_CHECKING:
    from ..oracle.outcome import CaseResult

SCHEMA_VERSION = 1
DEFAULT_RELATIVE = Path(".gpuemu") / "gpuemu.db"
LOCK_RETRY_SECONDS = 120.0


class StoreError(Exception):
    """The store cannot be opened or written (a full disk, a read-only folder, a corrupt file)."""


def store_path(root: Path) -> Path:
    env = os.environ.get("GPUEMU_STORE")
    return Path(env).expanduser().resolve() if env else (root / DEFAULT_RELATIVE)


def encode_arrays(arrays: dict[str, np.ndarray]) -> bytes:
    """A compressed, self-describing container for named arrays (bf16 kept as bf16)."""
    header: dict[str, Any] = {}
    chunks: list[bytes] = []
    offset = 0
    for name, arr in arrays.items():
        a = np.asarray(arr, order="C")  # np.ascontiguousarray would turn a 0-d array into shape (1,)
        raw = a.tobytes()
        header[name] = {"dtype": dt.dtype_name(a.dtype), "shape": list(a.shape), "offset": offset, "nbytes": len(raw)}
        chunks.append(raw)
        offset += len(raw)
    head = json.dumps(header).encode("utf-8")
    return zlib.compress(len(head).to_bytes(4, "little") + head + b"".join(chunks), 1)


def decode_arrays(blob: bytes) -> dict[str, np.ndarray]:
    data = zlib.decompress(blob)
    n = int.from_bytes(data[:4], "little")
    header = json.loads(data[4 : 4 + n])
    body = memoryview(data)[4 + n :]
    out = {}
    for name, h in header.items():
        raw = body[h["offset"] : h["offset"] + h["nbytes"]]
        out[name] = np.frombuffer(raw, dtype=dt.numpy_dtype(h["dtype"])).reshape(h["shape"]).copy()
    return out


class Store:
    """A connection to one store file. Cheap to open; safe to use from several processes at once."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            if not self.path.exists():
                fd = os.open(self.path, os.O_CREAT | os.O_RDWR, 0o600)
                os.close(fd)
            conn = sqlite3.connect(str(self.path), timeout=30.0, isolation_level=None, check_same_thread=False)
            conn.execute("PRAGMA busy_timeout = 30000")
            self.db = sqlite_utils.Database(conn)
            self._retry(lambda: self.db.execute("PRAGMA journal_mode = WAL"))
            self.db.execute("PRAGMA synchronous = NORMAL")
            self._migrate()
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"cannot open the result store {self.path}: {exc}") from None
        except OSError as exc:
            raise StoreError(f"cannot create the result store {self.path}: {exc}") from None

    @classmethod
    def for_workspace(cls, root: Path) -> Store:
        return cls(store_path(root))

    def close(self) -> None:
        self.db.conn.close()

    # --- schema ----------------------------------------------------------------------------
    def _migrate(self) -> None:
        version = self.db.execute("PRAGMA user_version").fetchone()[0]
        if version >= SCHEMA_VERSION:
            return
        with self._write():
            self.db["runs"].create(
                {
                    "id": str,
                    "started_at": float,
                    "finished_at": float,
                    "source": str,
                    "mode": str,
                    "seed": int,
                    "iterations": int,
                    "workspace": str,
                    "config_hash": str,
                    "status": str,
                    "host": str,
                    "version": str,
                    "command": str,
                    "pid": int,
                },
                pk="id",
                if_not_exists=True,
            )
            self.db["op_results"].create(
                {
                    "run_id": str,
                    "op": str,
                    "kind": str,
                    "status": str,
                    "cases": int,
                    "passed": int,
                    "failed": int,
                    "errors": int,
                    "max_abs": float,
                    "max_rel": float,
                    "max_ulp": float,
                    "max_ratio": float,
                    "duration": float,
                    "message": str,
                    "diagnosis": str,
                    "detail": str,
                    "finished_at": float,
                },
                pk=("run_id", "op", "kind"),
                if_not_exists=True,
            )
            self.db["snapshots"].create(
                {
                    "id": str,
                    "op": str,
                    "seed": int,
                    "layout": str,
                    "data": bytes,
                    "nbytes": int,
                    "created_at": float,
                },
                pk="id",
                if_not_exists=True,
            )
            self.db["cases"].create(
                {
                    "id": int,
                    "run_id": str,
                    "op": str,
                    "seed": int,
                    "status": str,
                    "kind": str,
                    "dtype": str,
                    "layout": str,
                    "distribution": str,
                    "strategy": str,
                    "shapes": str,
                    "dims": str,
                    "max_abs": float,
                    "max_rel": float,
                    "max_ulp": float,
                    "max_ratio": float,
                    "mismatches": int,
                    "total": int,
                    "message": str,
                    "tolerance": str,
                    "detail": str,
                    "snapshot_id": str,
                    "from_snapshot": int,
                    "created_at": float,
                },
                pk="id",
                if_not_exists=True,
            )
            self.db["cases"].create_index(["op", "seed"], if_not_exists=True)
            self.db["cases"].create_index(["run_id"], if_not_exists=True)
            self.db["cases"].create_index(["op", "status"], if_not_exists=True)
            self.db["op_results"].create_index(["op", "finished_at"], if_not_exists=True)
            self.db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    # --- writing ---------------------------------------------------------------------------
    def _retry(self, fn: Any) -> Any:
        deadline = time.monotonic() + LOCK_RETRY_SECONDS
        delay = 0.01
        while True:
            try:
                return fn()
            except sqlite3.OperationalError as exc:
                msg = str(exc).lower()
                if ("locked" not in msg and "busy" not in msg) or time.monotonic() > deadline:
                    raise
                time.sleep(delay)
                delay = min(delay * 2, 0.5)

    @contextmanager
    def _write(self) -> Iterator[None]:
        conn = self.db.conn
        self._retry(lambda: conn.execute("BEGIN IMMEDIATE"))
        try:
            yield
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        try:
            self._retry(lambda: conn.execute("COMMIT"))
        except sqlite3.OperationalError as exc:
            conn.execute("ROLLBACK")
            raise StoreError(f"cannot write the result store {self.path}: {exc}") from None

    def write(self, fn: Any) -> Any:
        """Run ``fn(conn)`` in one immediate transaction; a full disk becomes a StoreError, not corruption."""
        try:
            with self._write():
                return fn(self.db.conn)
        except sqlite3.OperationalError as exc:
            raise StoreError(f"cannot write the result store {self.path}: {exc}") from None

    def begin_run(
        self,
        *,
        source: str,
        mode: str,
        seed: int | None,
        iterations: int | None,
        workspace: Path,
        config_hash: str,
        command: str = "",
    ) -> str:
        run_id = uuid.uuid4().hex
        row = (
            run_id,
            time.time(),
            None,
            source,
            mode,
            seed,
            iterations,
            str(workspace),
            config_hash,
            "running",
            platform.node(),
            __version__,
            command,
            os.getpid(),
        )
        row = _texts(row)
        self.write(
            lambda c: c.execute(
                "INSERT INTO runs (id, started_at, finished_at, source, mode, seed, iterations, workspace, config_hash,"
                " status, host, version, command, pid) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                row,
            )
        )
        return run_id

    def finish_run(self, run_id: str, status: str) -> None:
        self.write(
            lambda c: c.execute(
                "UPDATE runs SET finished_at = ?, status = ? WHERE id = ?", (time.time(), status, run_id)
            )
        )

    def add_cases(
        self, run_id: str, results: list[CaseResult], *, max_snapshots: int | None = None, root: Path | None = None
    ) -> None:
        """Store case results; non-passing ones with their input snapshot (up to ``max_snapshots``).

        Files inside the workspace ``root`` are stored relative to it, so a store that travels with
        its workspace (a CI artifact, a copied folder) still points at the right lines.
        """
        now = time.time()
        rows = []
        snaps: dict[str, tuple[Any, ...]] = {}
        kept = 0
        for r in results:
            snap_id = None
            if r.snapshot is not None and r.status != "passed" and (max_snapshots is None or kept < max_snapshots):
                blob = encode_arrays(r.snapshot)
                snap_id = hashlib.sha256(blob).hexdigest()[:32]
                snaps[snap_id] = (snap_id, r.op, r.seed, r.spec.layout, blob, len(blob), now)
                kept += 1
            st = r.stats()
            detail = {
                "comparisons": [c.to_dict() for c in r.comparisons],
                "violations": [v.to_dict() for v in r.violations],
                "features": r.features,
                "durations": r.durations,
                "file": _relative(r.file, root),
                "line": r.line,
                "stderr": r.stderr,
                "spec": r.spec.to_dict(),
            }
            rows.append(
                _texts(
                    run_id,
                    r.op,
                    r.seed,
                    r.status,
                    r.kind,
                    r.spec.dtype,
                    r.spec.layout,
                    r.spec.distribution,
                    r.spec.strategy,
                    json.dumps({k: list(v) for k, v in r.spec.shapes.items()}),
                    json.dumps(r.spec.dims),
                    st["max_abs"],
                    st["max_rel"],
                    st["max_ulp"],
                    _finite(st["max_ratio"]),
                    st["mismatches"],
                    st["total"],
                    r.message[:4000],
                    json.dumps(r.tolerance),
                    json.dumps(detail, default=_json_default),
                    snap_id,
                    int(r.from_snapshot),
                    now,
                )
            )

        def insert(c: sqlite3.Connection) -> None:
            c.executemany(
                "INSERT OR IGNORE INTO snapshots (id, op, seed, layout, data, nbytes, created_at)"
                " VALUES (?,?,?,?,?,?,?)",
                list(snaps.values()),
            )
            c.executemany(
                "INSERT INTO cases (run_id, op, seed, status, kind, dtype, layout, distribution, strategy, shapes,"
                " dims, max_abs, max_rel, max_ulp, max_ratio, mismatches, total, message, tolerance, detail,"
                " snapshot_id, from_snapshot, created_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                rows,
            )

        self.write(insert)

    def add_op_result(
        self,
        run_id: str,
        op: str,
        kind: str,
        status: str,
        *,
        cases: int = 0,
        passed: int = 0,
        failed: int = 0,
        errors: int = 0,
        stats: dict[str, Any] | None = None,
        duration: float = 0.0,
        message: str = "",
        diagnosis: str = "",
        detail: dict[str, Any] | None = None,
    ) -> None:
        s = stats or {}
        row = (
            run_id,
            op,
            kind,
            status,
            cases,
            passed,
            failed,
            errors,
            s.get("max_abs"),
            s.get("max_rel"),
            s.get("max_ulp"),
            _finite(s.get("max_ratio")),
            duration,
            message[:4000],
            diagnosis,
            json.dumps(detail or {}, default=_json_default),
            time.time(),
        )
        row = _texts(row)
        self.write(
            lambda c: c.execute(
                "INSERT OR REPLACE INTO op_results (run_id, op, kind, status, cases, passed, failed, errors, max_abs,"
                " max_rel, max_ulp, max_ratio, duration, message, diagnosis, detail, finished_at)"
                " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                row,
            )
        )

    # --- reading ---------------------------------------------------------------------------
    def query(self, sql: str, params: tuple[Any, ...] | dict[str, Any] = ()) -> list[dict[str, Any]]:
        return list(self.db.query(sql, params))

    def latest_op_results(self, kind: str | None = None) -> dict[str, dict[str, Any]]:
        """The most recent result of every op (and kernel), whichever face produced it."""
        where = "WHERE kind = :kind" if kind else ""
        rows = self.query(f"SELECT * FROM op_results {where} ORDER BY finished_at", {"kind": kind} if kind else {})
        return {f"{r['kind']}:{r['op']}" if not kind else r["op"]: r for r in rows}

    def run(self, run_id: str) -> dict[str, Any] | None:
        rows = self.query("SELECT * FROM runs WHERE id = ?", (run_id,))
        return rows[0] if rows else None

    def latest_run(self) -> dict[str, Any] | None:
        rows = self.query("SELECT * FROM runs ORDER BY started_at DESC LIMIT 1")
        return rows[0] if rows else None

    def cases(
        self,
        *,
        run_id: str | None = None,
        op: str | None = None,
        status: str | None = None,
        since: float | None = None,
        not_passed: bool = False,
        limit: int | None = None,
    ) -> list[dict[str, Any]]:
        clauses, params = [], {}
        for key, val in (("run_id", run_id), ("op", op), ("status", status)):
            if val is not None:
                clauses.append(f"{key} = :{key}")
                params[key] = val
        if since is not None:
            clauses.append("created_at >= :since")
            params["since"] = since
        if not_passed:
            clauses.append("status != 'passed'")
        sql = "SELECT * FROM cases" + (" WHERE " + " AND ".join(clauses) if clauses else "") + " ORDER BY id"
        if limit:
            sql += f" LIMIT {int(limit)}"
        return self.query(sql, params)

    def latest_failures(self, op: str | None = None) -> list[dict[str, Any]]:
        """Non-passing cases of the latest run of each op: the current state of the workspace."""
        latest = self.latest_op_results(kind="op")
        out: list[dict[str, Any]] = []
        for name, row in sorted(latest.items()):
            if op is not None and name != op:
                continue
            out += self.cases(run_id=row["run_id"], op=name, not_passed=True)
        return out

    def find_case(self, op: str, seed: int) -> dict[str, Any] | None:
        """The newest stored case for (op, seed), preferring one that kept its input snapshot."""
        rows = self.query(
            "SELECT * FROM cases WHERE op = ? AND seed = ? ORDER BY (snapshot_id IS NULL), id DESC LIMIT 1", (op, seed)
        )
        return rows[0] if rows else None

    def load_snapshot(self, snapshot_id: str) -> dict[str, np.ndarray] | None:
        rows = self.query("SELECT data FROM snapshots WHERE id = ?", (snapshot_id,))
        return decode_arrays(rows[0]["data"]) if rows else None

    def find_minimized(self, op: str, seed: int) -> tuple[Any, dict[str, np.ndarray]] | None:
        """The newest minimized case of (op, seed) (a ``minimize`` run) and its inputs."""
        from ..cases.plan import CaseSpec

        rows = self.query(
            "SELECT cases.* FROM cases JOIN runs ON runs.id = cases.run_id WHERE runs.source = 'minimize' AND"
            " cases.op = ? AND cases.seed = ? AND cases.snapshot_id IS NOT NULL ORDER BY cases.id DESC LIMIT 1",
            (op, seed),
        )
        if not rows:
            return None
        snap = self.load_snapshot(rows[0]["snapshot_id"])
        detail = json.loads(rows[0]["detail"] or "{}")
        if snap is None or "spec" not in detail:
            return None
        return CaseSpec.from_dict(detail["spec"]), snap

    def count(self, table: str) -> int:
        return int(self.db.execute(f"SELECT count(*) FROM [{table}]").fetchone()[0])


def _relative(file: str | None, root: Path | None) -> str | None:
    if not file or root is None:
        return file
    try:
        return Path(file).resolve().relative_to(root.resolve()).as_posix()
    except (ValueError, OSError):
        return file


def _finite(x: Any) -> Any:
    if isinstance(x, float) and not np.isfinite(x):
        return 1e300 if x > 0 else None
    return x


def _json_default(o: Any) -> Any:
    if isinstance(o, (np.integer,)):
        return int(o)
    if isinstance(o, (np.floating,)):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, tuple):
        return list(o)
    return str(o)


def _text(value: Any) -> Any:
    """Text from user code kept losslessly: a lone surrogate (``os.fsdecode`` of a non-UTF-8 file name in an
    exception message) cannot be encoded to UTF-8 and would lose the whole run, so it is stored as its
    ``\\udcff`` escape instead; everything else is stored as it is."""
    if not isinstance(value, str):
        return value
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    return value


def _texts(*values: Any) -> tuple[Any, ...]:
    """A row with every text value storable (see :func:`_text`); one tuple argument is taken as the row."""
    if len(values) == 1 and isinstance(values[0], tuple):
        values = values[0]
    return tuple(_text(v) for v in values)
