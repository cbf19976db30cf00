"""The language server's options: from ``initializationOptions`` and ``workspace/configuration``.

Checked when they arrive, like jedi-language-server does: an unknown key or a wrong type is reported
to the user (``window/showMessage``) with what was used instead, never silently ignored.

Trust is the editor's decision, made once: ``initializationOptions`` set it, and afterwards
(``workspace/configuration`` answers, ``didChangeConfiguration``) it may only be lowered, so settings a
client fills from project-local files (e.g. Neovim with neoconf) cannot make an untrusted workspace run
code. ``iterations`` is bounded by the engine's ``MAX_ITERATIONS``, as in gpuemu.toml, the CLI and the API.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields, replace
from typing import Any

from .engine.config.keys import MAX_ITERATIONS, MAX_JOBS

MODES = ("quick", "thorough")
WATCH = ("auto", "client", "server", "off")
RUN_ON_OPEN = ("quick", "off")
LOG_LEVELS = ("error", "warning", "info", "log")


@dataclass(frozen=True)
class ServerOptions:
    trusted: bool = True  # workspace trust: while false, no workspace code runs (config diagnostics only)
    on_save: bool = True  # validate affected ops when a file is saved
    mode: str = "quick"  # quick | thorough, for validation on save
    iterations: int | None = None  # cases per op (default: the mode's)
    jobs: int = 1  # ops validated at once
    store_path: str | None = None  # overrides .gpuemu/gpuemu.db (and GPUEMU_STORE)
    lint: bool = True  # lint .cu kernels on save
    hover: bool = True
    code_lens: bool = True
    code_actions: bool = True
    watch: str = "auto"  # auto: the client's file watching when offered, else a server-side watcher
    poll_store_seconds: float = 1.0  # how often to look for results written by other processes
    #: whether opening starts runs, the one switch for it: quick: a workspace without stored results is validated
    #: once when it opens, and a file opened validates its ops that have no result newer than it (gpuemu.toml:
    #: its ops never validated); off: opening runs nothing. ``onOpen: false`` (its older, narrower name) is off.
    run_on_open: str = "quick"
    log_level: str = "info"  # the least severe window/logMessage sent: error | warning | info | log

    def merged(self, raw: Any, *, initial: bool = False) -> tuple[ServerOptions, list[str]]:
        """These options updated from a client's options object, with the problems found.

        ``raw`` is what the client sent: keys at its top level and/or under ``"gpuemu"`` (both layers are
        read; the nested one wins for every option but trust). Trust fails closed: a ``trusted`` that is
        present but not a JSON boolean, a case or nesting variant of the key anywhere in the object, a
        ``"gpuemu"`` that is not an object, or options that are not an object at all all mean untrusted,
        with a message naming the bad key. Only the ``initial`` options (``initializationOptions``) may grant
        trust; later ones may only lower it.
        """
        if raw is None:
            return self, []
        problems: list[str] = []
        if not isinstance(raw, dict):
            return self._distrust(
                problems, f"gpuemu options must be an object, got {type(raw).__name__}; using defaults"
            )
        layers: list[dict[str, Any]] = [{k: v for k, v in raw.items() if k != "gpuemu"}]
        distrust: list[str] = []
        if "gpuemu" in raw:
            if isinstance(raw["gpuemu"], dict):
                layers.append(raw["gpuemu"])
            else:
                distrust.append(f"gpuemu option 'gpuemu' must be an object, got {raw['gpuemu']!r}")
        distrust += [f"gpuemu option key {where}: trust is read only from 'trusted'" for where in _stray_trust(raw)]
        known = {f.name: f for f in fields(self)}
        aliases = {_camel(n): n for n in known}
        changes: dict[str, Any] = {}
        grants: list[bool] = []
        older_off = False  # onOpen: false
        for layer in layers:
            for key, value in layer.items():
                name = aliases.get(key, key)
                if key == "onOpen":  # the older name: false still means nothing runs when a file opens
                    if not isinstance(value, bool):
                        problems.append(f"gpuemu option {key!r}: expected true or false, got {value!r}")
                    older_off = older_off or value is False
                    continue
                if name == "trusted":
                    if isinstance(value, bool):
                        grants.append(value)
                    else:
                        distrust.append(f"gpuemu option {key!r}: expected true or false, got {value!r}")
                    continue
                if name not in known:
                    if _trust_key(key):
                        continue  # reported by _stray_trust
                    problems.append(f"unknown gpuemu option {key!r} (known: {', '.join(sorted(aliases))})")
                    continue
                error = _check(name, value)
                if error:
                    problems.append(f"gpuemu option {key!r}: {error}; keeping {getattr(self, name)!r}")
                    continue
                changes[name] = value
        if older_off:
            changes["run_on_open"] = "off"
        if distrust:
            changes["trusted"] = False
            problems += [f"{p}; the workspace is treated as untrusted (no workspace code runs)" for p in distrust]
        elif grants:
            wanted = all(grants)
            if wanted and not self.trusted and not initial:
                problems.append(
                    "gpuemu option 'trusted': trust can only be lowered after the server started "
                    "(the editor grants it at start); keeping False"
                )
            else:
                changes["trusted"] = wanted if initial else (self.trusted and wanted)
        return replace(self, **changes), problems

    def _distrust(self, problems: list[str], why: str) -> tuple[ServerOptions, list[str]]:
        problems.append(f"{why}; the workspace is treated as untrusted (no workspace code runs)")
        return replace(self, trusted=False), problems


def _trust_key(key: object) -> bool:
    """``Trusted``, ``TRUSTED``, ``is-trusted``, ``trusted_``: any spelling that a reader takes for trust."""
    return isinstance(key, str) and "trusted" in re.sub(r"[^a-z]", "", key.lower())


def _stray_trust(raw: Any, path: str = "", depth: int = 0) -> list[str]:
    """Where ``raw`` holds a trust-like key other than ``trusted`` at the top level or under ``gpuemu``.

    The walk is bounded (depth and breadth), and a structure too deep to finish counts as a stray key:
    what cannot be read is not trusted."""
    found: list[str] = []
    if depth > 16:
        return [f"{path or '(options)'} (nested too deeply to read)"]
    items = raw.items() if isinstance(raw, dict) else enumerate(raw) if isinstance(raw, list) else ()
    for i, (key, value) in enumerate(items):
        if i > 10_000:
            return [*found, f"{path or '(options)'} (too many entries to read)"]
        here = f"{path}.{key}" if path else str(key)
        canonical = key == "trusted" and path in ("", "gpuemu")
        if _trust_key(key) and not canonical:
            found.append(repr(here))
        found += _stray_trust(value, here, depth + 1)
    return found


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p.title() for p in rest)


_BOOLS = {"trusted", "on_save", "lint", "hover", "code_lens", "code_actions"}


def _check(name: str, value: Any) -> str | None:
    if name in _BOOLS:
        return None if isinstance(value, bool) else f"expected true or false, got {value!r}"
    if name == "mode":
        return None if value in MODES else f"expected one of {', '.join(MODES)}, got {value!r}"
    if name == "watch":
        return None if value in WATCH else f"expected one of {', '.join(WATCH)}, got {value!r}"
    if name == "run_on_open":
        return None if value in RUN_ON_OPEN else f"expected one of {', '.join(RUN_ON_OPEN)}, got {value!r}"
    if name == "log_level":
        return None if value in LOG_LEVELS else f"expected one of {', '.join(LOG_LEVELS)}, got {value!r}"
    if name in ("iterations", "jobs"):
        if value is None and name == "iterations":
            return None
        top = MAX_ITERATIONS if name == "iterations" else MAX_JOBS
        ok = isinstance(value, int) and not isinstance(value, bool) and 0 < value <= top
        return None if ok else f"expected a positive integer up to {top}, got {value!r}"
    if name == "store_path":
        return None if value is None or isinstance(value, str) else f"expected a path, got {value!r}"
    if name == "poll_store_seconds":
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0
        return None if ok else f"expected seconds > 0, got {value!r}"
    return None


@dataclass
class OptionsState:
    """Options as currently in force, and the problems reported for them."""

    options: ServerOptions = field(default_factory=ServerOptions)
    problems: list[str] = field(default_factory=list)
