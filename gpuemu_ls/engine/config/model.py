"""The checked model of ``gpuemu.toml``: the frozen dataclasses a loaded configuration is made of, and how
an op's tolerance resolves across its levels (op > project > built-in).
"""

from __future__ import annotations

import dataclasses
import difflib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import dtypes as dt
from ..errors import Problem
from .keys import DEFAULT_DISTRIBUTIONS, DEFAULT_DTYPES
from .tomlpos import PositionIndex, Span


@dataclass(frozen=True)
class Tolerance:
    """A tolerance as written: any field may be absent and then comes from the next level.

    ``ulp`` (an integer N >= 0) bounds the error in units of the output dtype's spacing, measured from
    the correctly rounded reference; a level that sets it makes its own missing atol/rtol 0, so
    ``{ ulp = 0 }`` alone means bit-exact after the output rounding.
    """

    atol: float | None
    rtol: float | None
    ulp: int | None = None


@dataclass(frozen=True)
class Bound:
    """The resolved tolerance of one output dtype (see :func:`resolve_bound`)."""

    atol: float
    rtol: float
    ulp: int | None = None  # None: the default rule (one ulp of the output dtype, from the exact reference)
    builtin_atol: bool = False  # atol is the built-in default (no level set one): half precision scales it

    def scaled(self, dtype: str, ref: Any) -> Bound:
        """The bound for an output whose reference is ``ref``: the built-in half-precision atol follows the
        output's magnitude (see :func:`scaled_atol`); an atol a user set means exactly what it says."""
        if not (self.builtin_atol and dtype in SCALED_ATOL_DTYPES):
            return self
        return dataclasses.replace(self, atol=scaled_atol(self.atol, ref))

    @property
    def exact(self) -> bool:
        """Bit-exact after the output rounding: no slack of any kind applies."""
        return self.ulp == 0 and self.atol == 0 and self.rtol == 0


#: Output dtypes whose built-in atol scales with the output's magnitude (tolerance rule "scaled-1").
SCALED_ATOL_DTYPES = ("float16", "bfloat16")
#: The smallest scale: the built-in half-precision atol never drops below 2**-10 of itself (~1e-5, float32's).
SCALE_FLOOR = 2.0**-10
#: The name of the default tolerance rule, as results and baselines record it (max_ratio is measured under it).
TOLERANCE_RULE = "scaled-1"


def scaled_atol(atol: float, ref: Any) -> float:
    """``atol * min(1, max(S, 2**-10))``, ``S`` the largest finite ``|ref|`` of the output.

    A fixed atol of 1e-2 passes any answer for an output whose values are ~2e-3 (a gradient, the
    probabilities of a large vocabulary), a 100 % error included; scaled by what the output holds, the
    absolute slack stays a hundredth of the output's own size, down to the floor (an output of zeros keeps
    ~1e-5 of slack, float32's own atol), and is never larger than the fixed default.
    """
    import numpy as np

    a = np.asarray(ref, dtype=np.float64)
    finite = np.abs(a[np.isfinite(a)]) if a.size else a
    top = float(finite.max()) if finite.size else 0.0
    return atol * min(1.0, max(top, SCALE_FLOOR))


def resolve_bound(op: OpConfig, validation: ValidationConfig, dtype: str) -> Bound:
    """The tolerance of an output dtype, field by field: op > project > built-in (exact for non-floats).

    A level that sets ``ulp`` also settles its own absent atol/rtol as 0: an ulp statement is a whole
    tolerance, not one to be widened by a looser level below it.
    """
    atol = rtol = None
    ulp = None
    for level in (op.tolerances.get(dtype), validation.tolerances.get(dtype)):
        if level is None:
            continue
        if level.ulp is not None and ulp is None:
            ulp = level.ulp
            atol = (level.atol if level.atol is not None else 0.0) if atol is None else atol
            rtol = (level.rtol if level.rtol is not None else 0.0) if rtol is None else rtol
        atol = level.atol if atol is None else atol
        rtol = level.rtol if rtol is None else rtol
    base = dt.DEFAULT_TOLERANCES.get(dtype, (0.0, 0.0))
    return Bound(base[0] if atol is None else atol, base[1] if rtol is None else rtol, ulp, builtin_atol=atol is None)


def resolve_tolerance(op: OpConfig, validation: ValidationConfig, dtype: str) -> tuple[float, float]:
    """(atol, rtol) for an output dtype (see :func:`resolve_bound`, which also carries ``ulp``)."""
    b = resolve_bound(op, validation, dtype)
    return b.atol, b.rtol


@dataclass(frozen=True)
class DimSpec:
    """A symbolic dimension: an integer range with a default, or a list of candidates (first = default)."""

    name: str
    min: int
    max: int
    default: int
    candidates: tuple[int, ...] | None = None
    tiles: tuple[int, ...] = ()  # declared tile/block sizes (``tile = 64``): where small-scope shapes probe
    also: tuple[int, ...] = ()  # sizes every run reaches in each dtype it covers (``also = [32768]``), range or not

    def contains(self, value: int) -> bool:
        if self.candidates is not None:
            return value in self.candidates
        return self.min <= value <= self.max


