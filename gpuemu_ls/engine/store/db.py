"""The result store: one SQLite file per workspace, shared by the server, the CLI and the Python API.

WAL mode lets readers run beside a writer; every write is a short ``BEGIN IMMEDIATE`` transaction
(taking the write lock up front, so two writers never deadlock on a lock upgrade) retried with
back-off while another process holds the lock. Failures keep the exact input snapshot (compressed,
content-addressed), so ``reproduce`` replays byte for byte even if generation changes later. The
file and its folder are created readable by their owner only. sqlite-utils creates and migrates the
schema and runs the queries; writes go through explicit transactions.

A store that cannot be trusted is never guessed around: a damaged, truncated or foreign file, a full disk,
a read-only file and a newer schema each raise a :class:`StoreError` naming the file and what to do
(``store/maintain.py`` checks, repairs and resets). Readers open the file read-only, so a CI artifact or a
read-only folder can still be inspected. Each run records who holds it (pid and process start time), so a
run whose process was killed reads as ``interrupted``, not ``running`` forever.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import platform
import resource
import shutil
import signal
import sqlite3
import tempfile
import threading
import time
import urllib.parse
import uuid
import zlib
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import sqlite_utils

from ..._version import __version__
from .. import dtypes as dt
from ..errors import StoreError, UsageError

if TYPE_CHECKING:
    from ..oracle.outcome import CaseResult

SCHEMA_VERSION = 2
DEFAULT_RELATIVE = Path(".gpuemu") / "gpuemu.db"
LOCK_RETRY_SECONDS = 120.0
#: The columns this version reads: a store of a newer schema is readable as long as it still has them all.
READ_COLUMNS = {
    "runs": {"id", "started_at", "finished_at", "source", "mode", "status", "host", "pid"},
    "op_results": {"run_id", "op", "kind", "status", "message", "detail", "finished_at"},
    "snapshots": {"id", "data"},
    "cases": {"id", "run_id", "op", "seed", "status", "kind", "shapes", "detail", "snapshot_id", "created_at"},
}
#: Indexes for the reads the faces make, beyond schema 1's: (name, table, columns). The failures of a run's op
#: (``WHERE run_id = ? AND op = ? ... ORDER BY id``: rowid order within the index, no sort, no scan of the
#: run's other ops' cases) and the latest result per op.
READ_INDEXES = (
    ("idx_cases_run_id_op", "cases", ("run_id", "op")),
    ("idx_op_results_kind_op_finished_at", "op_results", ("kind", "op", "finished_at")),
)
#: ``runs.owner`` of a row whose writer is known only by ``pid`` (rows of schema 1 still ``running``).
OWNER_PID_ONLY = "pid"


def store_path(root: Path) -> Path:
    env = os.environ.get("GPUEMU_STORE")
    return Path(env).expanduser().resolve() if env else (root / DEFAULT_RELATIVE)


def _make_folder(folder: Path) -> None:
    """The store's folder, with a ``.gitignore`` of ``*`` when this call creates it: results, snapshots and
    reproductions are this machine's state, never to show in ``git status`` (a folder that already existed
    is left as its owner has it)."""
    try:
        folder.mkdir(parents=True, mode=0o700)
    except FileExistsError:
        return
    try:
        fd = os.open(folder / ".gitignore", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)  # owner-only, like the rest
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write("*\n")
    except OSError:  # a folder it cannot write into fails below, with the store's own message
        pass


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


#: The longest database path SQLite's unix VFS opens (MAX_PATHNAME), in bytes.
SQLITE_MAX_PATHNAME = 512


class Store:
    """A connection to one store file. Cheap to open; safe to use from several processes at once.

    ``readonly=True`` is for commands that only read (``ops``, ``failures``, ``report``, ``reproduce``, the
    language server's views): the file is opened with SQLite's ``mode=ro`` and never written, so a store on a
    read-only file or folder (a CI artifact) can still be inspected; a missing store reads as empty and is not
    created. Every SQLite error becomes a :class:`StoreError` that names the file and what to do.
    """

    def __init__(self, path: Path, *, readonly: bool = False) -> None:
        self.path = Path(path)
        self.readonly = readonly
        self.missing = False
        self.schema = SCHEMA_VERSION
        #: Things a reader should be told (a newer schema read as far as it is compatible, a private copy).
        self.notes: list[str] = []
        self._copy_dir: str | None = None
        self._run_locks: dict[str, int] = {}  # run id -> descriptor holding the shared run lock
        self._identity: tuple[int, int] | None = None  # (device, inode) of the file this connection opened
        try:
            if readonly:
                self._open_for_reading()
            else:
                self._open_for_writing()
        except StoreError:
            self._discard()
            raise
        except sqlite3.Error as exc:
            self._discard()
            raise self._error(exc, "open") from None
        except OSError as exc:
            self._discard()
            raise self._os_error(exc, "open") from None

    @classmethod
    def for_workspace(cls, root: Path, *, readonly: bool = False) -> Store:
        return cls(store_path(root), readonly=readonly)

    @property
    def writable(self) -> bool:
        return not self.readonly

    def close(self) -> None:
        for fd in getattr(self, "_run_locks", {}).values():
            _release(fd)
        self._run_locks = {}
        if getattr(self, "db", None) is not None:
            self.db.conn.close()
        self._discard()

    def replaced(self) -> bool:
        """Whether the file at this store's path is no longer the one this connection opened (a ``store
        reset`` or ``repair`` moved it aside): what this connection writes then lands in the old file."""
        if self._identity is None:
            return False
        try:
            st = os.stat(self.path)
        except OSError:
            return True
        return (st.st_dev, st.st_ino) != self._identity

    def _discard(self) -> None:
        if self._copy_dir is not None:
            shutil.rmtree(self._copy_dir, ignore_errors=True)
            self._copy_dir = None

    # --- opening ---------------------------------------------------------------------------
    def _check_path_length(self) -> None:
        """SQLite's unix files take absolute paths of at most 512 bytes, its ``-journal``/``-wal``/``-shm``
        names included; past that it says only "unable to open database file"."""
        n = len(os.fsencode(os.path.abspath(self.path)))
        if n + len("-journal") > SQLITE_MAX_PATHNAME:
            raise StoreError(
                f"cannot open the result store {self.path}: its path is {n} bytes long, and SQLite opens no"
                f" database whose path (with its '-journal' suffix) is longer than {SQLITE_MAX_PATHNAME} bytes."
                " Point GPUEMU_STORE at a shorter path (or move the workspace to a shorter one)",
                path=self.path,
                reason="path-too-long",
            )

    def _open_for_writing(self) -> None:
        self._check_path_length()
        _make_folder(self.path.parent)
        if not self.path.exists():
            _create(self.path)
        self._regular_file()
        problem = file_problem(self.path)
        if problem:
            raise self._damaged(problem, "open")
        if not (os.access(self.path, os.W_OK) and os.access(self.path.parent, os.W_OK)):
            what = "the file" if not os.access(self.path, os.W_OK) else f"its folder {self.path.parent}"
            raise StoreError(
                f"cannot write the result store {self.path}: {what} is read-only. Reading commands (ops, failures,"
                " report, reproduce) still work; to store results make it writable, or point GPUEMU_STORE at a"
                " writable file",
                path=self.path,
                reason="read-only",
            )
        self._connect(str(self.path))
        # a writer waits in short turns (``_retry`` loops up to LOCK_RETRY_SECONDS), so that between them it can
        # end a lock holder of its own making
        self.db.execute(f"PRAGMA busy_timeout = {WRITER_BUSY_MS}")
        st = os.stat(self.path)
        self._identity = (st.st_dev, st.st_ino)
        self._retry(lambda: self.db.execute("PRAGMA journal_mode = WAL"))
        self.db.execute("PRAGMA synchronous = NORMAL")
        self.schema = int(self.db.execute("PRAGMA user_version").fetchone()[0])
        if self.schema > SCHEMA_VERSION:
            raise StoreError(
                f"cannot write the result store {self.path}: it was written by a newer gpuemu (store schema"
                f" {self.schema}; gpuemu {__version__} writes schema {SCHEMA_VERSION}), and writing it could"
                " damage what that version stored. Upgrade gpuemu, or point GPUEMU_STORE at another file;"
                " reading commands still work",
                path=self.path,
                reason="newer",
            )
        self._migrate()
        self._ensure_indexes()
        self.mark_interrupted()

    def _open_for_reading(self) -> None:
        if self.path.exists():
            self._check_path_length()
        if not self.path.exists():  # nothing stored yet: read as empty, create nothing
            self.missing = True
            self._connect(":memory:")
            self._migrate()
            return
        self._regular_file()
        problem = file_problem(self.path)
        if problem:
            raise self._damaged(problem, "read")
        st = os.stat(self.path)
        self._identity = (st.st_dev, st.st_ino)  # a reader that outlives a reset can tell (the server's)
        uri = sqlite_uri(self.path)
        try:
            self._connect(f"{uri}?mode=ro", uri=True)
            self.db.execute("SELECT count(*) FROM sqlite_master").fetchone()
        except sqlite3.OperationalError as exc:
            if _errname(exc).startswith(("SQLITE_CORRUPT", "SQLITE_NOTADB")) or getattr(self, "db", None) is None:
                raise
            self.db.conn.close()
            if os.access(self.path.parent, os.W_OK):
                # A writable folder (the -shm not made yet, a writer mid-checkpoint): read through an ordinary
                # connection that refuses to write. Never immutable here: a writer may change the file while
                # we read, and an immutable reader in the writer's process breaks the writer's locks.
                self._connect(str(self.path))
                self.db.execute("PRAGMA query_only = ON")
            # A WAL store in a read-only folder without its -shm: SQLite cannot open it in place.
            elif _has_wal(self.path):  # the WAL holds committed rows: read a private copy that replays it
                self._copy_dir = tempfile.mkdtemp(prefix="gpuemu-store-")
                copy = Path(self._copy_dir) / self.path.name
                shutil.copyfile(self.path, copy)
                shutil.copyfile(wal_path(self.path), wal_path(copy))
                self._connect(str(copy))
                self.notes.append(f"{self.path} is read-only: reading a private copy of it")
            else:  # everything is in the file: nothing can change it while we read
                self._connect(f"{uri}?immutable=1", uri=True)
            self.db.execute("SELECT count(*) FROM sqlite_master").fetchone()
        self.schema = int(self.db.execute("PRAGMA user_version").fetchone()[0])
        if self.schema > SCHEMA_VERSION:
            missing = self._missing_columns()
            if missing:
                raise StoreError(
                    f"cannot read the result store {self.path}: it was written by a newer gpuemu (store schema"
                    f" {self.schema}; gpuemu {__version__} reads schema {SCHEMA_VERSION}) and lacks"
                    f" {', '.join(missing)}. Upgrade gpuemu to read it",
                    path=self.path,
                    reason="newer",
                )
            self.notes.append(
                f"{self.path} was written by a newer gpuemu (store schema {self.schema}; this one knows"
                f" {SCHEMA_VERSION}): reading it as far as it is compatible, writing refused"
            )
        elif self.schema == 0 and not self._tables():
            raise self._damaged("it holds no gpuemu tables", "read")
        if self._missing_indexes():
            # a store older than its read indexes, opened read-only: each op's failures are then read by a scan
            # of the run's cases (at 1,000 ops, a minute); the first run (or repair) that writes it builds them
            self.notes.append(
                f"{self.path} was made before the indexes reading it needs: `failures`, `ops` and `report` are"
                " slow on it until a gpuemu run writes it (or `gpuemu store repair`)"
            )

    def _regular_file(self) -> None:
        if not self.path.is_file():
            raise StoreError(
                f"cannot open the result store {self.path}: it is not a file (a folder or a device?); point"
                " GPUEMU_STORE at a file, or move what is there out of the way",
                path=self.path,
            )

    def _connect(self, target: str, *, uri: bool = False) -> None:
        conn = sqlite3.connect(target, timeout=30.0, isolation_level=None, check_same_thread=False, uri=uri)
        conn.execute("PRAGMA busy_timeout = 30000")
        self.db = sqlite_utils.Database(conn)

    def _tables(self) -> set[str]:
        return {r[0] for r in self.db.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()}

    def _missing_columns(self) -> list[str]:
        missing = []
        for table, columns in READ_COLUMNS.items():
            have = {r[1] for r in self.db.execute(f"PRAGMA table_info([{table}])").fetchall()}
            missing += [f"{table}.{c}" for c in sorted(columns - have)]
        return missing

    # --- errors ----------------------------------------------------------------------------
    def _damaged(self, detail: str, doing: str) -> StoreError:
        return StoreError(
            f"cannot {doing} the result store {self.path}: it is damaged ({detail}). `gpuemu store check` shows"
            " what is wrong; `gpuemu store repair` recovers what can be read and `gpuemu store reset` starts"
            f" empty, both keeping the old file as {self.path.name}.corrupt-<time>",
            path=self.path,
            reason="damaged",
        )

    def _error(self, exc: sqlite3.Error, doing: str) -> StoreError:
        """What an SQLite error means for the user: damage, a full disk, a read-only file, or the error itself."""
        name, text = _errname(exc), str(exc)
        if (
            name.startswith("SQLITE_FULL")
            or "disk is full" in text
            or (name.startswith("SQLITE_IOERR") and doing in ("write", "open") and _disk_looks_full(self.path))
        ):
            return StoreError(
                f"cannot write the result store {self.path}: disk full ({text}). Nothing stored before was lost;"
                " the results of this command were not stored. Free some space (or raise the file size limit)"
                " and run again",
                path=self.path,
                reason="disk-full",
            )
        if (
            name.startswith(("SQLITE_CORRUPT", "SQLITE_NOTADB"))
            or "malformed" in text
            or "not a database" in text
            or "Could not decode" in text
        ):
            return self._damaged(text, doing)
        if name.startswith("SQLITE_READONLY") or "readonly database" in text:
            return StoreError(
                f"cannot write the result store {self.path}: it is read-only ({text}). Make it writable, or point"
                " GPUEMU_STORE at a writable file",
                path=self.path,
                reason="read-only",
            )
        return StoreError(f"cannot {doing} the result store {self.path}: {text}", path=self.path)

    def _os_error(self, exc: OSError, doing: str) -> StoreError:
        if exc.errno in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT):
            return StoreError(
                f"cannot {'create' if doing == 'open' else doing} the result store {self.path}: disk full"
                f" ({exc.strerror}). Free some space and run again",
                path=self.path,
                reason="disk-full",
            )
        reason = "read-only" if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS) else "io"
        where = exc.filename or self.path
        return StoreError(
            f"cannot {'create' if doing == 'open' else doing} the result store {self.path}: {where}:"
            f" {exc.strerror or exc}",
            path=self.path,
            reason=reason,
        )

    @contextmanager
    def _reading(self) -> Iterator[None]:
        try:
            yield
        except sqlite3.Error as exc:
            raise self._error(exc, "read") from None

    # --- schema ----------------------------------------------------------------------------
    def _migrate(self) -> None:
        version = int(self.db.execute("PRAGMA user_version").fetchone()[0])
        if version >= SCHEMA_VERSION:
            return
        with self._write():
            version = int(self.db.execute("PRAGMA user_version").fetchone()[0])  # another process may have
            if version < 1:
                _create_schema_1(self.db)
            if version < 2:  # who holds a run: runs killed with -9 are then told apart from live ones
                if "owner" not in {r[1] for r in self.db.execute("PRAGMA table_info(runs)").fetchall()}:
                    self.db.execute("ALTER TABLE runs ADD COLUMN owner TEXT")
                self.db.execute(
                    "UPDATE runs SET owner = ? WHERE status = 'running' AND pid IS NOT NULL AND owner IS NULL",
                    (OWNER_PID_ONLY,),
                )
            self.db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    def _ensure_indexes(self) -> None:
        """The indexes every read a face makes needs, and the pins table, on stores made before they existed
        (built on the first open for writing; no schema bump, so older versions keep reading and writing the
        store)."""
        missing = self._missing_indexes()
        pins = bool(self.db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'pins'").fetchone())
        if missing or not pins:
            with self._write():
                for index in missing:
                    self.db.execute(_index_sql(*index))
                self.db.execute(PINS_SQL)

    def _missing_indexes(self) -> list[tuple[str, str, tuple[str, ...]]]:
        have = {r[0] for r in self.db.execute("SELECT name FROM sqlite_master WHERE type = 'index'").fetchall()}
        return [ix for ix in READ_INDEXES if ix[0] not in have]

    def has_table(self, name: str) -> bool:
        """Whether the store has table ``name`` (one a later gpuemu added: pins, retention's tables)."""
        return bool(self.query("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)))

    # --- pins --------------------------------------------------------------------------------
    def pinned_runs(self) -> dict[str, str]:
        """Runs retention keeps whatever their age, and why (``gpuemu store pin``, a stored baseline); none in a
        store no gpuemu that knows pins has written."""
        if not self.has_table("pins"):
            return {}
        return {r["run_id"]: r["reason"] or "" for r in self.query("SELECT run_id, reason FROM pins")}

    def resolve_run(self, prefix: str) -> str:
        """The one stored run whose id starts with ``prefix`` (``store runs`` shows 12 characters)."""
        if not prefix.strip():
            raise UsageError("give a run id (`gpuemu store runs` lists them)")
        rows = self.query("SELECT id FROM runs WHERE substr(id, 1, ?) = ? LIMIT 2", (len(prefix), prefix))
        if not rows:
            raise UsageError(f"no stored run {prefix!r} in {self.path} (`gpuemu store runs` lists them)")
        if len(rows) > 1:
            raise UsageError(f"run id {prefix!r} is ambiguous: give more of it")
        return str(rows[0]["id"])

    def pin(self, run_id: str, reason: str) -> None:
        """Keep ``run_id`` through every prune until :meth:`unpin` (a second pin replaces the reason)."""
        row = (run_id, reason, time.time())
        self.write(lambda c: c.execute("INSERT OR REPLACE INTO pins (run_id, reason, pinned_at) VALUES (?, ?, ?)", row))

    def unpin(self, run_id: str) -> bool:
        """Let retention judge ``run_id`` again; False if it was not pinned."""
        return bool(self.write(lambda c: c.execute("DELETE FROM pins WHERE run_id = ?", (run_id,)).rowcount))

    def mark_interrupted(self) -> int:
        """Mark ``running`` runs whose process is gone (killed with -9, a lost machine) as ``interrupted``.

        Only runs of this host with a recorded owner are judged; the others may be alive elsewhere."""
        if self.readonly:
            return 0
        rows = self.query("SELECT id, host, pid, owner FROM runs WHERE status = 'running'")
        gone = [r["id"] for r in rows if not owner_alive(r)]
        if gone:
            marks = ",".join("?" * len(gone))
            self.write(
                lambda c: c.execute(
                    f"UPDATE runs SET status = 'interrupted' WHERE status = 'running' AND id IN ({marks})", gone
                )
            )
        return len(gone)

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
                # a process this one started (a reference's setsid child, an op's helper) that holds the store's
                # lock would hold it for good: it is ended, and the write goes on
                end_own_lock_holders(self.path)
                time.sleep(delay)
                delay = min(delay * 2, 0.5)

    @contextmanager
    def _write(self) -> Iterator[None]:
        conn = self.db.conn
        self._retry(lambda: conn.execute("BEGIN IMMEDIATE"))
        try:
            yield
            self._retry(lambda: conn.execute("COMMIT"))
        except BaseException:
            # SQLite has already rolled back after a full disk or an I/O error: a second ROLLBACK would only
            # hide the real error behind "cannot rollback - no transaction is active".
            if conn.in_transaction:
                with suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
            raise

    def write(self, fn: Any) -> Any:
        """Run ``fn(conn)`` in one immediate transaction: all of it is stored or none. A full disk, a damaged or
        read-only file become a :class:`StoreError` saying so, and what was stored before stays intact."""
        if self.readonly:
            raise StoreError(
                f"cannot write the result store {self.path}: it was opened for reading only",
                path=self.path,
                reason="read-only",
            )
        try:
            with self._write():
                return fn(self.db.conn)
        except sqlite3.Error as exc:
            raise self._error(exc, "write") from None
        except OSError as exc:
            raise self._os_error(exc, "write") from None

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
        lock = hold_run_lock(self.path)  # store maintenance waits for it (or refuses) while the run is under way
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
            process_owner(os.getpid()) or OWNER_PID_ONLY,
        )
        row = _texts(row)
        try:
            self.write(
                lambda c: c.execute(
                    "INSERT INTO runs (id, started_at, finished_at, source, mode, seed, iterations, workspace,"
                    " config_hash, status, host, version, command, pid, owner) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                    row,
                )
            )
        except BaseException:
            _release(lock)
            raise
        self._run_locks[run_id] = lock
        return run_id

    def finish_run(self, run_id: str, status: str) -> None:
        try:
            self.write(
                lambda c: c.execute(
                    "UPDATE runs SET finished_at = ?, status = ? WHERE id = ?", (time.time(), status, run_id)
                )
            )
        finally:
            fd = self._run_locks.pop(run_id, None)
            if fd is not None:
                _release(fd)

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
                "tier": r.tier,
                "edge": r.edge,
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
        """Rows of ``sql``; a damaged page read on the way is a :class:`StoreError` naming the file."""
        with self._reading():
            return list(self.db.query(sql, params))

    def latest_op_results(self, kind: str | None = None) -> dict[str, dict[str, Any]]:
        """The most recent result of every op (and kernel), whichever face produced it.

        One row per (kind, op) from SQLite, never every result ever stored: with ``max()`` a bare column is
        read from the row that holds the maximum, and the (kind, op, finished_at) index serves the grouping."""
        where = "WHERE kind = :kind" if kind else ""
        rows = self.query(
            f"SELECT *, max(finished_at) AS _latest FROM op_results {where} GROUP BY kind, op",
            {"kind": kind} if kind else {},
        )
        for r in rows:
            r.pop("_latest", None)
        return {f"{r['kind']}:{r['op']}" if not kind else r["op"]: r for r in rows}

    def run(self, run_id: str) -> dict[str, Any] | None:
        rows = self.query("SELECT * FROM runs WHERE id = ?", (run_id,))
        return _effective(rows[0]) if rows else None

    def latest_run(self) -> dict[str, Any] | None:
        rows = self.query("SELECT * FROM runs ORDER BY started_at DESC LIMIT 1")
        return _effective(rows[0]) if rows else None

    def runs(self, limit: int | None = None) -> list[dict[str, Any]]:
        """Runs, newest first; a ``running`` one whose process is gone reads as ``interrupted`` (also where the
        store cannot be written to say so); ``pinned``: the pin's reason, None where it is not pinned."""
        sql = "SELECT * FROM runs ORDER BY started_at DESC" + (f" LIMIT {int(limit)}" if limit else "")
        pins = self.pinned_runs()
        return [{**_effective(r), "pinned": pins.get(r["id"])} for r in self.query(sql)]

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
        if not rows:
            return None
        try:
            return decode_arrays(rows[0]["data"])
        except (zlib.error, ValueError, KeyError, TypeError) as exc:  # bytes changed under SQLite's nose
            raise self._damaged(f"snapshot {snapshot_id} cannot be decoded: {exc}", "read") from None

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
        try:
            detail = json.loads(rows[0]["detail"] or "{}")
        except ValueError as exc:
            raise self._damaged(f"case {rows[0]['id']} cannot be decoded: {exc}", "read") from None
        if snap is None or "spec" not in detail:
            return None
        return CaseSpec.from_dict(detail["spec"]), snap

    def count(self, table: str) -> int:
        with self._reading():
            return int(self.db.execute(f"SELECT count(*) FROM [{table}]").fetchone()[0])


def _create_schema_1(db: sqlite_utils.Database) -> None:
    """The tables of schema 1 (later versions alter them in :meth:`Store._migrate`)."""
    db["runs"].create(
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
    db["op_results"].create(
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
    db["snapshots"].create(
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
    db["cases"].create(
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
    db["cases"].create_index(["op", "seed"], if_not_exists=True)
    db["cases"].create_index(["run_id"], if_not_exists=True)
    db["cases"].create_index(["op", "status"], if_not_exists=True)
    db["op_results"].create_index(["op", "finished_at"], if_not_exists=True)


#: Runs a user or a stored baseline pinned: retention keeps them (store/prune.py).
PINS_SQL = "CREATE TABLE IF NOT EXISTS pins (run_id TEXT PRIMARY KEY, reason TEXT, pinned_at REAL)"


def _index_sql(name: str, table: str, columns: tuple[str, ...]) -> str:
    return f"CREATE INDEX IF NOT EXISTS [{name}] ON [{table}] ({', '.join(columns)})"


def _create(path: Path) -> None:
    """Create an empty store at ``path`` whole: built under a private name and linked into place, so the file is
    never seen empty or half made (an empty or truncated store is then always damage, never a store being born).
    If another process linked one first, that one is kept."""
    tmp = path.with_name(f".{path.name}.new-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    fd = os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
    os.close(fd)
    try:
        conn = sqlite3.connect(str(tmp), isolation_level=None)
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            db = sqlite_utils.Database(conn)
            conn.execute("BEGIN IMMEDIATE")
            _create_schema_1(db)
            for index in READ_INDEXES:
                conn.execute(_index_sql(*index))
            conn.execute(PINS_SQL)
            conn.execute("ALTER TABLE runs ADD COLUMN owner TEXT")
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            conn.execute("COMMIT")
        finally:
            conn.close()
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass
        except OSError as exc:  # a file system without hard links: move it, unless someone was first
            if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK, errno.EXDEV):
                raise
            if not path.exists():
                os.replace(tmp, path)
    finally:
        for leftover in (tmp, wal_path(tmp), tmp.with_name(tmp.name + "-shm")):
            with suppress(OSError):
                os.unlink(leftover)


SQLITE_MAGIC = b"SQLite format 3\x00"


def file_problem(path: Path) -> str | None:
    """Damage visible without reading past the header: an empty, foreign or truncated file (cheap, so every
    open checks it; damage inside pages shows when they are read, and ``gpuemu store check`` reads them all)."""
    try:
        size = path.stat().st_size
        head = _read_header(path)
    except OSError:
        return None  # opening it says why
    if _has_wal(path):
        return None  # the file may lag its WAL (a checkpoint in progress): SQLite judges it
    if size == 0:
        return "the file is empty (0 bytes): it was truncated"
    if len(head) < 100 or not head.startswith(SQLITE_MAGIC):
        return "not an SQLite database"
    page_size = int.from_bytes(head[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    pages = int.from_bytes(head[28:32], "big")
    if head[24:28] == head[92:96] and pages and size < pages * page_size:
        return f"truncated: {size} bytes where its header says {pages * page_size}"
    return None


#: One read-only descriptor per store file (device, inode) this process has looked at, never closed: closing
#: any descriptor of a database file releases every POSIX lock the process holds on it, including those of
#: SQLite connections open in other threads (sqlite.org/howtocorrupt.html, 2.2.1), which corrupts the store
#: when a writer is mid-transaction. The server reads and writes one store from several threads.
_HEADER_FDS: dict[tuple[int, int], int] = {}
_HEADER_LOCK = threading.Lock()


def _read_header(path: Path) -> bytes:
    """The first 100 bytes of ``path``, read without ever closing a descriptor of it (see _HEADER_FDS)."""
    st = path.stat()
    with _HEADER_LOCK:
        fd = _HEADER_FDS.get((st.st_dev, st.st_ino))
        if fd is None:
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
            opened = os.fstat(fd)  # the file actually opened (it may have been replaced since the stat)
            _HEADER_FDS.setdefault((opened.st_dev, opened.st_ino), fd)  # a second one just stays open
        return os.pread(fd, 100, 0)


def wal_path(path: Path) -> Path:
    return path.with_name(path.name + "-wal")


def _has_wal(path: Path) -> bool:
    try:
        return wal_path(path).stat().st_size > 0
    except OSError:
        return False


def sqlite_uri(path: Path) -> str:
    return "file:" + urllib.parse.quote(str(path.resolve()))


def _errname(exc: BaseException) -> str:
    return str(getattr(exc, "sqlite_errorname", "") or "")


def _disk_looks_full(path: Path) -> bool:
    """Whether an I/O error on write is a full disk: the file system is out of space, or a file size limit
    (RLIMIT_FSIZE, where SQLite sees EFBIG) is set and reached."""
    try:
        soft = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
        if soft != resource.RLIM_INFINITY:
            sizes = [p.stat().st_size for p in (path, wal_path(path)) if p.exists()]
            if max(sizes, default=0) + 65536 >= soft:
                return True
        st = os.statvfs(path.parent)
        return st.f_bavail * st.f_frsize < 1 << 20
    except (OSError, ValueError):
        return False


# --- who holds a run ------------------------------------------------------------------------------
def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def process_owner(pid: int) -> str | None:
    """``proc:<boot id>:<pid start time>`` of a live process, which no later process can share (a reused pid
    starts later; a reboot changes the boot id); None for a process that is gone, a zombie, or without /proc."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw[raw.rfind(")") + 2 :].split()
    if len(fields) < 20 or fields[0] in ("Z", "X"):
        return None
    return f"proc:{_boot_id()}:{fields[19]}"


def _pid_running(pid: int) -> bool:
    if Path("/proc").is_dir():
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            return False
        return bool(fields) and fields[0] not in ("Z", "X")
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _effective(run: dict[str, Any]) -> dict[str, Any]:
    if run.get("status") == "running" and not owner_alive(run):
        return {**run, "status": "interrupted"}
    return run


#: How long one write attempt waits for SQLite's lock before ``Store._retry`` looks at who holds it.
WRITER_BUSY_MS = 2000


def _lock_holders(files: list[Path]) -> set[int]:
    """Pids holding POSIX locks on ``files`` (from /proc/locks; Linux only, empty elsewhere)."""
    inodes = set()
    for f in files:
        try:
            st = os.stat(f)
        except OSError:
            continue
        inodes.add((os.major(st.st_dev), os.minor(st.st_dev), st.st_ino))
    out: set[int] = set()
    try:
        with open("/proc/locks", encoding="ascii") as fh:
            lines = fh.readlines()
    except OSError:
        return out
    for line in lines:
        parts = line.split()
        if "->" in parts:
            parts.remove("->")  # a blocked waiter
        if len(parts) < 6 or not parts[4].lstrip("-").isdigit():
            continue
        try:
            major, minor, inode = parts[5].split(":")
            key = (int(major, 16), int(minor, 16), int(inode))
        except ValueError:
            continue
        if key in inodes and int(parts[4]) > 0:
            out.add(int(parts[4]))
    return out


def _parent(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            data = fh.read()
        return int(data[data.rindex(b")") + 2 :].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def _descends_from(pid: int, ancestor: int) -> bool:
    seen = 0
    while pid > 1 and seen < 4096:
        parent = _parent(pid)
        if parent is None:
            return False
        if parent == ancestor:
            return True
        pid, seen = parent, seen + 1
    return False


def end_own_lock_holders(path: Path) -> list[int]:
    """SIGKILL the descendants of this process that hold a lock on the store at ``path`` (its file, WAL or
    shared memory): processes the run itself started (a script's setsid child, a helper an op left), which
    would otherwise hold the store's lock for good. Another process's lock is never touched."""
    me = os.getpid()
    files = [path, wal_path(path), path.with_name(path.name + "-shm")]
    ended = [p for p in _lock_holders(files) if p != me and _descends_from(p, me)]
    for p in ended:
        try:
            os.kill(p, signal.SIGKILL)
        except OSError:
            pass
    return ended


def lock_path(path: Path) -> Path:
    """The lock file of a store: runs hold it shared while they write, maintenance exclusively."""
    return path.with_name(path.name + ".lock")


#: How long a run that begins waits for store maintenance (a repair, a reset) to finish.
MAINTENANCE_WAIT_SECONDS = 120.0


def hold_run_lock(path: Path) -> int:
    """A descriptor holding the store's lock shared (-1 where locks are not available): released when the run
    finishes, or by the kernel when its process dies, so maintenance never mistakes a dead run for a live one."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        return -1
    try:
        fd = os.open(lock_path(path), os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o600)
    except OSError:
        return -1  # a read-only folder: no maintenance can replace the store there either
    deadline = time.monotonic() + MAINTENANCE_WAIT_SECONDS
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            if time.monotonic() > deadline:
                os.close(fd)
                raise StoreError(
                    f"cannot start a run: the result store {path} has been under maintenance (gpuemu store repair"
                    f" or reset) for {MAINTENANCE_WAIT_SECONDS:.0f} s",
                    path=path,
                    reason="busy",
                ) from None
            time.sleep(0.1)
        except OSError:
            os.close(fd)
            return -1


def _release(fd: int) -> None:
    if fd >= 0:
        try:
            os.close(fd)
        except OSError:
            pass


def owner_alive(run: dict[str, Any]) -> bool:
    """Whether the process that began ``run`` may still be running it (True when it cannot be told: another
    host, or a run shared by several processes that records no owner)."""
    owner, pid = run.get("owner"), run.get("pid")
    if not owner or pid is None or run.get("host") != platform.node():
        return True
    if owner == OWNER_PID_ONLY or not str(owner).startswith("proc:"):
        return _pid_running(int(pid))
    return process_owner(int(pid)) == owner


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
