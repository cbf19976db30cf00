# ruff: noqa: E501  (one-line docs read from the JSON schema: kept whole, so they stay greppable against it)
"""What every key of gpuemu.toml means, by table, for editors: the language server's completion and hover
in gpuemu.toml read it, so every editor has the docs the VS Code JSON schema gives TOML extensions.

``TABLES`` maps a table's schema path to its keys and their one-line docs: ``("ops",)`` is an
``[[ops]]`` entry, ``"*"`` stands for a name the user picks (``[ops.inputs.x]`` is ``("ops", "inputs",
"*")``). Which keys a table has is the checker's business (:data:`KEYS`, read from :mod:`.keys`, so
completion never offers a key the checker refuses); the texts are the schema's
(``editors/vscode/schemas/gpuemu.schema.json``, which ships only with VS Code), and a test holds every
key the checker accepts documented here.
"""

from __future__ import annotations

from ..dtypes import ALL_NAMES, FLOAT_NAMES
from .keys import (
    CALL_STYLES,
    COSTS,
    DISTRIBUTIONS,
    EXECUTION_MODES,
    FRAMEWORKS,
    INVARIANTS,
    KEYS_BY_TABLE,
    LAYOUTS,
    REFERENCE_FRAMEWORKS,
    SIGNS,
)

#: The limits of an ``artifact_checks`` table, in ``[[kernels]]`` and in ``[cuda]``.
_ARTIFACT_CHECKS = {
    "max_registers": "Most registers per thread.",
    "max_spills": "Most spill bytes (stores + loads).",
    "max_local_memory_bytes": "Most local memory per thread, in bytes.",
    "max_shared_memory_bytes": "Most static shared memory per block, in bytes.",
    "forbidden_instructions": 'Instructions that must not appear: SASS by dot-prefix ("LDL"), "ptx:ld.volatile", or a regex "re:vprintf".',
    "required_instructions": "Instructions that must appear (same syntax as forbidden_instructions).",
}

