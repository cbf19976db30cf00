"""Read PTX text: the instructions of each `.entry`, by statement (not by line).

PTX statements end with `;` and may span lines (`call.uni (retval0), vprintf, (...);`),
so bodies are split on `;` after comments are removed. Directives (`.reg`, `.local`,
`.param`, `.pragma`, `.loc`), labels and `{ }` call-sequence scopes are not instructions.
Callee `.func` bodies are not folded into an entry's counts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from .instructions import Instruction, histogram
from .names import matching_bracket

_COMMENT_OR_STRING_RE = re.compile(r'"(?:[^"\\\n]|\\.)*"|//[^\n]*|/\*.*?\*/', re.S)
_ENTRY_RE = re.compile(r"\.entry\s+([A-Za-z_$%][\w$%]*)")
_LOC_LINE_RE = re.compile(r"^[ \t]*\.(?:loc|file)\b[^\n]*", re.M)
_LABEL_RE = re.compile(r"^[A-Za-z_$%.][\w$%.]*:\s*")
_GUARD_RE = re.compile(r"^@!?%?[\w]+\s+")
_TARGET_RE = re.compile(r"^\s*\.target\s+([\w,\s]+?)\s*$", re.M)


def strip_comments(text: str) -> str:
    """Blank out comments (keeping newlines, so offsets still map to lines); strings kept."""

    def blank(m: re.Match[str]) -> str:
        s = m.group(0)
        if s.startswith('"'):
            return s
        return re.sub(r"[^\n]", " ", s)

    return _COMMENT_OR_STRING_RE.sub(blank, text)


@dataclass
class PtxEntry:
    """One `.entry`: its name, where it starts in the .ptx file, and its instructions."""

    name: str
    line: int  # 1-based line of the `.entry` directive
    instructions: list[Instruction] = field(default_factory=list)

    @property
    def counts(self) -> dict[str, int]:
        return histogram(self.instructions)


def parse_statements(body: str) -> list[Instruction]:
    """Instructions of a (comment-free) function body."""
    body = _LOC_LINE_RE.sub("", body)
    out: list[Instruction] = []
    for segment in body.split(";"):
        stmt = segment.strip()
        while stmt:
            if stmt[0] in "{}":
                stmt = stmt[1:].lstrip()
                continue
            m = _LABEL_RE.match(stmt)
            if m and not stmt.startswith("@"):
                stmt = stmt[m.end() :]
                continue
            break
        if not stmt or stmt.startswith("."):
            continue
        guard = ""
        if m := _GUARD_RE.match(stmt):
            guard = m.group(0).strip()
            stmt = stmt[m.end() :]
        text = " ".join(stmt.split())
        mnemonic = text.split(" ", 1)[0]
        out.append(Instruction(mnemonic=mnemonic, text=text, guard=guard))
    return out


def parse_ptx(text: str) -> list[PtxEntry]:
    """Every `.entry` of a PTX module with its instructions, in file order."""
    clean = strip_comments(text)
    entries: list[PtxEntry] = []
    for m in _ENTRY_RE.finditer(clean):
        # The body is the first '{' after the parameter list (which holds no braces).
        pos = m.end()
        paren = clean.find("(", pos)
        brace = clean.find("{", pos)
        if brace < 0:
            continue
        if 0 <= paren < brace:
            close = clean.find(")", paren)
            brace = clean.find("{", close) if close >= 0 else brace
        end = matching_bracket(clean, brace)
        end = len(clean) if end is None else end
        line = clean.count("\n", 0, m.start()) + 1
        entries.append(PtxEntry(m.group(1), line, parse_statements(clean[brace + 1 : end])))
    return entries


def ptx_targets(text: str) -> list[str]:
    """The `.target` of a PTX module, e.g. ['sm_90'] (for assembling a .ptx given directly)."""
    m = _TARGET_RE.search(strip_comments(text))
    return [t.strip() for t in m.group(1).split(",")] if m else []
