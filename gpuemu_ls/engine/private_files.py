"""Files the tool writes for itself (reproductions, inputs, baselines), written where they belong only.

A name that reaches a path (an op name, a baseline tag) is checked against one safe character set, and
every file is created through directory descriptors opened with ``O_NOFOLLOW`` from the workspace root
down, then renamed into place. A symlink planted at ``.gpuemu/``, ``.gpuemu/repro/`` or at the file
itself is therefore refused (the folders) or replaced (the file), never followed: a hostile checkout
cannot make ``gpuemu reproduce`` overwrite ``~/.bashrc``.
"""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Sequence
from pathlib import Path

from .errors import UsageError

NAME_MAX = 100
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]*")
NAME_RULE = f"letters, digits, '_', '.', '+' or '-', not starting with '.', '+' or '-', at most {NAME_MAX} characters"


def name_problem(name: str) -> str | None:
    """Why ``name`` cannot name a file the tool writes (None when it can)."""
    if not name:
        return "it is empty"
    if len(name) > NAME_MAX:
        return f"it is {len(name)} characters long"
    bad = next((c for c in name if not (c.isascii() and (c.isalnum() or c in "_.+-"))), None)
    if bad is not None:
        return f"it holds {bad!r}"
    if not _NAME.fullmatch(name):
        return f"it starts with {name[0]!r}"
    return None


def check_name(kind: str, name: str) -> str:
    """``name`` itself, or a UsageError saying what is wrong with it."""
    why = name_problem(name)
    if why:
        raise UsageError(f"{kind} {name!r} cannot name a file: {why} (use {NAME_RULE})")
    return name


def write_private(root: Path, parts: Sequence[str], data: bytes) -> Path:
    """Write ``root/parts...`` atomically, creating folders, without following any symlink below ``root``.

    ``root`` (the workspace) is opened as the user gave it; each part below it must be a plain name.
    Raises UsageError when a folder on the way is a symlink or not a folder.
    """
    for part in parts:
        if part in ("", ".", "..") or "/" in part or "\0" in part:
            raise UsageError(f"refusing to write {'/'.join(parts)!r}: {part!r} is not a plain file name")
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for i, part in enumerate(parts[:-1]):
            try:
                os.mkdir(part, 0o755, dir_fd=fd)
            except FileExistsError:
                pass
            try:
                sub = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    where = root.joinpath(*parts[: i + 1])
                    raise UsageError(f"refusing to write into {where}: it is a symlink or not a folder") from None
                raise
            os.close(fd)
            fd = sub
        name = parts[-1]
        tmp = f".{name}.{os.getpid()}.tmp"
        out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644, dir_fd=fd)
        try:
            with os.fdopen(out, "wb") as fh:
                fh.write(data)
            os.replace(tmp, name, src_dir_fd=fd, dst_dir_fd=fd)  # replaces a symlink there, never its target
        except BaseException:
            try:
                os.unlink(tmp, dir_fd=fd)
            except OSError:
                pass
            raise
    finally:
        os.close(fd)
    return root.joinpath(*parts)
