"""Per-kernel resource figures from `ptxas -v` (and `cuobjdump -res-usage`).

ptxas reports each entry function separately::

    ptxas info    : Compiling entry function '_Z3fooPf' for 'sm_90'
    ptxas info    : Function properties for _Z3fooPf
        8 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
    ptxas info    : Used 24 registers, used 1 barriers, 2048 bytes smem, 8 bytes cumulative stack size

Figures are kept per function, never summed over the file. Since CUDA 13, ptxas
no longer prints `cmem[N]` (or `lmem`) for sm_90, so those are taken from
`cuobjdump -res-usage` when it ran (`CONSTANT[0]:536`, `LOCAL:0`). Shared memory
stays the ptxas figure: cuobjdump's `SHARED` adds the 1 KiB the driver reserves per
block on sm_80+, which the kernel author does not control.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

_ENTRY_RE = re.compile(r"Compiling entry function '([^']+)'")
_PROPS_RE = re.compile(r"Function properties for (\S+)")
_FRAME_RE = re.compile(r"(\d+) bytes stack frame,\s*(\d+) bytes spill stores,\s*(\d+) bytes spill loads")
_USED_RE = re.compile(r"ptxas info\s*:\s*Used (\d+) registers(.*)$")
_GMEM_RE = re.compile(r"ptxas info\s*:\s*(\d+) bytes gmem(.*)$")
_CMEM_RE = re.compile(r"(\d+) bytes cmem\[(\d+)\]")
_RES_FUNC_RE = re.compile(r"^\s*Function (\S+?):\s*$")
_RES_FIELD_RE = re.compile(r"([A-Z]+)(?:\[(\d+)\])?:(\d+)")


@dataclass
class KernelResources:
    """Resource figures of one compiled function, as the tools report them."""

    registers: int | None = None
    spill_stores: int = 0  # bytes
    spill_loads: int = 0  # bytes
    stack_frame_bytes: int = 0
    cumulative_stack_bytes: int | None = None  # frame + deepest callee chain, when reported
    local_memory_bytes: int = 0  # lmem (ptxas, older toolkits) or LOCAL (cuobjdump)
    shared_memory_bytes: int = 0  # static __shared__ per block
    constant_memory_bytes: dict[int, int] = field(default_factory=dict)  # bank -> bytes
    barriers: int | None = None

    @property
    def spill_bytes(self) -> int:
        """Spill stores + spill loads, the figure `max_spills` limits."""
        return self.spill_stores + self.spill_loads

    @property
    def local_total_bytes(self) -> int:
        """Per-thread local memory: stack (cumulative when known) plus lmem."""
        stack = max(self.stack_frame_bytes, self.cumulative_stack_bytes or 0)
        return stack + self.local_memory_bytes

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["constant_memory_bytes"] = {str(k): v for k, v in self.constant_memory_bytes.items()}
        d["spill_bytes"] = self.spill_bytes
        d["local_total_bytes"] = self.local_total_bytes
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> KernelResources:
        return cls(
            registers=d.get("registers"),
            spill_stores=int(d.get("spill_stores", 0)),
            spill_loads=int(d.get("spill_loads", 0)),
            stack_frame_bytes=int(d.get("stack_frame_bytes", 0)),
            cumulative_stack_bytes=d.get("cumulative_stack_bytes"),
            local_memory_bytes=int(d.get("local_memory_bytes", 0)),
            shared_memory_bytes=int(d.get("shared_memory_bytes", 0)),
            constant_memory_bytes={int(k): int(v) for k, v in (d.get("constant_memory_bytes") or {}).items()},
            barriers=d.get("barriers"),
        )


@dataclass
class ModuleResources:
    """File-level figures ptxas reports once per compilation unit."""

    global_memory_bytes: int = 0
    constant_memory_bytes: dict[int, int] = field(default_factory=dict)


@dataclass
class PtxasReport:
    """Everything parsed from one `ptxas -v` run."""

    entries: list[str] = field(default_factory=list)  # entry functions, in report order
    functions: dict[str, KernelResources] = field(default_factory=dict)  # entries and callees
    module: ModuleResources = field(default_factory=ModuleResources)

    def kernel(self, symbol: str) -> KernelResources | None:
        return self.functions.get(symbol)


def _apply_used_line(res: KernelResources, registers: str, rest: str) -> None:
    res.registers = int(registers)
    for part in rest.split(","):
        part = part.strip()
        if m := re.fullmatch(r"used (\d+) barriers", part):
            res.barriers = int(m.group(1))
        elif m := re.fullmatch(r"(\d+) bytes smem", part):
            res.shared_memory_bytes = int(m.group(1))
        elif m := re.fullmatch(r"(\d+) bytes lmem", part):
            res.local_memory_bytes = int(m.group(1))
        elif m := re.fullmatch(r"(\d+) bytes cumulative stack size", part):
            res.cumulative_stack_bytes = int(m.group(1))
        elif m := _CMEM_RE.fullmatch(part):
            res.constant_memory_bytes[int(m.group(2))] = int(m.group(1))


def parse_ptxas_verbose(text: str) -> PtxasReport:
    """Parse the `ptxas info` lines of `ptxas -v` (as nvcc relays them) into per-function figures."""
    report = PtxasReport()
    current: str | None = None
    for line in text.splitlines():
        if m := _ENTRY_RE.search(line):
            current = m.group(1)
            if current not in report.entries:
                report.entries.append(current)
            report.functions.setdefault(current, KernelResources())
        elif m := _PROPS_RE.search(line):
            current = m.group(1)
            report.functions.setdefault(current, KernelResources())
        elif (m := _FRAME_RE.search(line)) and current is not None:
            res = report.functions[current]
            res.stack_frame_bytes = int(m.group(1))
            res.spill_stores = int(m.group(2))
            res.spill_loads = int(m.group(3))
        elif (m := _USED_RE.search(line)) and current is not None:
            _apply_used_line(report.functions[current], m.group(1), m.group(2))
        elif m := _GMEM_RE.search(line):
            report.module.global_memory_bytes = int(m.group(1))
            for c in _CMEM_RE.finditer(m.group(2)):
                report.module.constant_memory_bytes[int(c.group(2))] = int(c.group(1))
    return report


def parse_res_usage(text: str) -> dict[str, dict[str, int]]:
    """`cuobjdump -res-usage` -> {function: {"REG": .., "STACK": .., "CONSTANT[0]": ..}}."""
    out: dict[str, dict[str, int]] = {}
    current: str | None = None
    for line in text.splitlines():
        if m := _RES_FUNC_RE.match(line):
            current = m.group(1)
            out[current] = {}
            continue
        if current is None or ("REG:" not in line and "CONSTANT" not in line):
            continue
        for f in _RES_FIELD_RE.finditer(line):
            key = f.group(1) if f.group(2) is None else f"{f.group(1)}[{f.group(2)}]"
            out[current][key] = int(f.group(3))
        current = None
    return out


def merge_res_usage(res: KernelResources, usage: dict[str, int]) -> None:
    """Fill what ptxas -v left out (cmem banks, lmem) from cuobjdump's figures."""
    if not res.constant_memory_bytes:
        for key, value in usage.items():
            if m := re.fullmatch(r"CONSTANT\[(\d+)\]", key):
                res.constant_memory_bytes[int(m.group(1))] = value
    if not res.local_memory_bytes and usage.get("LOCAL"):
        res.local_memory_bytes = usage["LOCAL"]
    if res.registers is None and "REG" in usage:
        res.registers = usage["REG"]