TABLES: dict[tuple[str, ...], dict[str, str]] = {
    (): {
        "project": "The project.",
        "validation": "Defaults for every op.",
        "ops": "The ops under test, one [[ops]] table each.",
        "kernels": "CUDA kernels to compile and lint (PTX/SASS), one [[kernels]] table each.",
        "policies": "Regression policies.",
        "ci": "The CI gate (gpuemu-ls --check).",
        "cuda": "Defaults for every [[kernels]] entry.",
        "store": "The result store (.gpuemu/gpuemu.db): how much history it keeps.",
    },
    ("project",): {
        "name": "Project name (default: the folder name).",
        "framework": "What an in-process op receives: numpy arrays, torch tensors, jax arrays or tensorflow tensors.",
        "description": "Free text.",
        "allow_external_paths": "Allow scripts and sources outside the workspace.",
    },
    ("validation",): {
        "dtypes": "Dtypes to fuzz (default: the three float dtypes, float32, float16 and bfloat16; a --quick run keeps to float32 plus a few half-precision cases).",
        "check_nan": "NaN where the reference is finite fails.",
        "check_inf": "inf where the reference is finite fails.",
        "strict": "Edge findings fail (default false): failures that show only where a product of two inputs overflows the accumulation precision, or where NaN/inf inputs propagate differently from the reference. By default they are shown and do not fail; an op's own strict wins.",
        "seed": "First case seed (default 0).",
        "tolerances": "Tolerances per output float dtype, e.g. float32 = { atol = 1e-5, rtol = 1e-5 }.",
        "iterations": "Cases per op for a thorough run (default 50).",
        "timeout": "Seconds per op call or reference call; a hang is killed (default 30).",
        "distributions": "Value distributions to draw inputs from (default: all).",
        "max_failure_snapshots": "Input snapshots kept per op per run (default 200).",
        "memory_limit_mb": "RLIMIT_AS of worker processes, in MiB.",
        "scale": "Multiplies generated float values (first step of the value domain).",
        "offset": "Added to generated float values, after scale.",
        "sign": "Folds generated values to this sign (|v| or -|v|; zeros stay zeros).",
        "range": "Bounds [low, high] of float values: every distribution is clipped into it (NaN stays NaN); boundary and large are drawn relative to it.",
    },
    ("validation", "tolerances"): {
        "float64": "Tolerance of float64 outputs: { atol, rtol } or { ulp }.",
        "float32": "Tolerance of float32 outputs: { atol, rtol } or { ulp }.",
        "float16": "Tolerance of float16 outputs: { atol, rtol } or { ulp }.",
        "bfloat16": "Tolerance of bfloat16 outputs: { atol, rtol } or { ulp }.",
    },
    ("validation", "tolerances", "*"): {
        "atol": "Absolute tolerance.",
        "rtol": "Relative tolerance.",
        "ulp": "Error bound in units of the output dtype's spacing, from the correctly rounded reference; 0 = bit-exact after the output rounding (casts, quantisation, copies).",
    },
    ("ops",): {
        "name": "Unique op name.",
        "module": 'The op under test, called in process: "module:function", or "module:Class.apply" for an '
        "autograd Function (workspace root on sys.path).",
        "reference": 'The float64 reference: a script path (JSON protocol) or "module:function".',
        "op_script": 'The op as a protocol script (with execution_mode = "script_based").',
        "execution_mode": "How the op runs (default: in_process, or script_based with op_script).",
        "input_names": "Argument order (default: the order of [ops.inputs]).",
        "invariants": "Output invariants.",
        "tolerances": "Tolerances per output float dtype, e.g. float32 = { atol = 1e-5, rtol = 1e-5 }.",
        "dtypes": "Overrides [validation].dtypes (default: float32, float16 and bfloat16).",
        "layouts": "Memory layouts to try (default: all; contiguous for script ops).",
        "framework": "What an in-process op receives: numpy arrays, torch tensors, jax arrays or tensorflow tensors.",
        "inputs": "The op's inputs by name (default: x with shape [B, N]).",
        "dims": "Symbolic dims shared by every input that names them.",
        "kwargs": "Keyword arguments passed to the op and the reference.",
        "distributions": "Overrides [validation].distributions.",
        "output_dtype": "Expected output dtype (default: the case dtype).",
        "timeout": "Seconds per call (overrides [validation].timeout).",
        "iterations": "Cases per run (overrides [validation].iterations).",
        "seeds": "Pinned regression seeds, always run first: an integer (its plan-1 case) or { seed = N, plan = P } for a case drawn under a later plan version (the Pin action writes what is needed).",
        "budget": 'Time for this op\'s cases, e.g. "30s", or "off" (never cut, not even by the default work budget): caps the op\'s share of the run\'s budget.',
        "cost": '"auto" (default): "high" when the op imports triton (its kernels run in Triton\'s CPU interpreter) or when its probe case, run first, launches a Triton kernel there (kernels a shim or a registry loads), else "normal". "high": half the op\'s cases get small-scope shapes (1, 2, 3, tile-1, tile, tile+1, 2*tile+1 on one tiled dim, the other dims at 1..3; where the source says so), and without a time budget its cases are cut to every coverage class by its cheapest case, then the plan\'s cheaper cases up to 24 in all, within a quarter of the plan\'s work (half in --quick), work counted in the interpreter\'s operations on probe cases: the same cases on every machine.',
        "description": "Free text.",
        "strict": "Edge findings of this op fail (default: [validation] strict, else false): failures that show only where a product of two inputs overflows the accumulation precision, or where NaN/inf inputs propagate differently from the reference. By default they are shown and do not fail.",
        "outputs": 'Names of the op\'s outputs in order, for a function that returns a tuple (or one output): outputs = ["loss", "dlogits"] makes them loss and dlogits (instead of result0, result1) in every face: failure lines, JSON, diagnostics, hovers, reproductions. The reference may return the same tuple or a dict of these names.',
        "requires_grad": "Float inputs of a PyTorch op handed over with requires_grad set (the same memory, as a leaf): for kernels that compute their gradient only when training, such as a cross-entropy that writes d loss / d logits into the logits when logits.requires_grad. grad sets it on its own inputs already.",
        "grad": "Inputs to differentiate (backward validation, PyTorch and JAX ops): the op runs forward and backward under torch.autograd (or jax.vjp) with an upstream gradient drawn per case (normal, uniform, small, wide, zeros, sparse, per-row constant, per-element varying; never only ones), and each input's gradient is judged as an output of its own, grad_<input>, against the reference's: a reference_framework = \"pytorch\" reference is differentiated by autograd in float64, a numpy one gives reference_grad, or else its gradients are judged along 3 random directions by finite differences of the numpy reference (no per-element verdict).",
        "reference_framework": 'What an in-process reference receives: numpy arrays (default), PyTorch tensors ("pytorch") or JAX arrays ("jax"), float64 on the CPU. A PyTorch or JAX reference is what backward validation (grad) differentiates.',
        "reference_grad": "\"module:function\" computing a numpy reference's input gradients (backward validation, with grad): called with the op's inputs in float64, then the upstream gradient of each forward output (in output-name order); returns the gradients in grad order (a tuple, or one array) or by input name (a dict).",
        "inplace": "Inputs the op writes its result into (e.g. a cross-entropy that writes the gradient into its logits): the op gets a private copy, the written input is judged as an output of that name (the reference returns it under that name, in a dict), and writing into it is not an input mutation. The op may return None or its other outputs.",
        "nan_contract": "A NaN the reference returns from NaN-free inputs is the op's contract there (the op must return NaN too). By default such a reference NaN is reported as suspect and the op's answer there is not judged.",
        "scale": "Multiplies generated float values (first step of the value domain).",
        "offset": "Added to generated float values, after scale.",
        "sign": "Folds generated values to this sign (|v| or -|v|; zeros stay zeros).",
        "range": "Bounds [low, high] of float values (a bound may name a dim): every distribution is clipped into it (NaN stays NaN); boundary and large are drawn relative to it.",
    },
    ("ops", "inputs", "*"): {
        "shape": "Dim names (declared under [ops.dims]) or integers.",
        "dtype": "A dtype name of the wire format.",
        "range": "Integer inputs: half-open range [low, high) drawn uniformly. Float inputs: bounds [low, high] every distribution is clipped into (boundary and large drawn relative to it). A bound may name a dim.",
        "distributions": "Distributions for this input.",
        "sentinels": "Special values of an integer input and the share of its elements that hold each: sentinels = { value = -100, share = 0.25 } puts an ignore_index in about a quarter of the targets (a list of tables for several); a case of two or more elements holds each at least once. Needs an integer dtype.",
        "scale": "Multiplies generated float values (first step of the value domain).",
        "offset": "Added to generated float values, after scale.",
        "sign": "Folds generated values to this sign (|v| or -|v|; zeros stay zeros).",
    },
    ("ops", "dims", "*"): {
        "also": "Sizes of this dim every run reaches, in each dtype it covers, even beyond min..max: also = [32768] plans N = 32768 at least once per run (a code path a library takes only for large batches), charged to the budget but never cut away, never halved to fit the element cap.",
        "min": "Smallest value.",
        "max": "Largest value.",
        "default": "Value of the default shape (within [min, max]).",
        "tile": "Tile (block) size, or sizes, the op uses on this dim: small-scope shapes probe tile-1, tile, tile+1 and 2*tile+1 (default: 16, 32, ..., 256); dims without one stay small once any dim declares one.",
        "block": "Same as tile.",
    },
    ("ops", "tolerances"): {
        "float64": "Tolerance of float64 outputs: { atol, rtol } or { ulp }.",
        "float32": "Tolerance of float32 outputs: { atol, rtol } or { ulp }.",
        "float16": "Tolerance of float16 outputs: { atol, rtol } or { ulp }.",
        "bfloat16": "Tolerance of bfloat16 outputs: { atol, rtol } or { ulp }.",
    },
    ("ops", "tolerances", "*"): {
        "atol": "Absolute tolerance.",
        "rtol": "Relative tolerance.",
        "ulp": "Error bound in units of the output dtype's spacing, from the correctly rounded reference; 0 = bit-exact after the output rounding (casts, quantisation, copies).",
    },
    ("kernels",): {
        "name": "The __global__ function (or set function).",
        "source": "The .cu file.",
        "reference": "A reference for the kernel.",
        "function": "The __global__ function when it differs from name.",
        "arch": "GPU architecture, e.g. sm_90 (default: [cuda].arch).",
        "flags": "Extra nvcc flags.",
        "include_dirs": "Include directories.",
        "defines": 'Preprocessor defines, e.g. "TILE=32".',
        "artifact_checks": "Limits checked on the compiled PTX/SASS.",
        "description": "Free text.",
    },
    ("kernels", "artifact_checks"): dict(_ARTIFACT_CHECKS),
    ("policies",): {
        "fail_on_regression": "Fail the gate on a regression against the baseline.",
        "warn_threshold": "Fraction of the tolerance that warns.",
    },
    ("ci",): {
        "quick_dtypes": "Dtypes of a --quick run. Not set: float32, plus for ops listing float16/bfloat16 a few cases of each (max(1, n // 8)) at a boundary shape with large or positive values. Set: only these.",
        "thorough_timeout": "Seconds per op in a thorough run.",
        "parallel_jobs": 'Worker processes at once (ops side by side, or one op\'s cases split): a count, or "auto" (the default): one per core this process may use, within cgroup and affinity limits.',
        "fuzz_iterations": "Cases per op in a thorough run (default 100).",
        "regression_threshold": "Relative error growth counted as a regression (default 0.1).",
        "quick": "A --quick run.",
        "budget": 'Wall time for a thorough run\'s ops, e.g. "90s", "5m", seconds, or "off": each op\'s first cases measure its cost, then every class it covers runs first and what does not fit is reported. Not set: no time budget (a high-cost op gets the default work budget, see cost).',
    },
    ("ci", "quick"): {
        "iterations": "Cases per op (default 16).",
        "dtypes": "Dtypes (overrides quick_dtypes; setting either turns off the half-precision quick cases).",
        "budget": 'Wall time for a --quick run\'s ops, e.g. "60s", or "off". Not set: no time budget (a high-cost op gets the default work budget).',
    },
    ("cuda",): {
        "nvcc": "nvcc to use (default: on PATH or the [cuda] extra).",
        "arch": "GPU architecture.",
        "flags": "nvcc flags.",
        "include_dirs": "Include directories.",
        "defines": "Preprocessor defines.",
        "artifact_checks": "Limits checked on the compiled PTX/SASS.",
    },
    ("cuda", "artifact_checks"): dict(_ARTIFACT_CHECKS),
    ("store",): {
        "keep_runs": "Runs of each kind (source and mode) kept after every gpuemu test, fuzz or gate run and every Python API or pytest-plugin run (default 20); older ones of that kind go with their cases and the input snapshots no kept case refers to, except a run that holds some op's latest result, a pinned run (gpuemu store pin, a stored baseline's) or a gpuemu minimize run. \"all\": keep everything. The editors' runs are pruned by gpuemu store prune, which also shrinks the file.",
        "keep_failures_days": 'Days the failing cases of a pruned run, and the input snapshots they refer to, are kept after the run started (default 90), so gpuemu reproduce still replays them byte for byte; the run\'s passing cases and op results go with it. Older ones go too, and reproduce of such a seed says it was pruned (use --regenerate). 0: they go with their run. "all": keep them forever.',
    },
}

