"""Writing a file the user owns or reads later (gpuemu.toml edits, baselines, reports): all or nothing.

``Path.write_text`` truncates first and writes after: a full disk, a quota, a kill or an encoding error in
between leaves a cut or empty file where the old one was (a 2.4 MB gpuemu.toml cut to 1 MiB that the next
run reads without complaint). :func:`replace_file` writes a temporary file in the target's own folder (a
symlink's target, so the link stays a link), with the target's mode, fsyncs it and renames it over the
target: the old file is untouched until the new one is complete, and an error says so. Text is encoded with
``backslashreplace``, so a lone surrogate in an exception message can never fail a report half-way.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from collections.abc import Iterable
from pathlib import Path


def _umask() -> int:
    """The process's umask without changing it (``os.umask`` would, for every thread at once)."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    return 0o022


#: Text is encoded this many characters at a time: a report of thousands of ops is never copied whole.
_SLICE = 1 << 20


def replace_file(path: Path | str, data: bytes | str | Iterable[bytes | str]) -> Path:
    """Write ``data`` (or its parts one after the other) to ``path`` atomically; returns the file written (a
    symlink's target).

    Raises ``OSError`` whose message says the old file was left as it was.
    """
    parts = (data,) if isinstance(data, (bytes, str)) else data
    target = Path(os.path.realpath(path))
    try:
        mode = stat.S_IMODE(os.stat(target).st_mode)
    except FileNotFoundError:
        mode = 0o666 & ~_umask()
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".partial", dir=target.parent)
        with os.fdopen(fd, "wb") as fh:
            for part in parts:
                if isinstance(part, bytes):
                    fh.write(part)
                    continue
                for at in range(0, len(part), _SLICE):
                    fh.write(part[at : at + _SLICE].encode("utf-8", errors="backslashreplace"))
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, target)
        tmp = None
    except OSError as exc:
        why = exc.strerror or str(exc)
        raise OSError(exc.errno, f"{why} (nothing written: {target} is as it was)") from None
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
    with contextlib.suppress(OSError):  # the rename itself survives a crash once the folder is synced
        dfd = os.open(target.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    return target
