"""Where each ``[[ops]]`` entry lies in gpuemu.toml's text, by lines, without parsing it.

A 1,000-op file takes tomlkit seconds and the checker half a second; an editor's edit touches one entry. These
lines let an edit be made on that entry alone, and a changed entry be checked on its own first.
"""

from __future__ import annotations

import dataclasses
import re

from ..errors import Problem

_HEADER = re.compile(r"^[ \t]*\[(\[)?[ \t]*([^\[\]]*?)[ \t]*\]")


def op_blocks(text: str) -> list[tuple[int, int]] | None:
    """Lines ``[start, end)`` of every ``[[ops]]`` entry: its header up to the next table that is not one of its
    sub-tables (``[ops.inputs.x]``); None where a multi-line string is left open (lines cannot tell then)."""
    lines = text.split("\n")
    blocks: list[tuple[int, int]] = []
    start: int | None = None
    in_string: str | None = None
    for i, line in enumerate(lines):
        if in_string is None:
            m = _HEADER.match(line)
            if m is not None:
                name = m.group(2).replace(" ", "")
                if start is not None and ((name == "ops" and m.group(1)) or not name.startswith("ops.")):
                    blocks.append((start, i))
                    start = None
                if m.group(1) and name == "ops":
                    start = i
        for quote in ('"""', "'''"):  # a header-like line inside a multi-line string is not a header
            if line.count(quote) % 2 and in_string in (None, quote):
                in_string = None if in_string == quote else quote
    if in_string is not None:
        return None
    if start is not None:
        blocks.append((start, len(lines)))
    return blocks


def changed_lines(old: str, new: str) -> tuple[int, int]:
    """Lines ``[first, end)`` of ``new`` that differ from ``old`` (the common head and tail left out)."""
    a, b = old.split("\n"), new.split("\n")
    head = 0
    while head < min(len(a), len(b)) and a[head] == b[head]:
        head += 1
    tail = 0
    while tail < min(len(a), len(b)) - head and a[-1 - tail] == b[-1 - tail]:
        tail += 1
    return head, max(head + 1, len(b) - tail)


def around(text: str, first: int, end: int) -> tuple[str, list[int]] | None:
    """``text`` with every ``[[ops]]`` entry but those touching lines ``[first, end)`` (and the first entry)
    blanked, lines kept, so what a check of it finds lies at its place in ``text``; with the index in ``text``
    of each entry left (see :func:`renumbered`). None where the entries cannot be told apart, or nothing would
    be left out."""
    blocks = op_blocks(text)
    if not blocks:
        return None
    lines = text.split("\n")
    kept: list[int] = []
    for n, (start, stop) in enumerate(blocks):
        if n == 0 or (start < end and first < stop):
            kept.append(n)
            continue
        lines[start:stop] = [""] * (stop - start)
    return ("\n".join(lines), kept) if len(kept) < len(blocks) else None


_OPS_INDEX = re.compile(r"\bops\[(\d+)\]")


def renumbered(problem: Problem, kept: list[int]) -> Problem:
    """A problem found in :func:`around`'s text, naming its entry as the whole file numbers it (``ops[30]``,
    where the part's own numbering said ``ops[1]``)."""

    def fix(text: str | None) -> str | None:
        if text is None:
            return None
        return _OPS_INDEX.sub(lambda m: f"ops[{kept[int(m.group(1))]}]" if int(m.group(1)) < len(kept) else m[0], text)

    return dataclasses.replace(problem, message=fix(problem.message) or "", hint=fix(problem.hint))