VALUE_DOCS: dict[str, dict[str, str]] = {
    "layout": {
        "contiguous": "a contiguous row-major buffer",
        "transposed": "a transposed view of a contiguous buffer (same logical shape)",
        "strided": "every other element of a buffer twice as wide; the gaps hold NaN",
    },
    "distribution": {
        "normal": "standard normal values",
        "uniform": "uniform values in (-1, 1)",
        "small": "normal values * 1e-3",
        "wide": "normal values * 10",
        "integers": "integers in [-8, 8], exact in every dtype",
        "positive": "|normal|, a third of the rows same-sign and up to 2**12 (accumulator stress)",
        "mixed_magnitude": "random sign * 2**u, u over [-20, 20], clipped to the dtype's max",
        "large": "magnitudes up to 2**top, top = min(emax_in - 2, (emax_acc - log2 n) / 2 - 1): a float32 sum of squares over the case never overflows; rows same-sign with probability 1/2",
        "boundary": "0, -0, ±1, ±tiny, ±smallest subnormal, ±near the dtype's max (each at least once), mixed with normal values; with a range, its ends too",
        "subnormal": "values in the dtype's subnormal range, both signs, some zeros",
        "ties": "exact midpoints between neighbours of the output dtype (rounding in casts)",
        "constant_rows": "rows of one repeated value",
        "masked_rows": "whole rows of -inf (at least one)",
        "partial_inf": "some -inf per row, never all; one row with a single finite value",
        "underflow_rows": "rows entirely below exp's underflow threshold (at least one)",
        "tail_max": "each row's maximum at its last element",
        "special": "NaN and ±inf sprinkled, each at least once",
        "nan_payloads": "NaNs of specific bit patterns: CUDA's canonical NaN, quiet and signalling NaNs with low payloads",
        "peaked": "normal rows, each with one value 12..20 above the rest at a random position: confident logits, a softmax within ~1e-5 of one-hot",
    },
    "sign": {"any": "no folding", "positive": "|v|", "negative": "-|v|"},
    "execution_mode": {
        "in_process": "module:function in a warm worker process",
        "script_based": "op_script as a protocol script",
        "client_side": "run by a client elsewhere (not runnable here: not_run)",
        "daemon_orchestrated": "run by a daemon",
    },
}

