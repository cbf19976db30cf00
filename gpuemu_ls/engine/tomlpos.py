"""Positions of keys and values in a TOML document, which ``tomllib`` does not report.

Runs over text that ``tomllib`` has already accepted, so it only has to find things, not validate
them. Paths are tuples of keys and array indices, e.g. ``("ops", 2, "inputs", "x", "shape")``.
"""

from __future__ import annotations

from dataclasses import dataclass

Path_ = tuple[str | int, ...]


@dataclass(frozen=True)
class Span:
    """1-based start and end (end column exclusive) of a key or value."""

    line: int
    column: int
    end_line: int
    end_column: int


@dataclass
class Entry:
    key: Span
    value: Span | None = None


class PositionIndex:
    """Where each key path sits in the text; lookups fall back to the nearest enclosing path."""

    def __init__(self, text: str) -> None:
        self._entries: dict[Path_, Entry] = {}
        _Scanner(text, self._entries).run()

    def key(self, path: Path_) -> Span | None:
        """Span of the key (or table header) of ``path``, or of its nearest ancestor that is known."""
        for n in range(len(path), 0, -1):
            entry = self._entries.get(tuple(path[:n]))
            if entry is not None:
                return entry.key
        return None

    def value(self, path: Path_) -> Span | None:
        """Span of the value of ``path``; the key's span for tables; the ancestor's if unknown."""
        for n in range(len(path), 0, -1):
            entry = self._entries.get(tuple(path[:n]))
            if entry is not None:
                return entry.value or entry.key
        return None

    def entry(self, path: Path_) -> Entry | None:
        return self._entries.get(tuple(path))

    def table_span(self, path: Path_) -> Span | None:
        """From a table's header to the last key under it (for whole-entry diagnostics)."""
        head = self._entries.get(tuple(path))
        if head is None:
            return None
        end_line, end_col = head.key.end_line, head.key.end_column
        n = len(path)
        for p, e in self._entries.items():
            if len(p) > n and p[:n] == tuple(path):
                span = e.value or e.key
                if (span.end_line, span.end_column) > (end_line, end_col):
                    end_line, end_col = span.end_line, span.end_column
        return Span(head.key.line, head.key.column, end_line, end_col)

    def paths(self) -> list[Path_]:
        return list(self._entries)


_BARE = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")


class _Scanner:
    def __init__(self, text: str, out: dict[Path_, Entry]) -> None:
        self.s = text
        self.i = 0
        self.line = 1
        self.col = 1
        self.out = out
        self.arrays: dict[Path_, int] = {}  # array-of-tables path (with indices) -> last index
        self.table: Path_ = ()
        self.key_end = (1, 1)

    # --- low level -------------------------------------------------------------------------
    def peek(self, k: int = 0) -> str:
        j = self.i + k
        return self.s[j] if j < len(self.s) else ""

    def advance(self, n: int = 1) -> None:
        for _ in range(n):
            if self.i >= len(self.s):
                return
            if self.s[self.i] == "\n":
                self.line += 1
                self.col = 1
            else:
                self.col += 1
            self.i += 1

    def skip_ws(self, newlines: bool = False) -> None:
        while self.i < len(self.s):
            c = self.s[self.i]
            if c in " \t\r" or (newlines and c == "\n"):
                self.advance()
            elif c == "#":
                while self.i < len(self.s) and self.s[self.i] != "\n":
                    self.advance()
            else:
                return

    def pos(self) -> tuple[int, int]:
        return self.line, self.col

    # --- grammar ---------------------------------------------------------------------------
    def run(self) -> None:
        while True:
            self.skip_ws(newlines=True)
            if self.i >= len(self.s):
                return
            if self.peek() == "[":
                self.header()
            else:
                self.keyval(self.table)

    def header(self) -> None:
        start = self.pos()
        is_array = self.peek(1) == "["
        self.advance(2 if is_array else 1)
        self.skip_ws()
        keys = self.key_parts()
        self.skip_ws()
        self.advance(2 if is_array else 1)
        span = Span(start[0], start[1], self.line, self.col)
        if is_array:
            path = (*self.resolve(keys[:-1]), keys[-1])
            idx = self.arrays.get(path, -1) + 1
            self.arrays[path] = idx
            self.out.setdefault(path, Entry(span))  # the array itself sits at its first header
            path = (*path, idx)
        else:
            path = self.resolve(keys)
        self.table = path
        self.out.setdefault(path, Entry(span))

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
        self.key_end = self.pos()
        self.skip_ws()
        while self.peek() == ".":
            self.advance()
            self.skip_ws()
            parts.append(self.simple_key())
            self.key_end = self.pos()
            self.skip_ws()
        return parts

    def simple_key(self) -> str:
        c = self.peek()
        if c in "\"'":
            return self.string_value()
        start = self.i
        while self.peek() and self.peek() in _BARE:
            self.advance()
        return self.s[start : self.i]

    def keyval(self, base: Path_) -> None:
        kstart = self.pos()
        keys = self.key_parts()
        kend = self.key_end
        path = (*base, *keys)
        self.skip_ws()
        if self.peek() == "=":
            self.advance()
        self.skip_ws()
        vstart = self.pos()
        self.value(path)
        vend = self.pos()
        self.out[path] = Entry(
            Span(kstart[0], kstart[1], kend[0], kend[1]), Span(vstart[0], vstart[1], vend[0], vend[1])
        )

    def value(self, path: Path_) -> None:
        c = self.peek()
        if c in "\"'":
            self.string_value()
        elif c == "[":
            self.array(path)
        elif c == "{":
            self.inline_table(path)
        else:
            while self.peek() and self.peek() not in ",]}\n#" and not (self.peek() in " \t" and self._scalar_ends()):
                self.advance()

    def _scalar_ends(self) -> bool:
        # dates may contain one space ("1979-05-27 07:32:00"); anything else ends the scalar
        j = self.i + 1
        return not (j < len(self.s) and self.s[j].isdigit() and self.s[self.i - 1].isdigit())

    def string_value(self) -> str:
        q = self.peek()
        if self.s.startswith(q * 3, self.i):
            self.advance(3)
            start = self.i
            while self.i < len(self.s) and not self.s.startswith(q * 3, self.i):
                if q == '"' and self.peek() == "\\":
                    self.advance()
                self.advance()
            text = self.s[start : self.i]
            self.advance(3)
            while self.peek() == q:  # up to two quotes may close a multi-line string
                self.advance()
            return text
        self.advance()
        start = self.i
        while self.i < len(self.s) and self.peek() != q and self.peek() != "\n":
            if q == '"' and self.peek() == "\\":
                self.advance()
            self.advance()
        text = self.s[start : self.i]
        self.advance()
        return text

    def array(self, path: Path_) -> None:
        self.advance()
        idx = 0
        while True:
            self.skip_ws(newlines=True)
            if self.peek() in ("]", ""):
                self.advance()
                return
            vstart = self.pos()
            self.value((*path, idx))
            span = Span(vstart[0], vstart[1], self.line, self.col)
            self.out.setdefault((*path, idx), Entry(span, span))
            idx += 1
            self.skip_ws(newlines=True)
            if self.peek() == ",":
                self.advance()

    def inline_table(self, path: Path_) -> None:
        self.advance()
        while True:
            self.skip_ws(newlines=True)
            if self.peek() in ("}", ""):
                self.advance()
                return
            self.keyval(path)
            self.skip_ws(newlines=True)
            if self.peek() == ",":
                self.advance()
