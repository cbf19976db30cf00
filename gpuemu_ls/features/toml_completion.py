"""Completion in gpuemu.toml, from the server so that every editor has it (no TOML extension needed).

Keys come by table from the checker's schema (:mod:`..engine.config.keydocs`), with their docs; values
for the keys that take names (dtypes, layouts, distributions, invariants, frameworks, execution modes,
call styles, signs, booleans), ``module = "file:function"`` from the top-level functions of the
workspace's ``.py`` files, and reference, script and source paths from its files. Every item carries a
text edit over what was typed, so ``:``, ``.`` and ``/`` inside a value do not split the word.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

from lsprotocol import types as lsp

from ..diagnostics.ranges import top_level_functions
from ..engine.config.keydocs import (
    ARRAY_TABLES,
    BOOL_KEYS,
    ENUM_VALUES,
    FREE_TABLES,
    KEYS,
    TABLE_KEYS,
    VALUE_DOCS,
    key_doc,
)
from .toml_context import HEADER, Spot, analyze, enclosing_header, split_key

TRIGGER_CHARACTERS = ['"', "[", ".", ":", "/"]
#: Folders never searched for modules and scripts (environments, caches, gpuemu's own state).
SKIP_DIRS = {".git", ".venv", "venv", "node_modules", "__pycache__", ".gpuemu", ".tox", "build", "dist", ".mypy_cache"}
#: Files whose names a completion offers at most: past it, only those matching what was typed, and the list
#: says it is incomplete (the editor asks again as the user types), never a silent cut.
MAX_FILES = 2000
#: Values a completion sends at most: 2,000 items of a 1,000-op workspace took ~0.1 s to serialize alone, and as
#: long again for a client to read, at every keystroke; past it, those containing what is typed come first and
#: the list says it is incomplete (the editor asks again as the user types). An editor shows a dozen at a time.
MAX_ITEMS = 100
#: Files looked at for one completion at most (a workspace opened at a home folder must not walk it all).
MAX_WALK = 100_000
MAX_DEPTH = 6


def toml_completion_list(text: str, line: int, character: int, root: Path) -> lsp.CompletionList:
    """The completion list at a position: incomplete where a workspace has more matching files than
    :data:`MAX_FILES` (the list then holds those matching what is typed, and the editor asks again)."""
    spot = analyze(text, line, character)
    cursor = lsp.Position(line, character)
    if spot.kind == "header":
        return lsp.CompletionList(is_incomplete=False, items=_headers(text, line, character))
    if spot.kind == "key":
        return lsp.CompletionList(is_incomplete=False, items=_keys(spot, text, cursor))
    if spot.kind == "value":
        found = _Found(spot.prefix.lstrip('"'))
        items = _values(spot, cursor, root, found)
        return lsp.CompletionList(is_incomplete=found.incomplete, items=items)
    return lsp.CompletionList(is_incomplete=False, items=[])


class _Found:
    """Which workspace files a value completion offers: all of them up to :data:`MAX_FILES`; past that, those
    whose name (module or path) contains what is typed, and the list is marked incomplete."""

    def __init__(self, typed: str) -> None:
        self.typed = typed.split(":", 1)[0]  # a module's part: the functions of a matching file all come
        self.incomplete = False

    def files(self, root: Path, suffixes: tuple[str, ...], name: Callable[[Path], str]) -> list[Path]:
        every = workspace_files(root, suffixes, limit=MAX_WALK)
        if len(every) >= MAX_WALK:
            self.incomplete = True
        if len(every) <= MAX_FILES:
            return every
        self.incomplete = True
        return [f for f in every if self.typed in name(f)][:MAX_FILES]


def _edit(spot: Spot, cursor: lsp.Position, new_text: str) -> lsp.TextEdit:
    return lsp.TextEdit(lsp.Range(lsp.Position(*spot.start), cursor), new_text)


def _doc(text: str) -> lsp.MarkupContent:
    return lsp.MarkupContent(lsp.MarkupKind.Markdown, text)


def _keys(spot: Spot, text: str, cursor: lsp.Position) -> list[lsp.CompletionItem]:
    table = spot.schema
    if table is None or table in FREE_TABLES:  # a name of the user's: nothing to offer
        return []
    present = _present_keys(text, spot)
    where = f"[{'.'.join(table).replace('*', '<name>')}]" if table else "top level"
    items = []
    for i, key in enumerate(sorted(KEYS.get(table, ()))):
        if key in present:
            continue
        is_table = (*table, key) in TABLE_KEYS
        items.append(
            lsp.CompletionItem(
                key,
                kind=lsp.CompletionItemKind.Module if is_table else lsp.CompletionItemKind.Property,
                detail=f"gpuemu.toml {where}",
                documentation=_doc(key_doc(table, key) or ""),
                sort_text=f"{i:03d}",
                filter_text=key,
                text_edit=_edit(spot, cursor, key),
            )
        )
    return items


def _present_keys(text: str, spot: Spot) -> set[str]:
    """Keys already set in the table the cursor is in, so they are not offered again (only for a table
    written as a header or the top level: inline tables and dotted keys get every key)."""
    lines = text.split("\n")
    header_line, keys, _ = enclosing_header(lines, spot.start[0])
    if tuple(keys) != spot.table:
        return set()
    out: set[str] = set()
    for i in range((header_line + 1) if header_line is not None else 0, len(lines)):
        if HEADER.match(lines[i]):
            break
        head, eq, _ = lines[i].partition("=")
        parts = split_key(head) if eq and i != spot.start[0] else []
        if len(parts) == 1 and head.strip() == head.strip().strip(".") and not lines[i].startswith((" ", "\t", "]")):
            out.add(parts[0])
    return out


def _headers(text: str, line: int, character: int) -> list[lsp.CompletionItem]:
    """``[table]`` and ``[[ops]]`` headers, replacing the whole bracketed text typed so far."""
    body = text.split("\n")[line]
    first = len(body) - len(body.lstrip())
    end = character
    while end < len(body) and body[end] in "] \t":  # a closing bracket the editor added
        end += 1
    rng = lsp.Range(lsp.Position(line, first), lsp.Position(line, end))
    items = []
    paths = sorted(p for p in (set(KEYS) | FREE_TABLES) if p and "*" not in p and p != ("ops", "inputs"))
    for i, path in enumerate(paths):
        name = ".".join(path)
        header = f"[[{name}]]" if path in ARRAY_TABLES else f"[{name}]"
        doc = key_doc(path[:-1], path[-1]) or ""
        items.append(
            lsp.CompletionItem(
                header,
                kind=lsp.CompletionItemKind.Module,
                detail="gpuemu.toml table",
                documentation=_doc(doc),
                sort_text=f"{i:03d}",
                filter_text=header,
                text_edit=lsp.TextEdit(rng, header),
            )
        )
    return items


def _values(spot: Spot, cursor: lsp.Position, root: Path, found: _Found) -> list[lsp.CompletionItem]:
    table, key = spot.schema, spot.key
    if table is None:
        return []
    candidates: list[tuple[str, str, lsp.CompletionItemKind, str]] = []  # (value, detail, kind, doc)
    if key in ENUM_VALUES and key_doc(table, key) is not None:
        values, section = ENUM_VALUES[key]
        docs = VALUE_DOCS.get(section or "", {})
        candidates = [(v, key, lsp.CompletionItemKind.EnumMember, docs.get(v, "")) for v in values]
    elif key in BOOL_KEYS and key_doc(table, key) is not None:
        if spot.in_string:
            return []
        return [
            lsp.CompletionItem(v, kind=lsp.CompletionItemKind.Value, text_edit=_edit(spot, cursor, v))
            for v in ("true", "false")
        ]
    elif table == ("ops",) and key == "module":
        candidates = _functions(root, found)
    elif table == ("ops",) and key == "reference":
        candidates = _functions(root, found) + _files(root, (".py",), found)
    elif table == ("ops",) and key == "op_script":
        candidates = _files(root, (".py",), found)
    elif table == ("kernels",) and key == "source":
        candidates = _files(root, (".cu", ".cuh"), found)
    elif table == ("kernels",) and key == "reference":
        candidates = _files(root, (".py",), found)
    if len(candidates) > MAX_ITEMS:
        typed = spot.prefix.lstrip('"')
        candidates = sorted(candidates, key=lambda c: typed not in c[0])[:MAX_ITEMS]  # stable: matching first
        found.incomplete = True
    items = []
    where = lsp.Range(lsp.Position(*spot.start), cursor)  # one range for every item: 2,000 were built otherwise
    for i, (value, detail, kind, doc) in enumerate(candidates):
        new = value if spot.in_string else f'"{value}"'
        items.append(
            lsp.CompletionItem(
                value,
                kind=kind,
                detail=detail,
                documentation=_doc(doc) if doc else None,
                sort_text=f"{i:05d}",
                filter_text=value if spot.in_string else new,
                text_edit=lsp.TextEdit(where, new),
            )
        )
    return items


def workspace_files(root: Path, suffixes: tuple[str, ...], *, limit: int = MAX_FILES) -> list[Path]:
    """The workspace's files with these suffixes, shallow first, skipping environments and caches; at most
    ``limit`` (a caller that gets ``limit`` files cannot tell whether there were more). A walk is kept while
    none of the folders it went through changed (a file added, removed or renamed changes its folder's time):
    completion asks at each keystroke, and walking 1,000 modules each time was most of its answer."""
    root = root.resolve()
    key = (root, suffixes, limit)
    kept = _WALKS.get(key)
    if kept is not None and all(_dir_time(d) == t for d, t in kept[0]):
        return kept[1]
    found: list[Path] = []
    seen: list[tuple[str, float]] = []
    for folder, dirs, files in os.walk(root):
        seen.append((folder, _dir_time(folder)))
        depth = len(Path(folder).relative_to(root).parts)
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and not d.startswith(".") and depth < MAX_DEPTH)
        found += [Path(folder) / f for f in sorted(files) if f.endswith(suffixes)]
        if len(found) >= limit:
            break
    if len(_WALKS) > 16:
        _WALKS.clear()
    found = found[:limit]
    _WALKS[key] = (seen, found)
    return found  # the kept list itself: _functions knows an unchanged walk by identity


#: (root, suffixes, limit) -> (the folders walked with their times, the files found)
_WALKS: dict[tuple[Path, tuple[str, ...], int], tuple[list[tuple[str, float]], list[Path]]] = {}


def _dir_time(folder: str) -> float:
    try:
        return os.stat(folder).st_mtime_ns
    except OSError:
        return -1.0


def _module_of(rel: str) -> str:
    """How ``module = "..."`` names a workspace file, from its path relative to the root (``pkg/mod.py`` ->
    ``pkg.mod``): no resolving per file, which was most of a completion's time over 1,000 modules."""
    parts = rel[: -len(".py")].split("/") if rel.endswith(".py") else rel.split("/")
    if parts and parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _functions(root: Path, found: _Found) -> list[tuple[str, str, lsp.CompletionItemKind, str]]:
    base = root.resolve()
    cut = len(str(base)) + 1  # workspace_files walks the resolved root: every path starts with it

    def rel_of(f: Path) -> str:
        return str(f)[cut:].replace(os.sep, "/")

    files = found.files(base, (".py",), lambda f: _module_of(rel_of(f)))

    def read() -> list[tuple[str, str, lsp.CompletionItemKind, str]]:
        out = []
        for file in files:
            rel = rel_of(file)
            mod = _module_of(rel)
            if not mod or not all(p.isidentifier() for p in mod.split(".")):
                continue  # not importable under that name
            for fn in sorted(top_level_functions(file), key=lambda n: n.startswith("_")):  # private ones last
                out.append((f"{mod}:{fn}", f"def {fn} in {rel}", lsp.CompletionItemKind.Function, ""))
        _FUNCTIONS[base] = (files, time.monotonic(), out)
        return out

    kept = _FUNCTIONS.get(base)
    if kept is None or kept[0] is not files or len(files) <= MAX_ITEMS:
        return read()  # a small tree is read afresh: its list is complete, so the editor would not ask again
    if time.monotonic() - kept[1] > FRESH_S and _rereading.acquire(blocking=False):
        # the same files a while ago: answered from what was read, and read again for the next keystroke
        threading.Thread(target=_reread, args=(read,), name="gpuemu-completion", daemon=True).start()
    return kept[2]


def _reread(read: Callable[[], object]) -> None:
    try:
        read()
    finally:
        _rereading.release()


#: How old the functions read from the same walk may be before they are read again, in the background (each
#: file's were read at every keystroke: a stat and a cache lookup per file, 1,000 of them, on the request
#: thread); a function added to a file since shows from the next request on.
FRESH_S = 5.0
_rereading = threading.Lock()
#: root -> (the walk they were read from, when, the candidates)
_FUNCTIONS: dict[Path, tuple[list[Path], float, list[tuple[str, str, lsp.CompletionItemKind, str]]]] = {}


def _files(root: Path, suffixes: tuple[str, ...], found: _Found) -> list[tuple[str, str, lsp.CompletionItemKind, str]]:
    base = root.resolve()
    files = found.files(root, suffixes, lambda f: f.relative_to(base).as_posix())
    return [(f.relative_to(base).as_posix(), "file", lsp.CompletionItemKind.File, "") for f in files]