# keys the schema does not describe yet
TABLES[("ops",)].update(
    call='How the op\'s function receives its inputs: "positional" (default), "kwargs" (by input name) or "dict".',
    reference_call="How an in-process reference receives its inputs (default: the op's call).",
)
TABLES[("ops", "dims", "*")].update(
    candidates="The values this dim takes, instead of min/max; default picks the default shape's (else the first).",
    tile="The tile or block size (or sizes) the op splits this dim by: shapes probe around its multiples.",
    block="The same as tile.",
)

#: The keys each table accepts, as the checker in :mod:`.checker` has them (from :mod:`.keys`).
KEYS: dict[tuple[str, ...], frozenset[str]] = {
    path: frozenset(keys)
    for path, keys in {
        **KEYS_BY_TABLE,
        ("validation", "tolerances"): set(TABLES[("validation", "tolerances")]),
        ("ops", "tolerances"): set(TABLES[("ops", "tolerances")]),
    }.items()
}

VALUE_DOCS["call"] = {
    "positional": "op(x, y, ...) in input order",
    "kwargs": "op(x=..., y=...) by input name",
    "dict": "op({'x': ..., 'y': ...})",
}
VALUE_DOCS["framework"] = {
    "numpy": "numpy arrays",
    "pytorch": "torch tensors (on CUDA when present)",
    "jax": "jax arrays",
    "tensorflow": "tensorflow tensors",
}
VALUE_DOCS["reference_framework"] = {
    "numpy": "float64 numpy arrays",
    "pytorch": "float64 torch tensors on the CPU (what backward validation differentiates)",
    "jax": "float64 JAX arrays on the CPU, 64-bit types enabled for the call only (what jax.vjp differentiates)",
}
VALUE_DOCS["invariant"] = {
    "shape_preserved": "the output has the shape of the first input",
    "non_negative": "no element below zero",
    "finite": "no NaN or inf",
    "symmetric": "the output equals its transpose over the last two axes",
    "normalized": "each row sums to 1",
}

