"""Where each ``[[ops]]`` entry lies in gpuemu.toml's text, by lines, without parsing it.

A 1,000-op file takes tomlkit seconds and the checker half a second; an editor's edit touches one entry. These
lines let an edit be made on that entry alone, and a changed entry be checked on its own first.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterable, Iterator

from ..errors import Problem


def op_blocks(text: str) -> list[tuple[int, int]] | None:
    """Lines ``[start, end)`` of every ``[[ops]]`` entry: its header up to the next table that is not one of its
    sub-tables (``[ops.inputs.x]``); None where a multi-line string is left open (lines cannot tell then).
    The last text's answer is kept: an editor asks code actions at each move of the cursor."""
    global _last
    if _last is not None and (_last[0] is text or _last[0] == text):
        return _last[1]
    found = _by_headers(text) if '"""' not in text and "'''" not in text else _by_lines(text)
    _last = (text, found)
    return found


_last: tuple[str, list[tuple[int, int]] | None] | None = None
#: A table header line (group 1: the second ``[`` of an array entry; group 2: its name); one pattern for a
#: whole text (``finditer``) and for one line (``match``).
_HEADERS = re.compile(r"^[ \t]*\[(\[)?[ \t]*([^\[\]\n]*?)[ \t]*\]", re.MULTILINE)


def _by_headers(text: str) -> list[tuple[int, int]]:
    """:func:`op_blocks` of a text without multi-line strings: only its header lines are looked at (a line loop
    over a 1,000-op file took 15-30 ms)."""

    def headers() -> Iterator[tuple[int, re.Match[str]]]:
        line, at = 0, 0
        for m in _HEADERS.finditer(text):
            line += text.count("\n", at, m.start())
            at = m.start()
            yield line, m

    return _entries(headers(), text.count("\n") + 1)


def _by_lines(text: str) -> list[tuple[int, int]] | None:
    lines = text.split("\n")
    open_string: list[str | None] = [None]

    def headers() -> Iterator[tuple[int, re.Match[str]]]:
        for i, line in enumerate(lines):
            m = _HEADERS.match(line) if open_string[0] is None else None
            if m is not None:
                yield i, m
            for quote in ('"""', "'''"):  # a header-like line inside a multi-line string is not a header
                if line.count(quote) % 2 and open_string[0] in (None, quote):
                    open_string[0] = None if open_string[0] == quote else quote

    blocks = _entries(headers(), len(lines))
    return None if open_string[0] is not None else blocks


def _entries(headers: Iterable[tuple[int, re.Match[str]]], total: int) -> list[tuple[int, int]]:
    """The ``[[ops]]`` entries, from the table headers in order (line, match of ``_HEADERS``)."""
    blocks: list[tuple[int, int]] = []
    start: int | None = None
    for line, m in headers:
        name = m.group(2).replace(" ", "")
        if start is not None and ((name == "ops" and m.group(1)) or not name.startswith("ops.")):
            blocks.append((start, line))
            start = None
        if m.group(1) and name == "ops":
            start = line
    if start is not None:
        blocks.append((start, total))
    return blocks


def changed_lines(old: str, new: str) -> tuple[int, int]:
    """Lines ``[first, end)`` of ``new`` that differ from ``old`` (the common head and tail left out), a line
    more on each side: compared by characters, a removed line may show as a change of its neighbour."""
    same = _common(old, new, lambda a, b, k: a.startswith(b[:k]))
    first = new.count("\n", 0, same)
    room = min(len(old), len(new)) - same  # the tail may not reach into the common head
    tail = _common(old, new, lambda a, b, k: a.endswith(b[len(b) - k :]), room)
    end = new.count("\n", 0, len(new) - tail) + 1
    return max(0, first - 1), max(first + 1, end) + 1


def _common(a: str, b: str, equal: Callable[[str, str, int], bool], most: int | None = None) -> int:
    """The longest k (up to ``most``) for which ``equal(a, b, k)``: found by halving, each test a memory compare."""
    lo, hi = 0, min(len(a), len(b)) if most is None else most
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if equal(a, b, mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


@dataclasses.dataclass(frozen=True)
class Part:
    """Some of gpuemu.toml: its text, which ``[[ops]]`` entries of the file it holds, the file's line of each of
    its lines (0-based)."""

    text: str
    entries: list[int]
    lines: list[int]


def around(text: str, first: int, end: int) -> Part | None:
    """``text`` without the ``[[ops]]`` entries that do not touch lines ``[first, end)`` (the first entry always
    stays): a check of it takes milliseconds where the whole file takes half a second. None where the entries
    cannot be told apart, or nothing would be left out."""
    blocks = op_blocks(text)
    if not blocks:
        return None
    lines = text.split("\n")
    keep = [True] * len(lines)
    entries: list[int] = []
    for n, (start, stop) in enumerate(blocks):
        if n == 0 or (start < end and first < stop):
            entries.append(n)
        else:
            keep[start:stop] = [False] * (stop - start)
    if len(entries) == len(blocks):
        return None
    where = [i for i, k in enumerate(keep) if k]
    return Part("\n".join(lines[i] for i in where), entries, where)


_OPS_INDEX = re.compile(r"\bops\[(\d+)\]")


def renumbered(problem: Problem, part: Part) -> Problem:
    """A problem found in :func:`around`'s part, placed and named as in the whole file: its lines, and its entry
    (``ops[30]``, where the part's own numbering said ``ops[1]``)."""

    def fix(text: str | None) -> str | None:
        if text is None:
            return None
        n = len(part.entries)
        return _OPS_INDEX.sub(lambda m: f"ops[{part.entries[int(m[1])]}]" if int(m[1]) < n else m[0], text)

    def line(at: int | None) -> int | None:
        return part.lines[at - 1] + 1 if at is not None and 0 < at <= len(part.lines) else at

    return dataclasses.replace(
        problem,
        message=fix(problem.message) or "",
        hint=fix(problem.hint),
        line=line(problem.line),
        end_line=line(problem.end_line),
    )
