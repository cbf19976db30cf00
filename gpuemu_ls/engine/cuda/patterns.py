"""Instruction patterns for `forbidden_instructions` / `required_instructions`.

Syntax:

* ``LDG.E`` — a mnemonic prefix on whole dot-separated components: it matches
  ``LDG.E`` and ``LDG.E.CONSTANT`` but not ``LDG.EX``; ``LDL`` matches ``LDL`` and
  ``LDL.LU``; ``ld.volatile`` matches ``ld.volatile.global.u32``. Compared
  case-insensitively; guards (``@P0``) are not part of the mnemonic.
* ``re:<regex>`` — a Python regex searched (``re.search``) in the whole instruction
  text: mnemonic with modifiers, a space, then the operands with whitespace
  collapsed, no predicate guard and no trailing ``;`` (e.g.
  ``call.uni (retval0), vprintf, ( param0, param1 )`` or ``LDG.E R2, desc[UR4][R2.64]``).
  Anchor with ``^``/``$`` as needed; case-sensitive unless the regex says ``(?i)``.
* A ``ptx:`` or ``sass:`` prefix selects the artifact (``sass:re:\\.SYS\\b``). Without
  it, a pattern containing an uppercase letter means SASS and an all-lowercase one
  means PTX (for regexes, letters right after a backslash, as in ``\\S`` or ``\\d``,
  do not count). A pattern with no letter at all needs a prefix.

SASS instructions guarded by ``@!PT`` and the padding after a function's final exit
never execute and are never matched (see sass.py).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from .instructions import Instruction

Artifact = Literal["ptx", "sass"]


class PatternError(ValueError):
    """A pattern that cannot be used (bad regex, ambiguous artifact)."""


@dataclass(frozen=True)
class InstructionPattern:
    """A parsed pattern: which artifact it looks at and how it matches."""

    raw: str
    artifact: Artifact
    regex: re.Pattern[str] | None = None  # set for `re:` patterns
    components: tuple[str, ...] = ()  # upper-cased dot components for prefix patterns

    @property
    def needs_text(self) -> bool:
        """Regex patterns need instruction texts; prefix patterns only need the histogram."""
        return self.regex is not None

    def matches_mnemonic(self, mnemonic: str) -> bool:
        parts = mnemonic.upper().split(".")
        return tuple(parts[: len(self.components)]) == self.components

    def matches(self, ins: Instruction) -> bool:
        if self.regex is not None:
            return self.regex.search(ins.text) is not None
        return self.matches_mnemonic(ins.mnemonic)

    def count_in_histogram(self, counts: Mapping[str, int]) -> dict[str, int]:
        """Matching mnemonics with their counts (prefix patterns only)."""
        return {m: n for m, n in counts.items() if self.matches_mnemonic(m)}

    def find(self, instructions: Iterable[Instruction]) -> list[Instruction]:
        return [i for i in instructions if self.matches(i)]


def _letters_outside_escapes(text: str) -> str:
    return "".join(c for c in re.sub(r"\\.", "", text) if c.isalpha())


def parse_pattern(raw: str) -> InstructionPattern:
    """Parse one pattern string (see the module docstring); raises PatternError."""
    body = raw.strip()
    artifact: Artifact | None = None
    lowered = body.lower()
    for prefix in ("ptx:", "sass:"):
        if lowered.startswith(prefix):
            artifact = "ptx" if prefix == "ptx:" else "sass"
            body = body[len(prefix) :]
            break
    is_regex = body.startswith("re:")
    expr = body[3:] if is_regex else body.strip()
    if not expr:
        raise PatternError(f"empty instruction pattern `{raw}`")
    if artifact is None:
        letters = _letters_outside_escapes(expr) if is_regex else "".join(filter(str.isalpha, expr))
        if not letters:
            raise PatternError(f"pattern `{raw}` has no letter to tell PTX from SASS: prefix it with 'ptx:' or 'sass:'")
        artifact = "sass" if any(c.isupper() for c in letters) else "ptx"
    if is_regex:
        try:
            return InstructionPattern(raw, artifact, regex=re.compile(expr))
        except re.error as exc:
            raise PatternError(f"invalid regex in pattern `{raw}`: {exc}") from exc
    if any(c.isspace() for c in expr) or not re.fullmatch(r"[\w.$]+", expr):
        raise PatternError(f"pattern `{raw}` is not a mnemonic (letters, digits, '_' and '.'); use 're:' for a regex")
    return InstructionPattern(raw, artifact, components=tuple(expr.upper().strip(".").split(".")))
