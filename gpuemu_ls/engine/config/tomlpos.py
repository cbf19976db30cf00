"""Positions of keys and values in a TOML document, which ``tomllib`` does not report.

Runs over text that ``tomllib`` has already accepted, so it only has to find things, not validate
them. Paths are tuples of keys and array indices, e.g. ``("ops", 2, "inputs", "x", "shape")``.
"""

from __future__ import annotations

import bisect
import re
import sys
import threading
from array import array
from dataclasses import dataclass

Path_ = tuple[str | int, ...]


@dataclass(frozen=True, slots=True)
class Span:
    """1-based start and end (end column exclusive) of a key or value."""

    line: int
    column: int
    end_line: int
    end_column: int


@dataclass(slots=True)
class Entry:
    key: Span
    value: Span | None = None


class PositionIndex:
    """Where each key path sits in the text; lookups fall back to the nearest enclosing path.

    Kept compact (issue 31: a 3,000-op gpuemu.toml has ~75,000 paths, and the gate keeps the index for the
    locations its document shows): each path maps to an entry number, the entries are four text offsets in
    one array, and line and column are worked out only for the spans asked for."""

    def __init__(self, text: str) -> None:
        self._text: str | None = text
        self._scanned: dict[Path_, int] = {}
        self._offsets = array("q")  # per entry: key start, key end, value start, value end (-1: no value)
        self._line_starts = array("q")
        self._ends: dict[Path_, int] | None = None
        self._lock = threading.Lock()

    @property
    def _entries(self) -> dict[Path_, int]:
        """The scan, made on the first lookup: a valid gpuemu.toml of 3,000 ops is read by a shard or a worker
        that never asks where a key is, and the scan costs more than parsing the TOML itself."""
        if self._text is not None:
            with self._lock:
                if self._text is not None:
                    try:
                        scan = _Scanner(self._text, self._scanned, self._offsets)
                        self._line_starts = scan.line_starts
                        scan.run()
                    finally:  # only now: another thread that sees no text to scan reads the whole scan
                        self._text = None
        return self._scanned

    def _pos(self, offset: int) -> tuple[int, int]:
        k = bisect.bisect_right(self._line_starts, offset) - 1
        return k + 1, offset - self._line_starts[k] + 1

    def _span(self, start: int, end: int) -> Span:
        a, b = self._pos(start), self._pos(end)
        return Span(a[0], a[1], b[0], b[1])

    def _key(self, n: int) -> Span:
        return self._span(self._offsets[4 * n], self._offsets[4 * n + 1])

    def _value(self, n: int) -> Span | None:
        start = self._offsets[4 * n + 2]
        return None if start < 0 else self._span(start, self._offsets[4 * n + 3])

    def key(self, path: Path_) -> Span | None:
        """Span of the key (or table header) of ``path``, or of its nearest ancestor that is known."""
        for n in range(len(path), 0, -1):
            found = self._entries.get(tuple(path[:n]))
            if found is not None:
                return self._key(found)
        return None

    def value(self, path: Path_) -> Span | None:
        """Span of the value of ``path``; the key's span for tables; the ancestor's if unknown."""
        for n in range(len(path), 0, -1):
            found = self._entries.get(tuple(path[:n]))
            if found is not None:
                return self._value(found) or self._key(found)
        return None

    def entry(self, path: Path_) -> Entry | None:
        found = self._entries.get(tuple(path))
        return None if found is None else Entry(self._key(found), self._value(found))

    def table_span(self, path: Path_) -> Span | None:
        """From a table's header to the last key under it (for whole-entry diagnostics)."""
        found = self._entries.get(tuple(path))
        if found is None:
            return None
        start, end = self._offsets[4 * found], self._offsets[4 * found + 1]
        return self._span(start, max(end, self._table_ends().get(tuple(path), 0)))

    def _table_ends(self) -> dict[Path_, int]:
        """For every path, where the last thing under it ends: one pass, so a 10,000-op file answers at once."""
        entries = self._entries
        if self._ends is None:
            ends: dict[Path_, int] = {}
            offs = self._offsets
            for p, n in entries.items():
                end = offs[4 * n + 3] if offs[4 * n + 2] >= 0 else offs[4 * n + 1]
                for k in range(1, len(p)):
                    prefix = p[:k]
                    if ends.get(prefix, 0) < end:
                        ends[prefix] = end
            self._ends = ends
        return self._ends

    def paths(self) -> list[Path_]:
        return list(self._entries)


_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
_WS = re.compile(r"(?:[ \t\r]|#[^\n]*)*")
_WS_NL = re.compile(r"(?:[ \t\r\n]|#[^\n]*)*")
_BASIC = re.compile(r'"(?:[^"\\\n]|\\.)*"')
_LITERAL = re.compile(r"'[^'\n]*'")
_SCALAR = re.compile(r"[^,\]\}\s#]+(?: [0-9][^,\]\}\s#]*)?")  # dates may hold one space


