"""One workspace as the server sees it: its config (saved or unsaved), and its results from the store.

Results are read from the store, not only from this server's own runs, so verdicts that a CLI run,
a CI shard or the Python API wrote show up in the editor too. Reads are cached in memory (hover and
code lens must answer while validations run); ``refresh`` rereads them when the store changed.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..engine.config.keys import CONFIG_NAME
from ..engine.config.load import load_config
from ..engine.config.locations import op_files
from ..engine.config.model import Config
from ..engine.errors import ConfigError, Problem
from ..engine.safe_read import read_text
from ..engine.store.db import Store, StoreError, store_path

#: The latest result of each op and kernel, as much of it as says whether it changed (one row per (kind, op) on
#: the (kind, op, finished_at) index: the bare columns come from the row holding the maximum).
LATEST_SIGNATURES = (
    "SELECT kind, op, run_id, status, cases, message, max(finished_at) AS finished_at FROM op_results GROUP BY kind, op"
)
#: The minimize runs and then their cases, read at every refresh: the runs first and their cases by run id, as
#: the join this replaces scanned every case ever stored each time (a growing share of the publisher's time
#: while 1,000 ops validate: benchmark 15); most stores have no minimize run, and then nothing more is read.
MINIMIZE_RUNS = "SELECT id FROM runs WHERE source = 'minimize'"


def minimized_cases_sql(runs: int) -> str:
    """The cases of ``runs`` minimize runs (as many ``?`` as runs), with their ids: sorted by the caller, as an
    ``ORDER BY id`` here has SQLite scan every case in id order rather than look the runs up."""
    return f"SELECT id, op, seed, shapes, kind FROM cases WHERE run_id IN ({', '.join('?' * runs)})"


SOURCE_SUFFIXES = (".py", ".cu", ".cuh", ".h", ".hpp", ".ptx")
MAX_FAILURES = 50


@dataclass
class OpView:
    """The latest verdict of one op (or kernel), as the editor shows it."""

    name: str
    kind: str  # op | kernel
    status: str
    message: str = ""
    diagnosis: str = ""
    cases: int = 0
    passed: int = 0
    failed: int = 0
    errors: int = 0
    run_id: str | None = None
    finished_at: float = 0.0
    failures: list[dict[str, Any]] = field(default_factory=list)
    by_variant: list[dict[str, Any]] = field(default_factory=list)
    #: not-passed cases per (dtype, layout, distribution): where in the table the failures sit
    failing_by_distribution: list[dict[str, Any]] = field(default_factory=list)
    minimized: dict[int, dict[str, Any]] = field(default_factory=dict)
    detail: dict[str, Any] = field(default_factory=dict)


class WorkspaceSession:
    """A workspace root holding a gpuemu.toml."""

    def __init__(self, root: Path, *, store_override: str | None = None) -> None:
        self.root = root.resolve()
        self.config_path = self.root / CONFIG_NAME
        self.config: Config | None = None
        self.problems: list[Problem] = []
        self.warnings: list[Problem] = []
        self.views: dict[tuple[str, str], OpView] = {}
        self._signatures: dict[tuple[str, str], tuple[Any, ...]] = {}  # what each view was read from
        self._ops_by_file: tuple[Config, dict[Path, list[str]]] | None = None
        self.lock = threading.RLock()
        self._store: Store | None = None
        self._store_path = Path(store_override).expanduser().resolve() if store_override else store_path(self.root)
        self._data_version: int | None = None
        self.store_error: str | None = None
        self.store_error_shown: str | None = None  # the last store problem told to the user
        self.generation = 0  # config reloads requested (the server skips stale ones)
        self.loaded_generation = 0  # the last of them whose load finished
        self.saved_config: Config | None = None  # as last read from disk: what a save is compared against
        self.loader: Any = None  # the server's one-thread executor for config reloads
        self.loaded_text: str | None = None  # the text the current problems/config came from
        self.config_text: str | None = None  # the text ``config`` was loaded from
        self.closed = False  # the server shut down: the store is not reopened
        self.stale = False  # a run finished and its verdicts are not in ``views`` yet

    # --- config --------------------------------------------------------------------------
    def load(self, text: str | None = None, *, saved: bool | None = None) -> bool:
        """(Re)load the config, from ``text`` (an editor buffer) if given; True when it is usable.

        ``saved`` says whether this is what is on disk now (a save, a disk change): only such loads
        become ``saved_config``, the state the next save is compared against. By default, a load from
        disk (no text) is saved, a buffer is not.
        """
        from_disk = text is None
        saved = from_disk if saved is None else saved
        if text is None:  # read it here, so what was checked is known (didOpen compares with it)
            try:
                text = read_text(self.config_path)
            except (OSError, UnicodeDecodeError):
                text = None  # load_config reports it (a FIFO or a huge file is refused before it is read)
        if not saved and text is not None and self.config is not None and text == self.config_text:
            # an unsaved buffer back to the text the config came from (an undone typo): the same config, not
            # another half second of checking a 1,000-op file while requests wait for the processor
            with self.lock:
                self.loaded_text = text
                self.problems = []
                self.warnings = list(self.config.warnings)
            return True
        try:
            config = load_config(self.root, text=text)
        except ConfigError as exc:
            with self.lock:
                self.loaded_text = text
                self.problems = list(exc.problems)
                self.warnings = []
                if from_disk:
                    self.config = None
            return False
        with self.lock:
            self.loaded_text = self.config_text = text
            self.config = config
            self.problems = []
            self.warnings = list(config.warnings)
            if saved:
                self.saved_config = config
        return True

    def affected(self, path: Path) -> tuple[list[str], list[str]]:
        """Ops and kernels a change of ``path`` can affect."""
        path = path.resolve()
        cfg = self.config
        if cfg is None:
            return [], []
        if path == self.config_path:
            return [o.name for o in cfg.ops], [k.name for k in cfg.kernels]
        ops = list(self.ops_by_file(cfg).get(path, ()))
        kernels = []
        for k in cfg.kernels:
            src = cfg.resolve(k.source)
            if path == src or (path.suffix in (".cuh", ".h", ".hpp") and path.name in _read(src)):
                kernels.append(k.name)
        if not ops and path.suffix == ".py" and path.is_relative_to(self.root):
            # a helper module imported by ops: anything in process may use it
            ops = [
                o.name for o in cfg.ops if o.module and path.stem in _read(path.parent / f"{o.module.split(':')[0]}.py")
            ]
        return ops, kernels

    def ops_by_file(self, cfg: Config) -> dict[Path, list[str]]:
        """Which ops each file affects, made once per config: resolving every op's files at each save or open
        took 0.1-0.4 s over 1,000 ops on the thread that answers requests (the server makes it after a load)."""
        kept = self._ops_by_file
        if kept is not None and kept[0] is cfg:
            return kept[1]
        index: dict[Path, list[str]] = {}
        for o in cfg.ops:
            for f in op_files(cfg, o):
                index.setdefault(f, []).append(o.name)
        self._ops_by_file = (cfg, index)
        return index

    def owns(self, path: Path) -> bool:
        path = path.resolve()
        return path == self.config_path or (path.is_relative_to(self.root) and path.suffix in SOURCE_SUFFIXES)

    # --- store ---------------------------------------------------------------------------
    def store(self) -> Store | None:
        """The store, for reading; None until a run created it (reading a workspace never creates files,
        so opening an untrusted folder leaves it as it was)."""
        if self._store is None:
            if self.closed or not self._store_path.exists():
                return None
            try:  # read-only: a read-only or newer store is still shown, and reading never writes
                self._store = Store(self._store_path, readonly=True)
                self.store_error = None
            except StoreError as exc:
                self.store_error = str(exc)
                return None
        return self._store

    @property
    def store_file(self) -> Path:
        return self._store_path

    def store_changed(self) -> bool:
        """Whether another connection committed since the last look (SQLite's data_version)."""
        if not self._store_path.exists():
            return False
        with self.lock:
            if self._store is not None and self._store.replaced():  # a `store reset` moved the file aside:
                try:  # read the new one from now on (results written by the CLI go there)
                    self._store.close()
                except Exception:
                    pass
                self._store, self._data_version = None, None
                return True
            store = self.store()
            if store is None:
                return False
            try:
                version = int(store.db.execute("PRAGMA data_version").fetchone()[0])
            except Exception:
                return False
            changed = self._data_version is not None and version != self._data_version
            self._data_version = version
            return changed

    def fresh(self) -> None:
        """Make ``views`` current before answering from them: waits for a refresh in progress (the lock) and
        rereads if one of the server's runs finished since. Writes by other processes are left to the watcher,
        which publishes them (a reread here would hide the change from it)."""
        with self.lock:
            if self.stale:
                self.refresh()

    def refresh(self) -> None:
        """Reread the latest verdicts of every op and kernel from the store."""
        with self.lock:
            self.stale = False
            store = self.store()
            cfg = self.config
            if store is None:
                return
            try:
                names = {("op", o.name) for o in cfg.ops} | {("kernel", k.name) for k in cfg.kernels} if cfg else None
                views: dict[tuple[str, str], OpView] = {}
                signatures: dict[tuple[str, str], tuple[Any, ...]] = {}
                minimized = self._minimized(store)
                for row in store.query(LATEST_SIGNATURES):  # what each view is made of; rows (details) only if new
                    key = (row["kind"], row["op"])
                    if names is not None and key not in names:
                        continue
                    signatures[key] = _signature(row, minimized.get(row["op"], {}))
                    old = self.views.get(key)
                    if old is not None and self._signatures.get(key) == signatures[key]:
                        views[key] = old  # unchanged: one op's run ended, the other 999 views are not reread
                        continue
                    whole = store.query(
                        "SELECT * FROM op_results WHERE run_id = ? AND op = ? AND kind = ?", (row["run_id"], *key[::-1])
                    )
                    if whole:
                        views[key] = self._view(store, whole[0], minimized.get(row["op"], {}))
                self.views, self._signatures = views, signatures
                self._data_version = int(store.db.execute("PRAGMA data_version").fetchone()[0])
            except Exception as exc:  # a store being written right now, or corrupt: keep the old views
                self.store_error = (
                    str(exc)
                    if isinstance(exc, StoreError)
                    else f"cannot read the result store {self._store_path}: {exc}"
                )

    def _minimized(self, store: Store) -> dict[str, dict[int, dict[str, Any]]]:
        runs = [r["id"] for r in store.query(MINIMIZE_RUNS)]
        rows = sorted(store.query(minimized_cases_sql(len(runs)), tuple(runs)), key=lambda r: r["id"]) if runs else []
        out: dict[str, dict[int, dict[str, Any]]] = {}
        for r in rows:
            out.setdefault(r["op"], {})[r["seed"]] = {"shapes": json.loads(r["shapes"] or "{}"), "kind": r["kind"]}
        return out

    def _view(self, store: Store, row: dict[str, Any], minimized: dict[int, dict[str, Any]]) -> OpView:
        detail = json.loads(row.get("detail") or "{}")
        view = OpView(
            row["op"],
            row["kind"],
            row["status"],
            row.get("message") or "",
            row.get("diagnosis") or "",
            row.get("cases") or 0,
            row.get("passed") or 0,
            row.get("failed") or 0,
            row.get("errors") or 0,
            row.get("run_id"),
            row.get("finished_at") or 0.0,
            detail=detail,
        )
        if row["kind"] == "op":
            view.failures = store.cases(run_id=row["run_id"], op=row["op"], not_passed=True, limit=MAX_FAILURES)
            view.by_variant = store.query(
                "SELECT dtype, layout, count(*) AS cases, sum(status = 'passed') AS passed,"
                " max(max_ratio) AS max_ratio, max(max_abs) AS max_abs, max(tolerance) AS tolerance"
                " FROM cases WHERE run_id = ? AND op = ? GROUP BY dtype, layout ORDER BY dtype, layout",
                (row["run_id"], row["op"]),
            )
            view.failing_by_distribution = store.query(
                "SELECT dtype, layout, distribution, count(*) AS failed FROM cases"
                " WHERE run_id = ? AND op = ? AND status != 'passed'"
                " GROUP BY dtype, layout, distribution ORDER BY dtype, layout, failed DESC, distribution",
                (row["run_id"], row["op"]),
            )
            view.minimized = {s: m for s, m in minimized.items() if any(f["seed"] == s for f in view.failures)}
        return view

    def view(self, kind: str, name: str) -> OpView | None:
        return self.views.get((kind, name))

    def close(self) -> None:
        """Close the store connection for good: under the lock, so no refresh is reading it (closing a
        SQLite connection another thread is using crashes the process)."""
        with self.lock:
            self.closed = True
            if self._store is not None:
                try:
                    self._store.close()
                except Exception:
                    pass
                self._store = None


def _signature(row: dict[str, Any], minimized: dict[int, dict[str, Any]]) -> tuple[Any, ...]:
    """What an op's view is built from, short of its cases: a result row is replaced, never edited, so the same
    run, time and status (and the same minimized cases) mean the same view."""
    shown = json.dumps(minimized, sort_keys=True, default=str) if minimized else ""
    return (row.get("run_id"), row.get("finished_at"), row.get("status"), row.get("cases"), row.get("message"), shown)


def _read(path: Path) -> str:
    try:
        return read_text(path, errors="replace")
    except OSError:
        return ""


def find_roots(folder: Path, depth: int = 3) -> list[Path]:
    """Workspace roots (folders holding gpuemu.toml) at or below ``folder``, shallow first."""
    skip = {".git", ".venv", "venv", "node_modules", "__pycache__", ".gpuemu", ".tox", "build", "dist"}
    found: list[Path] = []
    frontier = [folder.resolve()]
    for _ in range(depth + 1):
        nxt: list[Path] = []
        for d in frontier:
            if (d / CONFIG_NAME).is_file():
                found.append(d)
            try:
                nxt += [c for c in d.iterdir() if c.is_dir() and c.name not in skip and not c.name.startswith(".")]
            except OSError:
                continue
        frontier = nxt
    return found
