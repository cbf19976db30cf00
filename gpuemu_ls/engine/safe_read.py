"""Reading a file the user's workspace holds, without trusting what it is.

A workspace is the user's (or an attacker's) tree: ``gpuemu.toml`` may be a FIFO, a device or a 1 GiB sparse
file, a ``.py`` the completion lists may be the same. Reading such a file whole hangs the reader (a FIFO
with no writer) or costs gigabytes (a sparse file reads as zeros). Every read of a workspace file by the
server, the CLI and the config loader goes through :func:`read_text`: the file is opened without blocking
(``O_NONBLOCK``: opening a FIFO returns at once), checked to be a regular file, its size checked against a
cap *before* anything is read, and then read to at most that cap. What cannot be read is an
:class:`UnreadableFile` whose message names the file and says why, the same words in every face.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

#: The largest source or configuration file read (gpuemu.toml, a module, a reference script): ten thousand
#: ops take about 2 MB of TOML; a 50 MB file would keep the pure-Python parsers busy for a minute.
MAX_SOURCE_BYTES = 16 << 20
#: The largest ``.cu``/``.ptx`` source the lint reads for its lines (a generated kernel may be large).
MAX_LINT_SOURCE_BYTES = 64 << 20


class UnreadableFile(OSError):
    """A workspace file that is not read: not a regular file, too large, or not readable at all."""

    def __init__(self, path: Path, why: str) -> None:
        super().__init__(f"{path}: {why}")
        self.path = path
        self.why = why


def read_bytes(path: Path | str, *, limit: int = MAX_SOURCE_BYTES) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes, or :class:`UnreadableFile` saying why not."""
    p = Path(path)
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise UnreadableFile(p, f"cannot be read ({exc.strerror or exc})") from None
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise UnreadableFile(p, "is a folder, not a file")
        if not stat.S_ISREG(st.st_mode):
            raise UnreadableFile(p, "is not a regular file (a FIFO, socket or device): not read")
        if st.st_size > limit:
            raise UnreadableFile(
                p, f"is {st.st_size / 2**20:.1f} MB, more than the {limit >> 20} MB a file read here may be"
            )
        chunks: list[bytes] = []
        left = limit + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        data = b"".join(chunks)
        if len(data) > limit:  # it grew since fstat
            raise UnreadableFile(p, f"is more than the {limit >> 20} MB a file read here may be")
        return data
    finally:
        os.close(fd)


def read_text(path: Path | str, *, limit: int = MAX_SOURCE_BYTES, errors: str = "strict") -> str:
    """:func:`read_bytes` decoded as UTF-8 (``errors`` as for ``bytes.decode``; a decoding error is a
    ``UnicodeDecodeError``, as ``Path.read_text`` raises)."""
    return read_bytes(path, limit=limit).decode("utf-8", errors=errors)