class _Scanner:
    """Offsets and regexes over the text; what it finds goes into ``out`` (path -> entry number) and ``offsets``
    (four an entry, see :class:`PositionIndex`)."""

    def __init__(self, text: str, out: dict[Path_, int], offsets: array[int]) -> None:
        self.s = text
        self.n = len(text)
        self.i = 0
        self.out = out
        self.offsets = offsets
        self.arrays: dict[Path_, int] = {}  # array-of-tables path (with indices) -> last index
        self.table: Path_ = ()
        self.key_end = 0
        self.line_starts = array("q", [0, *(m.end() for m in re.finditer("\n", text))])

    def record(self, path: Path_, key: tuple[int, int], value: tuple[int, int] | None, *, first: bool) -> None:
        """``path``'s key and value offsets; ``first``: only if nothing was recorded for it yet."""
        if first and path in self.out:
            return
        self.out[path] = len(self.offsets) // 4
        self.offsets.extend((*key, *(value or (-1, -1))))

    def peek(self, k: int = 0) -> str:
        j = self.i + k
        return self.s[j] if j < self.n else ""

    def skip_ws(self, newlines: bool = False) -> None:
        self.i = (_WS_NL if newlines else _WS).match(self.s, self.i).end()

    # --- grammar ---------------------------------------------------------------------------
    def run(self) -> None:
        while True:
            self.skip_ws(newlines=True)
            if self.i >= self.n:
                return
            if self.peek() == "[":
                self.header()
            else:
                self.keyval(self.table)

    def header(self) -> None:
        start = self.i
        is_array = self.peek(1) == "["
        self.i += 2 if is_array else 1
        self.skip_ws()
        keys = self.key_parts()
        self.skip_ws()
        self.i += 2 if is_array else 1
        span = (start, self.i)
        if is_array:
            path = (*self.resolve(keys[:-1]), keys[-1])
            idx = self.arrays.get(path, -1) + 1
            self.arrays[path] = idx
            self.record(path, span, None, first=True)  # the array itself sits at its first header
            path = (*path, idx)
        else:
            path = self.resolve(keys)
        self.table = path
        self.record(path, span, None, first=True)

    def resolve(self, keys: list[str]) -> Path_:
        """Insert the current index of every array of tables that a dotted header walks through."""
        path: Path_ = ()
        for k in keys:
            path = (*path, k)
            if path in self.arrays:
                path = (*path, self.arrays[path])
        return path

    def key_parts(self) -> list[str]:
        """A dotted key; ``self.key_end`` is left right after its last part (before any blank)."""
        parts = [self.simple_key()]
        self.key_end = self.i
        self.skip_ws()
        while self.peek() == ".":
            self.i += 1
            self.skip_ws()
            parts.append(self.simple_key())
            self.key_end = self.i
            self.skip_ws()
        return parts

    def simple_key(self) -> str:
        if self.peek() in "\"'" and self.peek():
            return sys.intern(self.string_value())
        m = _BARE_KEY.match(self.s, self.i)
        if m is None:
            self.i += 1  # never stall on text tomllib accepted that this scanner does not know
            return ""
        self.i = m.end()
        return sys.intern(m.group(0))  # one string per key name, however many ops repeat it

    def keyval(self, base: Path_) -> None:
        kstart = self.i
        keys = self.key_parts()
        kend = self.key_end
        path = (*base, *keys)
        self.skip_ws()
        if self.peek() == "=":
            self.i += 1
        self.skip_ws()
        vstart = self.i
        self.value(path)
        self.record(path, (kstart, kend), (vstart, self.i), first=False)

    def value(self, path: Path_) -> None:
        c = self.peek()
        if c in "\"'" and c:
            self.string_value()
        elif c == "[":
            self.array(path)
        elif c == "{":
            self.inline_table(path)
        else:
            m = _SCALAR.match(self.s, self.i)
            self.i = m.end() if m else self.i + 1

    def string_value(self) -> str:
        q = self.peek()
        if self.s.startswith(q * 3, self.i):
            start = self.i + 3
            end = self.s.find(q * 3, start)
            if q == '"':
                while end > 0 and _escaped(self.s, end):
                    end = self.s.find(q * 3, end + 1)
            end = self.n if end < 0 else end
            self.i = end + 3
            while self.peek() == q:  # up to two quotes may close a multi-line string
                self.i += 1
            return self.s[start:end]
        m = (_BASIC if q == '"' else _LITERAL).match(self.s, self.i)
        if m is None:
            self.i += 1
            return ""
        self.i = m.end()
        return m.group(0)[1:-1]

    def array(self, path: Path_) -> None:
        self.i += 1
        idx = 0
        while True:
            self.skip_ws(newlines=True)
            if self.peek() in ("]", ""):
                self.i += 1
                return
            vstart = self.i
            self.value((*path, idx))
            self.record((*path, idx), (vstart, self.i), (vstart, self.i), first=True)
            idx += 1
            self.skip_ws(newlines=True)
            if self.peek() == ",":
                self.i += 1

    def inline_table(self, path: Path_) -> None:
        self.i += 1
        while True:
            self.skip_ws(newlines=True)
            if self.peek() in ("}", ""):
                self.i += 1
                return
            self.keyval(path)
            self.skip_ws(newlines=True)
            if self.peek() == ",":
                self.i += 1


def _escaped(s: str, at: int) -> bool:
    """Whether the quote at ``at`` is escaped (an odd number of backslashes before it)."""
    n = 0
    j = at - 1
    while j >= 0 and s[j] == "\\":
        n += 1
        j -= 1
    return n % 2 == 1
