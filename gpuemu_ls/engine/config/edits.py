"""Edits to gpuemu.toml that keep its comments and layout (tomlkit): pin a seed, set tolerances.

Each takes the file's current text and returns the new text, so the CLI can write it and the
language server can send it as a WorkspaceEdit without touching the disk.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import tomlkit

from ..errors import UsageError
from .blocks import op_blocks
from .keys import pinned_seed


def _op_table(doc: Any, index: int, name: str) -> Any:
    ops = doc.get("ops")
    if ops is None or index >= len(ops) or ops[index].get("name") != name:
        raise UsageError(f"op {name!r} is not entry {index} of [[ops]] any more; reload and try again")
    return ops[index]


def pin_seed(text: str, index: int, name: str, seed: int, plan: int | None = None) -> str:
    """Add ``seed`` to the op's ``seeds`` (pinned regression cases, always run first). A bare integer pins
    the seed's plan-1 case; a case of a later plan version is pinned as ``{ seed = N, plan = P }``."""
    doc = tomlkit.parse(text)
    table = _op_table(doc, index, name)
    seeds = table.get("seeds")
    entry: Any = seed
    if plan is not None and plan > 1:
        entry = tomlkit.inline_table()
        entry["seed"] = seed
        entry["plan"] = plan
    pinned = {pinned_seed(p) for p in (seeds or [])}
    if seeds is None:
        fresh = tomlkit.array()  # tomlkit.array() parses a string: a list with a table in it is no TOML text
        fresh.append(entry)
        table["seeds"] = fresh
    elif seed not in pinned:
        seeds.append(entry)
    return tomlkit.dumps(doc)


def edit_op_block(text: str, index: int, edit: Callable[[str, int], str]) -> tuple[int, int, str]:
    """An edit of one op's entry made on that entry's lines alone (``edit(entry_text, 0)``), as (start line, end
    line, new text of those lines): tomlkit takes seconds over a 1,000-op file, and an editor's code action must
    answer at once. The whole file where the entry's lines cannot be found (``edit(text, index)``)."""
    lines = text.split("\n")
    blocks = op_blocks(text)
    block = blocks[index] if blocks is not None and index < len(blocks) else None
    if block is None:
        return 0, len(lines), edit(text, index)
    start, end = block
    tail = "\n" if end < len(lines) else ""
    return start, end, edit("\n".join(lines[start:end]) + tail, 0)


def set_tolerances(text: str, index: int, name: str, tolerances: dict[str, tuple[float, float]]) -> str:
    """Set ``[ops.tolerances]`` of the op: dtype -> (atol, rtol)."""
    doc = tomlkit.parse(text)
    table = _op_table(doc, index, name)
    tols = table.get("tolerances")
    if tols is None:
        # an inline key sits with the op's own keys: a new [ops.tolerances] table would be appended after
        # the op's last sub-table, where the comments that introduce the next op would end up above it
        tols = tomlkit.inline_table()
        table["tolerances"] = tols
    for dtype, (atol, rtol) in tolerances.items():
        entry = tomlkit.inline_table()
        entry["atol"] = atol
        entry["rtol"] = rtol
        tols[dtype] = entry
    return tomlkit.dumps(doc)
