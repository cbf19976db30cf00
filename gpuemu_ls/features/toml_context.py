"""Where the cursor is in a gpuemu.toml buffer: in which table, on a key or in a value of which key.

The buffer is usually being typed and so often not valid TOML (``dis`` on its own line, an open string),
which ``tomllib`` and :mod:`..engine.config.tomlpos` refuse; completion, key hover and go-to-definition
therefore read the text around the cursor themselves: the nearest table header above, then the statement
the cursor is in, character by character (strings, arrays, inline tables).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..engine.config.keydocs import schema_path

_KEY_PART = r"""(?:[A-Za-z0-9_-]+|"[^"\n]*"|'[^'\n]*')"""
_DOTTED = rf"{_KEY_PART}(?:\s*\.\s*{_KEY_PART})*"
HEADER = re.compile(rf"^\s*(\[\[?)\s*({_DOTTED})\s*(\]\]?)\s*(?:#.*)?$")
_KEYVAL = re.compile(rf"^\s*({_DOTTED})\s*=")
_WORD = re.compile(r"[A-Za-z0-9_.\-:/]*$")


def split_key(dotted: str) -> list[str]:
    """``a."b.c".d`` -> ``["a", "b.c", "d"]``."""
    return [p.strip().strip("\"'") for p in re.findall(rf"{_KEY_PART}", dotted)]


@dataclass
class Spot:
    """What is at the cursor. ``kind``: ``header`` (inside ``[...]``), ``key`` (where a key is typed),
    ``value`` (after ``=``), or ``none`` (a comment, text this reader does not follow)."""

    kind: str
    table: tuple[str, ...] = ()  # the enclosing table as written, inline tables and dotted keys included
    key: str = ""  # value: the key the value belongs to
    prefix: str = ""  # what is typed of the key, header or value item before the cursor
    start: tuple[int, int] = (0, 0)  # (line, character) where ``prefix`` starts
    in_string: bool = False  # value: inside a string (the prefix excludes the opening quote)
    array_header: bool = False  # header: ``[[``
    header_line: int | None = None  # the enclosing header's line (0-based); None at the top level
    extra: dict[str, object] = field(default_factory=dict)

    @property
    def schema(self) -> tuple[str, ...] | None:
        """The schema path of ``table`` (``("ops", "inputs", "*")``), None where the schema has no such table."""
        return schema_path(self.table)


def enclosing_header(lines: list[str], line: int) -> tuple[int | None, list[str], bool]:
    """(line of the nearest table header above ``line``, its keys, whether it is ``[[...]]``)."""
    for i in range(min(line, len(lines)) - 1, -1, -1):
        m = HEADER.match(lines[i])
        if m and len(m.group(1)) == len(m.group(3)):
            return i, split_key(m.group(2)), m.group(1) == "[["
    return None, [], False


def analyze(text: str, line: int, character: int) -> Spot:
    """The :class:`Spot` at a 0-based (line, character) of ``text``."""
    lines = text.split("\n")
    if line >= len(lines):
        return Spot("none")
    cur = lines[line][:character]
    header_line, table, _ = enclosing_header(lines, line)
    stripped = cur.lstrip()
    if stripped.startswith("[") and "=" not in cur and not _inside_value(lines, header_line, line):
        array = stripped.startswith("[[")
        body = stripped[2 if array else 1 :]
        return Spot(
            "header",
            tuple(split_key(body.rsplit(".", 1)[0])) if "." in body else (),
            prefix=body.strip(),
            start=(line, len(cur) - len(body.lstrip())),
            array_header=array,
            header_line=header_line,
        )
    return _statement(lines, line, character, header_line, tuple(table))


def _inside_value(lines: list[str], header_line: int | None, line: int) -> bool:
    """Whether ``line`` starts inside a multi-line value (an array spread over lines)."""
    spot = _statement(lines, line, 0, header_line, ())
    return spot.kind == "value"


