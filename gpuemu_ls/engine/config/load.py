"""Load and check ``gpuemu.toml``: every key known, every value typed, every problem with its position.

The project file sits over user defaults (``~/.config/gpuemu/config.toml``). Nothing unknown is
ignored: an unknown key, a wrong type or a dangling reference is an error naming file, line and
column, with a hint. All problems of a file are collected, so an editor can show them at once.
Checking never runs workspace code: modules are found on disk and read with ``ast``.
"""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path
from typing import Any

from ..errors import ConfigError, Problem
from ..safe_read import read_text
from .checker import _Checker
from .keys import CONFIG_NAME
from .model import Config
from .tomlpos import PositionIndex

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


def user_config_path() -> Path:
    env = os.environ.get("GPUEMU_USER_CONFIG")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "gpuemu" / "config.toml"


def find_workspace(start: Path) -> Path | None:
    """The nearest folder at or above ``start`` that holds a ``gpuemu.toml``.

    Anything named gpuemu.toml counts, a dangling symlink, a folder or a FIFO included: it is this
    workspace's configuration, broken (``load_config`` says how), never a reason to run a parent's.
    """
    start = start.resolve()
    for folder in (start, *start.parents):
        if os.path.lexists(folder / CONFIG_NAME):
            return folder
    return None


def _unreadable(path: Path) -> str | None:
    """Why ``path`` cannot be read as a configuration file (None: it can): checked before opening it, since
    reading a FIFO would block forever."""
    if not os.path.lexists(path):
        return None
    try:
        st = path.stat()
    except OSError as exc:  # a dangling symlink or a loop
        return f"{CONFIG_NAME} is a symlink that cannot be followed ({exc.strerror or exc})"
    if stat.S_ISDIR(st.st_mode):
        return f"{CONFIG_NAME} is a folder, not a file"
    if not stat.S_ISREG(st.st_mode):
        return f"{CONFIG_NAME} is not a regular file (a FIFO, socket or device)"
    return None


def load_config(root: Path, *, text: str | None = None, user_config: Path | None = None) -> Config:
    """Load ``root/gpuemu.toml`` (or ``text``, the unsaved editor buffer of it) over the user defaults.

    Raises :class:`ConfigError` with every problem found.
    """
    root = root.resolve()
    path = root / CONFIG_NAME
    if text is None:
        why = _unreadable(path)
        if why is not None:
            raise ConfigError([Problem(why, path, hint="replace it with the workspace's gpuemu.toml")])
        try:
            _check_size(path, path.stat().st_size)
            text = read_text(path)
        except FileNotFoundError:
            raise ConfigError(
                [Problem(f"no {CONFIG_NAME} in {root}", path, hint="run `gpuemu init` to create one")]
            ) from None
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError([Problem(f"cannot read {CONFIG_NAME}: {exc}", path)]) from None
    _check_size(path, len(text))
    user_path = user_config if user_config is not None else user_config_path()
    user_raw: dict[str, Any] = {}
    if user_path.is_file():
        try:
            user_text = read_text(user_path)
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError([Problem(f"cannot read the user configuration: {exc}", user_path)]) from None
        user_raw = _parse_checked(user_path, user_text, user=True)[0]
    raw, checker = _parse_checked(path, text, user=False)
    merged = _deep_merge(user_raw, raw)
    return checker.build(root, path, merged)


#: The largest gpuemu.toml read: ten thousand ops take about 2 MB; a 50 MB file (a paste gone wrong, a
#: generated file) would keep the pure-Python TOML parser busy for a minute, and an editor waiting on it.
MAX_CONFIG_BYTES = 16 << 20


def _check_size(path: Path, size: int) -> None:
    if size > MAX_CONFIG_BYTES:
        raise ConfigError(
            [
                Problem(
                    f"{CONFIG_NAME} is {size / 2**20:.1f} MB, more than the {MAX_CONFIG_BYTES >> 20} MB a "
                    "configuration may be",
                    path,
                    line=1,
                    hint="keep generated data out of gpuemu.toml (ten thousand ops take about 2 MB)",
                )
            ]
        )


def _deepest_line(text: str) -> int:
    """The line where bracket nesting first gets deep (where the RecursionError started)."""
    depth = 0
    for number, line in enumerate(text.splitlines(), 1):
        for ch in line:
            depth += ch in "[{"
            depth -= ch in "]}"
            if depth > 100:
                return number
    return 1


def _parse_checked(path: Path, text: str, *, user: bool) -> tuple[dict[str, Any], _Checker]:
    try:
        raw = tomllib.loads(text)
    except RecursionError:  # tomllib recurses per nesting level: "a = [[[[...]]]]" thousands deep
        raise ConfigError(
            [
                Problem(
                    "TOML nesting too deep to read (arrays or inline tables inside each other)",
                    path,
                    _deepest_line(text),
                    1,
                )
            ]
        ) from None
    except tomllib.TOMLDecodeError as exc:
        line, col = _decode_error_position(exc)
        raise ConfigError(
            [
                Problem(
                    f"TOML syntax error: {_strip_position(str(exc))}",
                    path,
                    line,
                    col,
                    hint="see https://toml.io for the syntax",
                )
            ]
        ) from None
    checker = _Checker(path, PositionIndex(text), user=user)
    checker.check_document(raw)
    if checker.problems:
        raise ConfigError(sorted(checker.problems, key=lambda p: (p.line or 0, p.column or 0)))
    return raw, checker


def _decode_error_position(exc: Exception) -> tuple[int | None, int | None]:
    line = getattr(exc, "lineno", None)
    col = getattr(exc, "colno", None)
    if line is None:
        import re

        m = re.search(r"line (\d+), column (\d+)", str(exc))
        if m:
            line, col = int(m.group(1)), int(m.group(2))
    return line, col


def _strip_position(msg: str) -> str:
    import re

    return re.sub(r"\s*\(at line \d+, column \d+\)", "", msg)


def _deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _deep_merge(out[k], v)
        else:
            out[k] = v
    return out
