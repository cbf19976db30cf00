"""Noticing changes the editor did not make: files (git checkout, another editor) and the store.

File changes come from the client's ``workspace/didChangeWatchedFiles`` where it registers them
dynamically (VS Code); otherwise (Neovim on Linux, other clients) from a watchdog observer on the
workspace. Results written by other processes (a CLI run, a CI shard, the Python API) are noticed by
polling SQLite's ``PRAGMA data_version``, which changes exactly when another connection commits.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer

from .workspace import SOURCE_SUFFIXES, WorkspaceSession

IGNORED_PARTS = {".git", ".gpuemu", ".venv", "venv", "node_modules", "__pycache__", ".mypy_cache", ".ruff_cache"}
DEBOUNCE_SECONDS = 0.3


class _Handler(FileSystemEventHandler):
    def __init__(self, owner: FileWatcher) -> None:
        self.owner = owner

    def on_any_event(self, event: FileSystemEvent) -> None:
        if event.is_directory or event.event_type in ("opened", "closed_no_write"):
            return
        for raw in (event.src_path, getattr(event, "dest_path", "")):
            if raw:
                self.owner.noticed(Path(str(raw)))


class FileWatcher:
    """A server-side watcher of workspace sources, debounced; calls back with the changed paths."""

    def __init__(self, on_change: Callable[[WorkspaceSession, set[Path]], None]) -> None:
        self.on_change = on_change
        self.observer = Observer()
        self.sessions: list[WorkspaceSession] = []
        self.pending: dict[Path, float] = {}
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._flush_loop, name="gpuemu-watch", daemon=True)

    def watch(self, session: WorkspaceSession) -> None:
        self.sessions.append(session)
        self.observer.schedule(_Handler(self), str(session.root), recursive=True)

    def start(self) -> None:
        self.observer.daemon = True
        self.observer.start()
        self.thread.start()

    def noticed(self, path: Path) -> None:
        if IGNORED_PARTS & set(path.parts) or (path.suffix not in SOURCE_SUFFIXES and path.name != "gpuemu.toml"):
            return
        with self.lock:
            self.pending[path] = time.monotonic()

    def _flush_loop(self) -> None:
        while not self.stop.wait(0.1):
            now = time.monotonic()
            with self.lock:
                ready = {p for p, t in self.pending.items() if now - t >= DEBOUNCE_SECONDS}
                for p in ready:
                    del self.pending[p]
            if not ready:
                continue
            for session in self.sessions:
                mine = {p for p in ready if session.owns(p)}
                if mine:
                    self.on_change(session, mine)

    def close(self) -> None:
        self.stop.set()
        try:
            self.observer.stop()
        except Exception:
            pass


class StorePoller:
    """Calls back when another process committed to a workspace's store."""

    def __init__(
        self,
        sessions: Callable[[], list[WorkspaceSession]],
        on_change: Callable[[WorkspaceSession], None],
        interval: float = 1.0,
    ) -> None:
        self.sessions = sessions
        self.on_change = on_change
        self.interval = interval
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="gpuemu-store-poll", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def _loop(self) -> None:
        while not self.stop.wait(self.interval):
            for s in self.sessions():
                try:
                    if s.store_changed():
                        self.on_change(s)
                except Exception:
                    continue

    def close(self) -> None:
        self.stop.set()