#: Tables whose keys are the user's names (inputs, dims, kwargs): their children follow the ``"*"`` path.
FREE_TABLES = frozenset({("ops", "inputs"), ("ops", "dims"), ("ops", "kwargs")})
#: Tables written as arrays of tables (``[[ops]]``).
ARRAY_TABLES = frozenset({("ops",), ("kernels",)})
#: Tables whose values are tables (written as headers or inline tables), besides the free ones.
TABLE_KEYS = frozenset(path for path in KEYS if path) | FREE_TABLES

#: The values a key takes from a fixed set, by key name (the same meaning in every table that has the key),
#: with the VALUE_DOCS section that documents them; booleans are ``true``/``false``.
ENUM_VALUES: dict[str, tuple[tuple[str, ...], str | None]] = {
    "dtypes": (FLOAT_NAMES, None),
    "quick_dtypes": (FLOAT_NAMES, None),
    "dtype": (ALL_NAMES, None),
    "output_dtype": (ALL_NAMES, None),
    "layouts": (LAYOUTS, "layout"),
    "distributions": (DISTRIBUTIONS, "distribution"),
    "invariants": (INVARIANTS, "invariant"),
    "framework": (FRAMEWORKS, "framework"),
    "execution_mode": (EXECUTION_MODES, "execution_mode"),
    "sign": (SIGNS, "sign"),
    "call": (CALL_STYLES, "call"),
    "reference_call": (CALL_STYLES, "call"),
    "reference_framework": (REFERENCE_FRAMEWORKS, "reference_framework"),
    "cost": (COSTS, None),
}
BOOL_KEYS = frozenset(
    {"check_nan", "check_inf", "strict", "nan_contract", "allow_external_paths", "fail_on_regression"}
)


def schema_path(keys: tuple[str, ...] | list[str]) -> tuple[str, ...] | None:
    """The schema path of a table named by its keys (``("ops", "inputs", "x")`` -> ``("ops", "inputs", "*")``);
    None for a table the schema does not know."""
    path: tuple[str, ...] = ()
    for k in keys:
        named = path in FREE_TABLES or ((*path, k) not in KEYS and (*path, "*") in KEYS)  # a name of the user's
        path = (*path, "*" if named else k)
        if path not in KEYS and path not in FREE_TABLES:
            return None
    return path


def key_doc(table: tuple[str, ...], key: str) -> str | None:
    """The doc of ``key`` in the table at schema path ``table`` (None: not a key of that table)."""
    if key not in KEYS.get(table, ()):
        return None
    return TABLES.get(table, {}).get(key) or "(not documented yet)"


#: What the user's own names in a free table stand for.
FREE_DOCS = {
    ("ops", "inputs"): "An input of the op: its shape, dtype and value domain.",
    (
        "ops",
        "dims",
    ): "A symbolic dimension: a fixed integer, a list of candidates (first = default), or { min, max, default }.",
    ("ops", "kwargs"): "A keyword argument passed to the op and the reference.",
}