@dataclass(frozen=True)
class InputSpec:
    name: str
    shape: tuple[str | int, ...]
    dtype: str | None = None  # fixed dtype; None: the case's fuzzed dtype
    range: tuple[float | str, float | str] | None = None  # ints: half-open [lo, hi); floats: bounds [lo, hi]
    distributions: tuple[str, ...] | None = None
    scale: float | None = None  # value domain (float inputs); None: the op's
    offset: float | None = None
    sign: str | None = None
    # integer inputs: (value, share) pairs, e.g. ((-100, 0.25),): ignore_index in a quarter of the targets
    sentinels: tuple[tuple[int, float], ...] = ()


@dataclass(frozen=True)
class OpConfig:
    name: str
    index: int
    module: str | None
    reference: str | None
    op_script: str | None
    execution_mode: str
    input_names: tuple[str, ...]
    inputs: tuple[InputSpec, ...]
    dims: dict[str, DimSpec]
    kwargs: dict[str, Any]
    invariants: tuple[str, ...]
    tolerances: dict[str, Tolerance]
    dtypes: tuple[str, ...]
    layouts: tuple[str, ...]
    distributions: tuple[str, ...]
    framework: str
    output_dtype: str | None = None
    timeout: float | None = None
    iterations: int | None = None
    seeds: tuple[int, ...] = ()
    #: the plan version each pinned seed names (a table pin's ``plan``; a bare integer means plan 1, the
    #: plan every pin written before plan versions existed was drawn under)
    pin_plans: dict[int, int] = field(default_factory=dict)
    #: neither the op nor [validation] lists distributions: the plan's default set (keys.PLAN_DISTRIBUTIONS)
    default_distributions: bool = False
    #: neither the op nor [validation] lists dtypes: the plan's default set (keys.PLAN_DTYPES)
    default_dtypes: bool = False
    budget: float | None = None  # seconds for this op's cases (math.inf: off); None: the run's or the default
    cost: str = "normal"  # "high": small-scope shapes (cases/plan.py) and a work budget (cases/budget.py)
    cost_reason: str = ""  # "declared" (high or normal), or what ``cost = "auto"`` found ("": nothing)
    inplace: tuple[str, ...] = ()  # inputs the op writes its result into: judged as outputs of those names
    grad: tuple[str, ...] = ()  # inputs whose gradients are judged as outputs grad_<name> (run/grads.py)
    outputs: tuple[str, ...] = ()  # names of the op's positional outputs (result, result0.. otherwise)
    requires_grad: tuple[str, ...] = ()  # torch inputs handed over with requires_grad (forward-only kernels read it)
    reference_framework: str = "numpy"  # the tensors an in-process reference receives (float64, on the CPU)
    reference_grad: str | None = None  # "module:function": a numpy reference's input gradients
    nan_contract: bool = False  # a NaN the reference returns from NaN-free inputs is the op's contract there
    strict: bool = False  # edge findings fail (oracle/tier.py); the op's ``strict``, else [validation]'s
    call: str = "positional"  # how the op's function receives its inputs (CALL_STYLES)
    reference_call: str = "positional"  # the same for an in-process reference (default: the op's ``call``)
    # value domain of float inputs (the op's, else [validation]'s; an input's own fields win); None: unset
    scale: float | None = None
    offset: float | None = None
    sign: str | None = None
    range: tuple[float | str, float | str] | None = None  # bounds [lo, hi]; may name dims

    @property
    def plan_bound(self) -> bool:
        """Whether the case a seed names depends on the plan version: the op takes a default set."""
        return self.default_distributions or self.default_dtypes

    @property
    def reference_is_script(self) -> bool:
        return self.reference is not None and not is_callable_ref(self.reference)

    @property
    def grad_by_differences(self) -> bool:
        """Gradients judged along directions by finite differences of a numpy reference (run/finite_diff.py):
        ``grad`` without ``reference_grad`` or a differentiable (PyTorch) reference."""
        return bool(self.grad) and self.reference_grad is None and self.reference_framework == "numpy"

    @property
    def runnable(self) -> bool:
        """Whether the CLI can run the op under test (client-side ops without a module run elsewhere)."""
        return self.module is not None or self.op_script is not None

    def float_inputs(self) -> tuple[InputSpec, ...]:
        return tuple(i for i in self.inputs if i.dtype is None or dt.is_float(i.dtype))


@dataclass(frozen=True)
class ArtifactChecksConfig:
    max_registers: int | None = None
    max_spills: int | None = None
    max_local_memory_bytes: int | None = None
    max_shared_memory_bytes: int | None = None
    forbidden_instructions: tuple[str, ...] | None = None
    required_instructions: tuple[str, ...] | None = None


@dataclass(frozen=True)
class KernelConfig:
    name: str
    index: int
    source: str
    reference: str | None
    function: str | None
    arch: str | None
    flags: tuple[str, ...]
    include_dirs: tuple[str, ...]
    defines: tuple[str, ...]
    artifact_checks: ArtifactChecksConfig


