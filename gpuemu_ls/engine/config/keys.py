"""The keys and values of ``gpuemu.toml``: which tables and keys exist, the names each choice may take, the
numeric bounds, the defaults, and how a duration (a budget) reads and prints. What a reader looks up to learn
what a configuration may say; the checker (:mod:`.checker`) enforces it.
"""

from __future__ import annotations

import math
import re
from typing import Any

CONFIG_NAME = "gpuemu.toml"
#: The largest seed: seeds reach editors as JSON numbers, exact in JavaScript and Lua only up to 2**53 - 1.
MAX_SEED = 2**53 - 1
#: Bounds of every numeric setting (key name -> (min, max), inclusive): a value past them is a typo, not
#: a wish, and would otherwise surface later as an internal error (an overflowing timer, a worker that
#: cannot import numpy under its memory limit, a plan that never ends). The CLI, the server and the API
#: use the same figures.
MAX_ITERATIONS = 1_000_000
MAX_JOBS = 256
MAX_TIMEOUT_S = 86_400.0
MIN_MEMORY_MB, MAX_MEMORY_MB = 256, 1 << 24
MAX_DIM = 2**31 - 1
NUMERIC_BOUNDS: dict[str, tuple[float, float]] = {
    "iterations": (1, MAX_ITERATIONS),
    "fuzz_iterations": (1, MAX_ITERATIONS),
    "parallel_jobs": (1, MAX_JOBS),
    "timeout": (0, MAX_TIMEOUT_S),
    "thorough_timeout": (0, MAX_TIMEOUT_S),
    "memory_limit_mb": (MIN_MEMORY_MB, MAX_MEMORY_MB),
    "max_failure_snapshots": (0, 100_000),
    "regression_threshold": (0, 1e6),
    "scale": (0, 1e300),
    "atol": (0, 1e300),
    "rtol": (0, 1e300),
}
#: Budgets (``--budget``, ``[ci] budget``, ``[ci.quick] budget``, an op's ``budget``): at least a second (less
#: cannot hold one case of an op worth budgeting) and at most a day, like every timeout.
MIN_BUDGET_S = 1.0
#: What an op's ``cost`` may declare: ``high`` gives it small-scope shapes and a work budget (cases/plan.py,
#: cases/budget.py); ``auto`` (the default) is ``high`` for an op that imports triton or whose probe case
#: launches a Triton kernel (run/cost_probe.py), ``normal`` otherwise.
COSTS = ("auto", "normal", "high")
_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*(ms|s|m|h)?", re.IGNORECASE)
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(value: Any) -> float:
    """Seconds of a budget: a number (seconds) or text such as ``"90s"``, ``"5m"``, ``"1m30s"``, ``"1.5h"``;
    ``"off"`` (or ``"none"``) is ``math.inf``, no budget at all. ValueError says what is wrong; the bounds are
    checked by :func:`check_budget` so that the CLI and the checker word them alike."""
    if isinstance(value, bool):
        raise ValueError(f"expected a duration such as 90s or 5m, not {value}")
    if isinstance(value, (int, float)):
        if not math.isfinite(value):
            raise ValueError(f"expected a finite duration, got {value}")
        return float(value)
    if not isinstance(value, str):
        raise ValueError(f"expected a duration such as 90s or 5m, not {_tname(value)}")
    text = value.strip().lower()
    if text in ("off", "none"):
        return math.inf
    pos, total, units = 0, 0.0, 0
    while pos < len(text):
        m = _DURATION.match(text, pos)
        if m is None or (m.group(2) is None and (units or m.end() < len(text))):
            raise ValueError(f"not a duration: {value!r} (e.g. 90s, 5m, 1m30s, or off)")
        total += float(m.group(1)) * _UNIT_S[(m.group(2) or "s").lower()]
        units += 1
        pos = m.end()
        while pos < len(text) and text[pos] == " ":
            pos += 1
    if not units:
        raise ValueError(f"not a duration: {value!r} (e.g. 90s, 5m, 1m30s, or off)")
    return total


def check_budget(seconds: float) -> str | None:
    """Why a budget is out of bounds (None when it is fine); ``math.inf`` (off) is fine."""
    if seconds == math.inf:
        return None
    if not MIN_BUDGET_S <= seconds <= MAX_TIMEOUT_S:
        return f"a budget must be between {MIN_BUDGET_S:g} s and {MAX_TIMEOUT_S:g} s (a day), or off; got {seconds:g} s"
    return None


def format_duration(seconds: float) -> str:
    """``"45s"``, ``"5m"``, ``"4m10s"``, ``"2h5m"``: how a budget reads in messages (whole seconds, rounded up)."""
    if seconds == math.inf:
        return "off"
    s = max(1, math.ceil(seconds - 1e-9))
    h, rest = divmod(s, 3600)
    m, sec = divmod(rest, 60)
    return "".join(f"{v}{u}" for v, u in ((h, "h"), (m, "m"), (sec, "s")) if v) or "0s"


