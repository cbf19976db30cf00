"""One disassembled instruction, shared by the PTX and SASS readers and the pattern matcher."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Instruction:
    """`mnemonic` keeps every modifier ('LDG.E.CONSTANT', 'ld.global.nc.f32'); `text` adds operands."""

    mnemonic: str
    text: str  # mnemonic + operands, whitespace collapsed, no guard, no ';'
    guard: str = ""  # predicate guard as written: '@P0', '@!%p1', ''


def histogram(instructions: Iterable[Instruction]) -> dict[str, int]:
    """Instruction counts by full mnemonic, most frequent first (stable for equal counts)."""
    counts = Counter(i.mnemonic for i in instructions)
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