@dataclass(frozen=True)
class ValidationConfig:
    dtypes: tuple[str, ...] = DEFAULT_DTYPES
    dtypes_listed: bool = False  # [validation] lists dtypes (else: the plan's default set)
    check_nan: bool = True
    check_inf: bool = True
    strict: bool = False  # edge findings fail, for ops that do not say
    seed: int = 0
    tolerances: dict[str, Tolerance] = field(default_factory=dict)
    iterations: int = 50
    timeout: float = 30.0
    distributions: tuple[str, ...] = DEFAULT_DISTRIBUTIONS
    distributions_listed: bool = False  # [validation] lists distributions (else: the plan's default set)
    max_failure_snapshots: int = 200
    memory_limit_mb: int | None = None
    # value domain of float inputs, for ops and inputs that set none (None: unset)
    scale: float | None = None
    offset: float | None = None
    sign: str | None = None
    range: tuple[float, float] | None = None


@dataclass(frozen=True)
class CIConfig:
    # None: not set, quick runs float32 plus a few float16/bfloat16 cases (see plan.plan_quick); set: only these
    quick_dtypes: tuple[str, ...] | None = None
    quick_iterations: int = 16
    thorough_timeout: float | None = None
    parallel_jobs: int | str | None = None  # a count, or "auto": a worker per core (run/cpus.py)
    fuzz_iterations: int = 100
    regression_threshold: float = 0.1
    budget: float | None = None  # seconds for a thorough run's ops (math.inf: off); None: the default per op
    quick_budget: float | None = None  # the same for a --quick run ([ci.quick] budget)


#: ``[store] keep_runs`` when not set: runs of each kind (source and mode) a store keeps.
DEFAULT_KEEP_RUNS = 20
#: ``[store] keep_failures_days`` when not set: the failing cases (and their input snapshots) of a pruned run are
#: kept this many days from the run's start, so ``reproduce`` still replays them byte for byte.
DEFAULT_KEEP_FAILURES_DAYS = 90.0


@dataclass(frozen=True)
class StoreConfig:
    keep_runs: int | None = DEFAULT_KEEP_RUNS  # runs of each kind kept after every run; None: all ("all")
    keep_failures_days: float | None = DEFAULT_KEEP_FAILURES_DAYS  # failing cases of pruned runs; None: forever


@dataclass(frozen=True)
class PoliciesConfig:
    fail_on_regression: bool = False
    warn_threshold: float = 0.8


@dataclass(frozen=True)
class CudaConfig:
    nvcc: str | None = None
    arch: str = "sm_90"
    flags: tuple[str, ...] = ()
    include_dirs: tuple[str, ...] = ()
    defines: tuple[str, ...] = ()
    artifact_checks: ArtifactChecksConfig = ArtifactChecksConfig()


@dataclass(frozen=True)
class Config:
    """A checked workspace configuration. Paths in ops and kernels are relative to ``root``."""

    root: Path
    path: Path
    project_name: str
    framework: str
    validation: ValidationConfig
    ci: CIConfig
    policies: PoliciesConfig
    cuda: CudaConfig
    ops: tuple[OpConfig, ...]
    kernels: tuple[KernelConfig, ...]
    allow_external_paths: bool = False
    positions: PositionIndex | None = None
    warnings: tuple[Problem, ...] = ()
    store: StoreConfig = field(default_factory=StoreConfig)

    def op(self, name: str) -> OpConfig:
        for op in self.ops:
            if op.name == name:
                return op
        close = difflib.get_close_matches(name, [o.name for o in self.ops], n=1)
        hint = f"did you mean {close[0]!r}?" if close else f"ops: {', '.join(o.name for o in self.ops)}"
        raise KeyError(f"no op named {name!r} in {self.path} ({hint})")

    def strictly(self) -> Config:
        """This configuration with every op strict (``--strict``): edge findings fail."""
        return dataclasses.replace(
            self,
            validation=dataclasses.replace(self.validation, strict=True),
            ops=tuple(dataclasses.replace(o, strict=True) for o in self.ops),
        )

    def kernel(self, name: str) -> KernelConfig:
        for k in self.kernels:
            if k.name == name:
                return k
        raise KeyError(f"no kernel named {name!r} in {self.path}")

    def resolve(self, rel: str) -> Path:
        return (self.root / rel).resolve()

    def op_span(self, op: OpConfig) -> Span | None:
        return self.positions.key(("ops", op.index)) if self.positions else None

    def kernel_span(self, kernel: KernelConfig) -> Span | None:
        return self.positions.key(("kernels", kernel.index)) if self.positions else None


def is_callable_ref(ref: str) -> bool:
    """``module:function`` (a callable), as opposed to a script path such as ``refs/softmax.py``."""
    if ":" not in ref:
        return False
    mod = ref.split(":", 1)[0]
    return not mod.endswith(".py") and "/" not in mod and "\\" not in mod