FRAMEWORKS = ("numpy", "pytorch", "jax", "tensorflow")
#: What an in-process reference may receive: numpy arrays or PyTorch tensors (float64, on the CPU).
REFERENCE_FRAMEWORKS = ("numpy", "pytorch", "jax")
EXECUTION_MODES = ("in_process", "script_based", "client_side", "daemon_orchestrated")
#: How an in-process op (or reference) receives its inputs: ``f(x, w)``, ``f(x=..., w=...)`` or ``f({"x": ..})``.
CALL_STYLES = ("positional", "kwargs", "dict")
LAYOUTS = ("contiguous", "transposed", "strided")
#: Value distributions, in window order (every len(DISTRIBUTIONS) consecutive seeds cover each once);
#: the formulas are in :mod:`gpuemu_ls.engine.cases.generate`.
DISTRIBUTIONS = (
    "normal",  # N(0, 1)
    "uniform",  # uniform in (-1, 1)
    "small",  # N(0, 1) * 1e-3
    "wide",  # N(0, 1) * 10
    "integers",  # integers in [-8, 8], exact in every dtype
    "positive",  # |N(0, 1)|, a third of the rows same-sign and up to 2**12: accumulator stress
    "mixed_magnitude",  # random sign * 2**u, u over [-20, 20]: magnitudes across many decades
    "large",  # magnitudes up to 2**top, top from the dtype, the accumulation dtype and the dims
    "boundary",  # 0, -0, +-1, +-tiny, +-smallest subnormal, +-near max (each at least once), in normals
    "subnormal",  # the dtype's subnormal range, both signs, some zeros
    "ties",  # exact midpoints of the output dtype (rounding in casts)
    "constant_rows",  # each row one repeated value
    "masked_rows",  # whole rows of -inf, at least one
    "partial_inf",  # some -inf per row, never all; a row with a single finite value
    "underflow_rows",  # rows entirely below exp's underflow threshold, at least one
    "tail_max",  # each row's maximum at its last element
    "special",  # NaN and +-inf sprinkled, each at least once
    "nan_payloads",  # NaNs of specific bit patterns (canonical, quiet and signalling with low payloads)
    "peaked",  # N(0, 1) rows, each with one dominant value (+12..+20) at a random position: confident logits
)
#: The plan version: what a bare (op, seed) means. Plan 1 draws from the first 18 distributions (no
#: ``peaked``); plan 2 adds ``peaked`` to the default set; plan 3 draws from the three float dtypes where
#: neither the op nor [validation] lists dtypes (float32 alone before). Only ops that take a default set
#: see a difference (an op that lists its distributions and dtypes draws the same case under every
#: plan), and a seed recorded under a plan (stored cases, pins, baselines) replays under that plan. Plan
#: 3 is the default; earlier plans' cases stay reachable (``reproduce --plan N``, bare-integer pins (plan
#: 1), cases stored before it).
PLAN = 3
#: The default distributions of each plan.
PLAN_DISTRIBUTIONS: dict[int, tuple[str, ...]] = {
    1: tuple(d for d in DISTRIBUTIONS if d != "peaked"),
    2: DISTRIBUTIONS,
    3: DISTRIBUTIONS,
}
#: What an op draws from when neither it nor [validation] lists distributions.
DEFAULT_DISTRIBUTIONS = PLAN_DISTRIBUTIONS[PLAN]
#: The default dtypes of each plan: float32 alone up to plan 2, the three float dtypes from plan 3.
PLAN_DTYPES: dict[int, tuple[str, ...]] = {
    1: ("float32",),
    2: ("float32",),
    3: ("float32", "float16", "bfloat16"),
}
#: What an op draws from when neither it nor [validation] lists dtypes: thorough runs cover all three
#: (a --quick run keeps to float32 plus a few half-precision cases, cases/plan.py:plan_quick).
DEFAULT_DTYPES = PLAN_DTYPES[PLAN]


def pinned_seed(pin: int | dict[str, Any]) -> int:
    """The seed of an entry of an op's ``seeds``: an integer, or ``{ seed = N, plan = P }``."""
    return int(pin["seed"]) if isinstance(pin, dict) else int(pin)


def pinned_plan(pin: int | dict[str, Any]) -> int:
    """A pin's plan version: a table's ``plan`` (default 1), and 1 for a bare integer, which is how every
    seed pinned before plan versions existed is written."""
    return int(pin.get("plan", 1)) if isinstance(pin, dict) else 1