def _statement(lines: list[str], line: int, character: int, header_line: int | None, table: tuple[str, ...]) -> Spot:
    """Scan the statements from the header to the cursor, tracking strings, arrays and inline tables."""
    stmt: list[str] = []  # the key of the statement the cursor is in
    frames: list[dict[str, object]] = []  # open '[' and '{', innermost last
    quote: str | None = None  # open string: its quote (three of them for a multi-line string)
    str_start = (0, 0)
    for ln in range((header_line + 1) if header_line is not None else 0, line + 1):
        s = lines[ln] if ln < line else lines[ln][:character]
        i = 0
        if not frames and quote is None:  # a new statement
            m = _KEYVAL.match(s)
            if m is None:
                if ln == line:
                    body = s.strip()
                    if body.startswith("#"):
                        return Spot("none", table, header_line=header_line)
                    parts = body.split(".")
                    return Spot(
                        "key",
                        table + tuple(p.strip().strip("\"'") for p in parts[:-1]),
                        prefix=parts[-1].strip(),
                        start=(ln, len(s) - len(parts[-1].lstrip())),
                        header_line=header_line,
                    )
                continue
            stmt = split_key(m.group(1))
            i = m.end()
        while i < len(s):
            ch = s[i]
            if quote is not None:
                if ch == "\\" and quote[0] == '"':
                    i += 2
                    continue
                if s.startswith(quote, i):
                    i += len(quote)
                    quote = None
                    continue
                i += 1
                continue
            top = frames[-1] if frames else None
            if ch == "#":
                if ln == line:  # the cursor is in a comment
                    return Spot("none", table, header_line=header_line)
                break
            if ch in "\"'":
                quote = ch * 3 if s.startswith(ch * 3, i) else ch
                i += len(quote)
                str_start = (ln, i)
                continue
            if ch in "[{":
                frames.append({"kind": ch, "key": [], "after_eq": ch == "[", "key_start": (ln, i + 1)})
            elif ch in "]}":
                if frames:
                    frames.pop()
            elif ch == ",":
                if top is not None and top["kind"] == "{":
                    top["after_eq"] = False
                    top["key_start"] = (ln, i + 1)
            elif ch == "=" and top is not None and top["kind"] == "{" and not top["after_eq"]:
                ks = top["key_start"]
                assert isinstance(ks, tuple)
                top["key"] = split_key(lines[ks[0]][ks[1] : i] if ks[0] == ln else s[:i])
                top["after_eq"] = True
            i += 1
        if ln < line:  # a line ended: TOML strings (but triple-quoted ones) and inline tables end with it
            if quote is not None and len(quote) == 1:
                quote = None
            while any(f["kind"] == "{" for f in frames):
                frames.pop()
    # the cursor: which key's value, or which table's key
    path = list(table) + stmt[:-1]
    key = stmt[-1] if stmt else ""
    for f in frames:
        if f["kind"] == "{":
            path.append(key)
            key = ""
            fkey = f["key"]
            assert isinstance(fkey, list)
            if f["after_eq"] and fkey:
                path += fkey[:-1]
                key = fkey[-1]
    innermost = next((f for f in reversed(frames) if f["kind"] == "{"), None)
    if quote is not None:
        prefix = lines[line][str_start[1] : character] if str_start[0] == line else ""
        return Spot("value", tuple(path), key, prefix, str_start, True, header_line=header_line)
    if innermost is not None and not innermost["after_eq"]:
        ks = innermost["key_start"]
        assert isinstance(ks, tuple)
        typed = lines[line][ks[1] : character] if ks[0] == line else lines[line][:character]
        parts = typed.strip().split(".")
        start = (line, character - len(parts[-1].lstrip()))
        extra = tuple(p.strip().strip("\"'") for p in parts[:-1])
        return Spot("key", tuple(path) + extra, prefix=parts[-1].strip(), start=start, header_line=header_line)
    if not stmt and not frames:
        return Spot("none", table, header_line=header_line)
    typed = lines[line][:character]
    word = _WORD.search(typed)
    prefix = word.group(0) if word else ""
    return Spot("value", tuple(path), key, prefix, (line, character - len(prefix)), False, header_line=header_line)


def string_at(line_text: str, character: int) -> tuple[str, int, int] | None:
    """The string literal on a line that holds ``character`` (else the first one after ``=``): its content
    and the columns of its content."""
    found = [(m.group(2), m.start(2), m.end(2)) for m in re.finditer(r"(['\"])((?:(?!\1)[^\\]|\\.)*)\1", line_text)]
    for value, a, b in found:
        if a - 1 <= character <= b + 1:
            return value, a, b
    eq = line_text.find("=")
    return next(((v, a, b) for v, a, b in found if a > eq), None)


def word_at(line_text: str, character: int) -> tuple[str, int, int] | None:
    """The key-like word (letters, digits, ``_``, ``-``) under ``character``, with its columns."""
    for m in re.finditer(r"[A-Za-z0-9_-]+", line_text):
        if m.start() <= character <= m.end():
            return m.group(0), m.start(), m.end()
    return None
