"""What to lint and against which limits: the inputs of the CUDA artifact lint.

These are plain frozen dataclasses so that the config layer can build them from
`[[kernels]]` entries and so that they hash/compare by value (the cache key is
derived from them).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path


def _merge_patterns(defaults: tuple[str, ...], own: tuple[str, ...]) -> tuple[str, ...]:
    """Union, order-preserving: a per-kernel list adds to the project-wide one, never drops from it."""
    return tuple(dict.fromkeys((*defaults, *own)))


@dataclass(frozen=True)
class ArtifactChecks:
    """Limits checked against the compiled artifacts of one kernel (None = not checked)."""

    max_registers: int | None = None
    max_spills: int | None = None  # spill bytes, stores + loads, as ptxas -v reports
    max_local_memory_bytes: int | None = None  # stack frame + local memory per thread
    max_shared_memory_bytes: int | None = None  # static shared memory per block
    forbidden_instructions: tuple[str, ...] = ()
    required_instructions: tuple[str, ...] = ()

    def any(self) -> bool:
        """Whether any limit is set: a lint with none reports figures, it cannot pass or fail."""
        return any(v not in (None, ()) for v in (getattr(self, f.name) for f in fields(self)))

    def merged_over(self, defaults: ArtifactChecks) -> ArtifactChecks:
        """Per-kernel values override global defaults; instruction lists are unioned.

        Unioning the instruction lists means a kernel entry that adds one forbidden
        pattern keeps the project-wide bans (dropping them silently would make a
        check that cannot fail).
        """
        values: dict[str, object] = {}
        for f in fields(self):
            own = getattr(self, f.name)
            base = getattr(defaults, f.name)
            if isinstance(own, tuple):
                values[f.name] = _merge_patterns(tuple(base), own)
            else:
                values[f.name] = base if own is None else own
        return ArtifactChecks(**values)  # type: ignore[arg-type]

    @property
    def is_empty(self) -> bool:
        """True when nothing would be checked (the kernel can still fail to compile)."""
        return all((getattr(self, f.name) in (None, ())) for f in fields(self))


@dataclass(frozen=True)
class KernelSpec:
    """One `[[kernels]]` entry: which function of which source, built how, checked against what."""

    name: str  # the [[kernels]] entry name
    source: Path  # .cu (or .ptx) file
    function: str | None = None  # the __global__ function to inspect; default = name
    arch: str = "sm_90"
    flags: tuple[str, ...] = ()  # extra nvcc flags
    include_dirs: tuple[Path, ...] = ()
    defines: tuple[str, ...] = ()  # "NAME" or "NAME=VALUE"
    checks: ArtifactChecks = field(default_factory=ArtifactChecks)
    warn_threshold: float | None = None  # e.g. 0.8: a metric above 80% of its limit is a warning

    @property
    def target_function(self) -> str:
        """The function name looked up in the compiled artifacts."""
        return self.function or self.name
