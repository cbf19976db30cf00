"""What a request names and whether its parameters are usable: document URIs, the gpuemu.toml buffer a request
is about, and the parameters of ``gpuemu/runOps`` and the ``gpuemu.*`` commands, checked before anything runs."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from pygls.exceptions import JsonRpcInvalidParams

from ..diagnostics.code_actions import CALIBRATE, MINIMIZE, REPRODUCE, RUN_ALL, RUN_OP, RUN_QUICK, RUN_THOROUGH
from ..engine.config.keys import CONFIG_NAME, MAX_ITERATIONS, MAX_SEED
from ..options import MODES
from . import Server
from .test_explorer import RUN_OPS

_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def uri_to_path(uri: str) -> Path | None:
    """The file a ``file:`` URI names; None for any other URI (``untitled:``, ``git:``) or none at all."""
    if not isinstance(uri, str):
        return None
    parsed = urlparse(uri)
    if parsed.scheme != "file":
        return None
    try:
        return Path(unquote(parsed.path)).resolve()
    except (ValueError, OSError):  # a NUL byte, a path too long to resolve
        return None


def request_path(uri: Any) -> Path | None:
    """The file a request's document URI names (None: not a file); a string that is not a URI at all is
    the client's error, answered with InvalidParams."""
    if not isinstance(uri, str) or not _SCHEME.match(uri):
        raise JsonRpcInvalidParams(f"not a document URI: {str(uri)[:200]!r}")
    return uri_to_path(uri)


def toml_document(ls: Server, uri: Any) -> tuple[str, Path] | None:
    """(the buffer's text, its workspace root) when ``uri`` is a gpuemu.toml; None for any other document."""
    path = request_path(uri)
    if path is None or path.name != CONFIG_NAME:
        return None
    try:
        return ls.workspace.get_text_document(uri).source, path.parent
    except (OSError, UnicodeDecodeError):
        return None


def _plain(value: Any) -> Any:
    """pygls hands untyped params over as namedtuple ``Object`` s; turn them back into plain JSON values."""
    if hasattr(value, "_asdict"):
        return {k: _plain(v) for k, v in value._asdict().items()}
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


# --- request and command parameters: checked before anything runs ------------------------------------
def _integer(value: Any, low: int, high: int) -> int | None:
    """``value`` as an integer in low..high (JSON numbers, integral floats from Lua, digit strings), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    elif isinstance(value, str) and value.strip().isdigit():
        value = int(value.strip())
    return value if isinstance(value, int) and low <= value <= high else None


def _param(what: str, key: str, value: Any) -> Any:
    """One checked parameter, normalized; InvalidParams naming ``what`` and ``key`` when it is not usable."""
    if key in ("workspace", "op"):
        if isinstance(value, str) and value:
            return value
        raise JsonRpcInvalidParams(f"{what}: {key} must be a non-empty string, got {value!r}")
    if key in ("ids", "ops"):
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return value
        raise JsonRpcInvalidParams(f"{what}: {key} must be a list of strings, got {value!r}")
    if key == "mode":
        if value in MODES:
            return value
        raise JsonRpcInvalidParams(f"{what}: mode must be one of {', '.join(MODES)}, got {value!r}")
    if key == "iterations":
        number = _integer(value, 1, MAX_ITERATIONS)
        if number is not None and not isinstance(value, str):
            return number
        raise JsonRpcInvalidParams(f"{what}: iterations must be an integer in 1..{MAX_ITERATIONS}, got {value!r}")
    if key == "minimized":
        if isinstance(value, bool):
            return value
        raise JsonRpcInvalidParams(f"{what}: minimized must be true or false, got {value!r}")
    if key == "seed":
        number = _integer(value, 0, MAX_SEED)
        if number is not None:
            return number
        raise JsonRpcInvalidParams(f"{what}: seed must be an integer in 0..{MAX_SEED}, got {value!r}")
    raise JsonRpcInvalidParams(f"{what}: unknown parameter {key!r}")


#: Keys any LSP client may add to a request's params (progress tokens): accepted; a command's workDoneToken
#: carries its progress (command_params).
_PROGRESS_KEYS = ("workDoneToken", "partialResultToken")


def checked(what: str, raw: Any, keys: Sequence[str], required: Sequence[str] = ()) -> dict[str, Any]:
    """An object of parameters checked key by key (null or absent keys are left out); anything else, an
    unknown key included, is InvalidParams: a request this server misreads must not run something."""
    plain = _plain(raw)
    if plain is None:
        plain = {}
    shape = ", ".join(f"{k}{'' if k in required else '?'}" for k in keys)
    if not isinstance(plain, dict):
        raise JsonRpcInvalidParams(f"{what} takes an object {{{shape}}}, got {type(plain).__name__}")
    unknown = [k for k in plain if k not in keys and k not in _PROGRESS_KEYS]
    if unknown:
        raise JsonRpcInvalidParams(f"{what} takes an object {{{shape}}}; unknown: {', '.join(map(repr, unknown))}")
    out = {k: _param(what, k, v) for k, v in plain.items() if k in keys and v is not None}
    missing = [k for k in required if k not in out]
    if missing:
        raise JsonRpcInvalidParams(f"{what}: {', '.join(missing)} required")
    return out


RUN_KEYS = ("workspace", "ids", "ops", "mode", "iterations")
COMMAND_KEYS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {  # command -> (keys, required keys)
    RUN_OP: (("workspace", "op", "mode"), ("op",)),
    RUN_ALL: (("workspace", "op", "mode"), ()),
    RUN_QUICK: (("workspace", "op"), ()),
    RUN_THOROUGH: (("workspace", "op"), ()),
    REPRODUCE: (("workspace", "op", "seed", "minimized"), ("op", "seed")),
    MINIMIZE: (("workspace", "op", "seed"), ("op", "seed")),
    CALIBRATE: (("workspace", "op", "iterations"), ("op",)),
}


def run_params(params: Any) -> dict[str, Any]:
    """``gpuemu/runOps`` parameters: an object or nothing; ``[]``, a bad mode or a bad count is InvalidParams
    (never "run everything")."""
    return checked(RUN_OPS, params, RUN_KEYS)


def command_params(name: str, args: Sequence[Any]) -> dict[str, Any]:
    """A command's one argument object (none at all: ``{}``), checked like a request's parameters."""
    if len(args) > 1:
        raise JsonRpcInvalidParams(f"{name} takes one argument object, got {len(args)} arguments")
    keys, required = COMMAND_KEYS[name]
    out = checked(name, args[0] if args else None, keys, required)
    token = _plain(args[0]).get("workDoneToken") if args and isinstance(_plain(args[0]), dict) else None
    if isinstance(token, (str, int)) and not isinstance(token, bool):  # the client's progress token (LSP's type)
        out["workDoneToken"] = token
    return out
