"""Read SASS from `cuobjdump -sass` or `nvdisasm`: instructions per function.

Never-executed code is left out so that counts reflect the program: instructions
guarded by `@!PT` (predicate "never") and the padding the assembler appends after a
function's last exit, a `BRA` to itself followed by `NOP`s up to the alignment
boundary. NOPs and branches anywhere else are real and counted.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from .instructions import Instruction, histogram

# cuobjdump: "\t\tFunction : _Z3fooPf"; nvdisasm: ".section\t.text._Z3fooPf,\"ax\",@progbits"
_CUOBJDUMP_FUNC_RE = re.compile(r"^\s*Function\s*:\s*(\S+)\s*$")
_NVDISASM_FUNC_RE = re.compile(r"^\s*\.section\s+\.text\.([^,\s]+)\s*,")
_INSN_RE = re.compile(r"^\s*/\*([0-9a-fA-F]+)\*/\s+([^;]*?)\s*;")
_LABEL_RE = re.compile(r"^\s*(\.L[\w.$]*):\s*$")
_GUARD_RE = re.compile(r"^@!?U?P(?:T|\d+)\s+")


@dataclass
class SassFunction:
    """One function of a cubin: its name (the ELF symbol) and the instructions that can execute."""

    name: str
    instructions: list[Instruction] = field(default_factory=list)
    addresses: list[int] = field(default_factory=list)
    dropped: int = 0  # instructions left out as never executed

    @property
    def counts(self) -> dict[str, int]:
        return histogram(self.instructions)


def _is_self_branch(ins: Instruction, addr: int, labels: dict[str, int]) -> bool:
    if ins.guard not in ("", "@PT") or ins.mnemonic != "BRA":
        return False
    target = ins.text.split(" ", 1)[1].strip() if " " in ins.text else ""
    target = target.strip("`()")
    if target in labels:
        return labels[target] == addr
    try:
        return int(target, 16) == addr
    except ValueError:
        return False


def _drop_tail_padding(fn: SassFunction, labels: dict[str, int]) -> None:
    """Remove trailing NOPs and the self-loop BRA that follows the last EXIT/RET/BRA."""
    ins, addrs = fn.instructions, fn.addresses
    end = len(ins)
    while end > 0 and ins[end - 1].mnemonic == "NOP" and not ins[end - 1].guard:
        end -= 1
    if end >= 2 and _is_self_branch(ins[end - 1], addrs[end - 1], labels):
        prev = ins[end - 2]
        if prev.guard in ("", "@PT") and prev.mnemonic.split(".")[0] in ("EXIT", "RET", "BRA"):
            end -= 1
    fn.dropped += len(ins) - end
    del ins[end:]
    del addrs[end:]


def parse_sass(text: str) -> dict[str, SassFunction]:
    """Functions of a `cuobjdump -sass` or `nvdisasm` listing, keyed by symbol, in listing order."""
    functions: dict[str, SassFunction] = {}
    labels: dict[str, dict[str, int]] = {}
    current: SassFunction | None = None
    pending_labels: list[str] = []
    for line in text.splitlines():
        if m := (_CUOBJDUMP_FUNC_RE.match(line) or _NVDISASM_FUNC_RE.match(line)):
            current = functions.setdefault(m.group(1), SassFunction(m.group(1)))
            labels.setdefault(current.name, {})
            pending_labels = []
            continue
        if current is None:
            continue
        if m := _LABEL_RE.match(line):
            pending_labels.append(m.group(1))
            continue
        m = _INSN_RE.match(line)
        if not m:
            continue
        addr = int(m.group(1), 16)
        for label in pending_labels:
            labels[current.name][label] = addr
        pending_labels = []
        body = m.group(2).strip()
        guard = ""
        if g := _GUARD_RE.match(body):
            guard = g.group(0).strip()
            body = body[g.end() :]
        if guard == "@!PT":  # predicate "never": cannot execute
            current.dropped += 1
            continue
        text_ = " ".join(body.split())
        current.instructions.append(Instruction(text_.split(" ", 1)[0], text_, guard))
        current.addresses.append(addr)
    for fn in functions.values():
        _drop_tail_padding(fn, labels.get(fn.name, {}))
    return functions