#: What ``sign`` folds generated values to (zeros stay zeros).
SIGNS = ("any", "positive", "negative")
INVARIANTS = ("shape_preserved", "non_negative", "finite", "symmetric", "normalized")

#: What an op gets when ``[ops.inputs]`` is absent (seed-docs ops named inputs but gave no shapes).
DEFAULT_INPUT_SHAPE = ("B", "N")
DEFAULT_DIMS = {"B": (1, 64, 8), "N": (1, 4096, 1024)}


#: The largest ``ulp`` a tolerance may name: beyond it an ulp bound means nothing for any float format.
MAX_ULP = 1 << 20


def _tname(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    return {str: "a string", int: "an integer", float: "a float", list: "an array", dict: "a table"}.get(
        type(value), type(value).__name__
    )


# --------------------------------------------------------------------------------------------
# Schema: the keys each table accepts. A value is a checker method name and its argument.

_TOL_KEYS = {"atol", "rtol", "ulp"}
_TOP_KEYS = {"project", "validation", "ops", "kernels", "policies", "ci", "cuda", "store"}
_USER_KEYS = {"project", "validation", "policies", "ci", "cuda", "store"}
_PROJECT_KEYS = {"name", "framework", "description", "allow_external_paths"}
_VALIDATION_KEYS = {
    "dtypes",
    "check_nan",
    "check_inf",
    "seed",
    "tolerances",
    "iterations",
    "timeout",
    "distributions",
    "max_failure_snapshots",
    "memory_limit_mb",
    "scale",
    "offset",
    "sign",
    "range",
    "strict",
}
_OP_KEYS = {
    "name",
    "module",
    "reference",
    "op_script",
    "execution_mode",
    "input_names",
    "invariants",
    "tolerances",
    "dtypes",
    "layouts",
    "framework",
    "inputs",
    "dims",
    "kwargs",
    "distributions",
    "output_dtype",
    "timeout",
    "iterations",
    "seeds",
    "budget",
    "cost",
    "description",
    "nan_contract",
    "strict",
    "inplace",
    "grad",
    "requires_grad",
    "outputs",
    "reference_framework",
    "reference_grad",
    "call",
    "reference_call",
    "scale",
    "offset",
    "sign",
    "range",
}
_INPUT_KEYS = {"shape", "dtype", "range", "distributions", "scale", "offset", "sign", "sentinels"}
#: The value-domain keys of [validation], [[ops]] and [ops.inputs.x].
_DOMAIN_KEYS = ("scale", "offset", "sign", "range")
_DIM_KEYS = {"min", "max", "default", "candidates", "tile", "block", "also"}
_KERNEL_KEYS = {
    "name",
    "source",
    "reference",
    "function",
    "arch",
    "flags",
    "include_dirs",
    "defines",
    "artifact_checks",
    "description",
}
_CHECK_KEYS = {
    "max_registers",
    "max_spills",
    "max_local_memory_bytes",
    "max_shared_memory_bytes",
    "forbidden_instructions",
    "required_instructions",
}
_POLICY_KEYS = {"fail_on_regression", "warn_threshold"}
_CI_KEYS = {
    "quick_dtypes",
    "thorough_timeout",
    "parallel_jobs",
    "fuzz_iterations",
    "regression_threshold",
    "quick",
    "budget",
}
_CI_QUICK_KEYS = {"iterations", "dtypes", "budget"}
_CUDA_KEYS = {"nvcc", "arch", "flags", "include_dirs", "defines", "artifact_checks"}
_STORE_KEYS = {"keep_runs", "keep_failures_days"}

#: The keys of each table by its schema path (``("ops", "inputs", "*")``: an input the user names), for editors
#: (:mod:`.keydocs`); the tolerance tables, keyed by dtype, are not here.
KEYS_BY_TABLE: dict[tuple[str, ...], set[str]] = {
    (): _TOP_KEYS,
    ("project",): _PROJECT_KEYS,
    ("validation",): _VALIDATION_KEYS,
    ("validation", "tolerances", "*"): _TOL_KEYS,
    ("ops",): _OP_KEYS,
    ("ops", "inputs", "*"): _INPUT_KEYS,
    ("ops", "dims", "*"): _DIM_KEYS,
    ("ops", "tolerances", "*"): _TOL_KEYS,
    ("kernels",): _KERNEL_KEYS,
    ("kernels", "artifact_checks"): _CHECK_KEYS,
    ("policies",): _POLICY_KEYS,
    ("ci",): _CI_KEYS,
    ("ci", "quick"): _CI_QUICK_KEYS,
    ("cuda",): _CUDA_KEYS,
    ("cuda", "artifact_checks"): _CHECK_KEYS,
    ("store",): _STORE_KEYS,
}
