"""Content-hash cache of compiled units, so an unchanged kernel re-lints in milliseconds.

Key: schema + source path + arch/flags/defines/include dirs + tool versions (see
`cache_key`). Entry: the `CompiledUnit` summary plus, for the source and every file
nvcc said it includes (`-MD`), its SHA-256, size and mtime. A lookup re-hashes the
source and its user headers (no CUDA tool runs); toolkit/system headers whose size
and mtime are unchanged are trusted, others are re-hashed. Instruction texts, needed
only by `re:` patterns, sit in a side file read on demand.

Entries are written atomically (temp file + rename); anything unreadable or
inconsistent is treated as a miss, never an error.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from .artifacts import CompiledUnit, DepRecord

CACHE_SCHEMA = 1


def cache_key(parts: dict[str, Any]) -> str:
    """Stable hash of the compile inputs that are not file contents."""
    blob = json.dumps({"schema": CACHE_SCHEMA, **parts}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _is_under(path: Path, roots: Iterable[Path]) -> bool:
    return any(path == r or r in path.parents for r in roots)


def dep_records(
    paths: Sequence[Path], system_roots: Sequence[Path], user_roots: Sequence[Path]
) -> list[DepRecord] | None:
    """Hash every dependency; None if one cannot be read (then the unit is not cached)."""
    out: list[DepRecord] = []
    for p in paths:
        try:
            st = p.stat()
            digest = file_sha256(p)
        except OSError:
            return None
        system = _is_under(p, system_roots) and not _is_under(p, user_roots)
        out.append(DepRecord(str(p), digest, st.st_size, st.st_mtime_ns, system))
    return out


def deps_unchanged(deps: Sequence[DepRecord]) -> bool:
    """True when every dependency still has its recorded content."""
    for d in deps:
        p = Path(d.path)
        try:
            st = p.stat()
            if d.system and st.st_size == d.size and st.st_mtime_ns == d.mtime_ns:
                continue
            if st.st_size != d.size:
                return False
            if file_sha256(p) != d.sha256:
                return False
        except OSError:
            return False
    return True


class LintCache:
    """A folder of `<key>.json` entries (+ `<key>.texts.json`) and the tool-version memo."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    @property
    def version_memo(self) -> Path:
        return self.root / "tool-versions.json"

    def _entry(self, key: str) -> Path:
        return self.root / f"{key}.json"

    def _texts(self, key: str) -> Path:
        return self.root / f"{key}.texts.json"

    def load(self, key: str, source: Path) -> CompiledUnit | None:
        """The cached unit if present, well-formed and its files unchanged; else None."""
        try:
            data = json.loads(self._entry(key).read_text())
            if data.get("schema") != CACHE_SCHEMA or data.get("key") != key:
                return None
            unit = CompiledUnit.from_dict(data["unit"])
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None
        if unit.source != str(source) or not unit.deps or not deps_unchanged(unit.deps):
            return None
        return unit

    def load_texts(self, key: str) -> dict[str, dict[str, list[str]]] | None:
        """Instruction texts of a cached unit ({'ptx'|'sass': {symbol: [text]}}), or None."""
        try:
            data = json.loads(self._texts(key).read_text())
            if data.get("key") != key:
                return None
            texts = data["texts"]
            return {a: {s: list(v) for s, v in texts[a].items()} for a in ("ptx", "sass")}
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None

    def store(self, key: str, unit: CompiledUnit) -> bool:
        """Write the entry atomically; False (and no exception) if the folder is not writable."""
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            if unit.texts is not None:
                self._write(self._texts(key), {"key": key, "texts": unit.texts})
            self._write(self._entry(key), {"schema": CACHE_SCHEMA, "key": key, "unit": unit.to_dict()})
            return True
        except (OSError, TypeError, ValueError):
            return False

    def _write(self, path: Path, payload: dict[str, Any]) -> None:
        fd, tmp = tempfile.mkstemp(dir=self.root, prefix=".tmp-", suffix=".json")
        try:
            with os.fdopen(fd, "w") as fh:
                json.dump(payload, fh, separators=(",", ":"))
            os.replace(tmp, path)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
