"""Where a run's results came from, as facts a reader (or a signature) can check: the configuration that was
resolved, the gpuemu.toml bytes, the git commit and its uncommitted changes, the machine, the versions of
Python and the libraries the ops could use (version 2), and the date.

Hashes are sha256 hex digests. The resolved configuration is hashed as canonical JSON (sorted keys, no
whitespace, paths relative to the workspace), so the same settings hash alike in any clone; source positions
and warnings are how the file was read, not what it says, and are left out.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
import os
import platform
import socket
import subprocess
from enum import Enum
from pathlib import Path
from typing import Any

from ..config.model import Config
from .libraries import library_versions

#: The version of the ``provenance`` record inside the results document (2: ``libraries`` added).
PROVENANCE_VERSION = 2
#: Config fields that say how the file was read (or where it lies), not what it configures.
_NOT_SETTINGS = frozenset({"root", "path", "positions", "warnings"})
GIT_TIMEOUT_S = 10.0
UNTRACKED_HASH_LIMIT = 4 << 20


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def canonical_json(value: Any) -> bytes:
    """The one byte form of a JSON value: sorted keys, no whitespace, UTF-8 (what is hashed and signed)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()


def config_settings(config: Config) -> dict[str, Any]:
    """The resolved configuration as plain JSON values (defaults and user defaults applied)."""
    return {
        f.name: _plain(getattr(config, f.name), config.root)
        for f in dataclasses.fields(config)
        if f.name not in _NOT_SETTINGS
    }


def _plain(value: Any, root: Path) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name), root) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): _plain(v, root) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        items = [_plain(v, root) for v in value]
        return sorted(items, key=repr) if isinstance(value, (set, frozenset)) else items
    if isinstance(value, Path):
        try:
            return value.resolve().relative_to(root.resolve()).as_posix()
        except ValueError:
            return value.as_posix()
    if isinstance(value, Enum):
        return _plain(value.value, root)
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return str(value)
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)


#: What the tree's state is read over: the workspace, without what running it writes there itself (Python's
#: bytecode caches of the op modules the workers import, gpuemu's own folder): a repository that does not
#: ignore them would otherwise read as dirty after every run, and a replay could confirm nothing.
TREE = (".", ":(exclude,glob)**/__pycache__/**", ":(exclude,glob)**/*.pyc", ":(exclude,glob)**/.gpuemu/**")


def git_state(root: Path) -> dict[str, Any] | None:
    """The commit checked out at ``root``, whether the tree differs from it, and a digest of the difference
    (``git diff HEAD`` in binary form, then the untracked files' names and contents, see
    :func:`_untracked_digest`); None outside git."""

    def git(*args: str) -> bytes | None:
        try:
            proc = subprocess.run(
                ["git", "-C", str(root), *args],
                capture_output=True,
                timeout=GIT_TIMEOUT_S,
                check=False,
                env={**os.environ, "GIT_OPTIONAL_LOCKS": "0", "LC_ALL": "C"},
            )
        except (OSError, subprocess.SubprocessError):
            return None
        return proc.stdout if proc.returncode == 0 else None

    head = git("rev-parse", "--verify", "HEAD")
    if head is None:
        return None
    status = git("status", "--porcelain=v1", "-z", "--untracked-files=all", "--", *TREE)
    diff = git("diff", "HEAD", "--binary", "--no-color", "--no-ext-diff", "--", *TREE) or b""
    untracked = sorted(p[3:] for p in (status or b"").split(b"\0") if p.startswith(b"?? "))
    digest = hashlib.sha256(diff)
    for rel in untracked:
        digest.update(b"\0untracked\0" + rel + b"\0")
        digest.update(_untracked_digest(root / os.fsdecode(rel)))
    dirty = bool(status)
    return {
        "commit": head.decode().strip(),
        "dirty": dirty,
        "diff_sha256": digest.hexdigest() if dirty else None,
    }


def _untracked_digest(path: Path) -> bytes:
    """An untracked file's part of the diff digest: its content's sha256, or for a file over
    :data:`UNTRACKED_HASH_LIMIT` (a dataset beside the ops, hashed at every run) its size and modification time."""
    try:
        st = path.stat()
        if st.st_size > UNTRACKED_HASH_LIMIT:
            return f"large:{st.st_size}:{st.st_mtime_ns}".encode()
        return hashlib.sha256(path.read_bytes()).digest()
    except OSError:
        return b"unreadable"


def machine() -> dict[str, Any]:
    return {
        "host": socket.gethostname(),
        "os": platform.platform(),
        "arch": platform.machine(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
    }


def collect(config: Config, *, when: float, of: str = "run") -> dict[str, Any]:
    """The provenance record of a results document. ``of`` says what it describes: ``run`` (collected as the
    run ended) or ``report`` (a report built from the store later: the workspace as it is then)."""
    try:
        toml_hash: str | None = sha256(config.path.read_bytes())
    except OSError:
        toml_hash = None
    return {
        "version": PROVENANCE_VERSION,
        "of": of,
        "date": datetime.datetime.fromtimestamp(when, datetime.timezone.utc).isoformat(timespec="seconds"),
        "config_sha256": sha256(canonical_json(config_settings(config))),
        "toml_sha256": toml_hash,
        "git": git_state(config.root),
        "machine": machine(),
        "libraries": library_versions(),
    }
