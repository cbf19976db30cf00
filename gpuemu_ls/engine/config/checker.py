"""The checker of ``gpuemu.toml``: walks a parsed document, collecting every problem with its position, then
builds the :class:`~.model.Config`. Checking never runs workspace code: modules are found on disk and read
with ``ast`` (:mod:`.modules`).
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib.util
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from .. import dtypes as dt
from ..errors import ConfigError, Problem
from ..private_files import NAME_RULE, name_problem
from . import dimexpr
from .keys import (
    _CHECK_KEYS,
    _CI_KEYS,
    _CI_QUICK_KEYS,
    _CUDA_KEYS,
    _DIM_KEYS,
    _INPUT_KEYS,
    _KERNEL_KEYS,
    _OP_KEYS,
    _POLICY_KEYS,
    _PROJECT_KEYS,
    _STORE_KEYS,
    _TOL_KEYS,
    _TOP_KEYS,
    _USER_KEYS,
    _VALIDATION_KEYS,
    CALL_STYLES,
    CONFIG_NAME,
    COSTS,
    DEFAULT_DIMS,
    DEFAULT_DISTRIBUTIONS,
    DEFAULT_DTYPES,
    DEFAULT_INPUT_SHAPE,
    DISTRIBUTIONS,
    EXECUTION_MODES,
    FRAMEWORKS,
    INVARIANTS,
    LAYOUTS,
    MAX_DIM,
    MAX_SEED,
    MAX_ULP,
    NUMERIC_BOUNDS,
    PLAN,
    PLAN_DISTRIBUTIONS,
    REFERENCE_FRAMEWORKS,
    SIGNS,
    _tname,
    check_budget,
    parse_duration,
    pinned_plan,
    pinned_seed,
)
from .model import (
    ArtifactChecksConfig,
    CIConfig,
    Config,
    CudaConfig,
    DimSpec,
    InputSpec,
    KernelConfig,
    OpConfig,
    PoliciesConfig,
    StoreConfig,
    Tolerance,
    ValidationConfig,
    is_callable_ref,
)
from .modules import _syntax_error_at, imported_packages, module_file, top_level_names
from .tomlpos import PositionIndex


class _Checker:
    """Walks the parsed document, collecting :class:`Problem` s with positions, then builds a Config."""

    def __init__(self, path: Path, index: PositionIndex, *, user: bool) -> None:
        self.path = path
        self.index = index
        self.user = user
        self.problems: list[Problem] = []
        self.warnings: list[Problem] = []

    # --- reporting -------------------------------------------------------------------------
    def problem(
        self,
        path: tuple[str | int, ...],
        message: str,
        hint: str | None = None,
        *,
        on_key: bool = False,
        warning: bool = False,
    ) -> None:
        span = self.index.key(path) if on_key else self.index.value(path)
        p = Problem(
            message,
            self.path,
            span.line if span else None,
            span.column if span else None,
            hint,
            span.end_line if span else None,
            span.end_column if span else None,
        )
        (self.warnings if warning else self.problems).append(p)

    @staticmethod
    def dotted(path: tuple[str | int, ...]) -> str:
        out = ""
        for p in path:
            out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else p)
        return out

    # --- generic checks --------------------------------------------------------------------
    def keys(self, path: tuple[str | int, ...], table: dict[str, Any], allowed: set[str]) -> None:
        for key in table:
            if key not in allowed:
                close = difflib.get_close_matches(key, sorted(allowed), n=1)
                hint = f"did you mean {close[0]!r}?" if close else f"known keys: {', '.join(sorted(allowed))}"
                where = self.dotted(path) or "the top level"
                self.problem((*path, key), f"unknown key {key!r} in {where}", hint, on_key=True)

    def table(self, path: tuple[str | int, ...], value: Any) -> dict[str, Any] | None:
        if not isinstance(value, dict):
            self.problem(path, f"{self.dotted(path)} must be a table, not {_tname(value)}")
            return None
        return value

    def typed(self, path: tuple[str | int, ...], value: Any, kind: str) -> bool:
        ok = {
            "str": isinstance(value, str),
            "bool": isinstance(value, bool),
            "int": isinstance(value, int) and not isinstance(value, bool),
            "number": isinstance(value, (int, float)) and not isinstance(value, bool),
            "list": isinstance(value, list),
        }[kind]
        if not ok:
            words = {
                "str": "a string",
                "bool": "true or false",
                "int": "an integer",
                "number": "a number",
                "list": "an array",
            }
            self.problem(path, f"{self.dotted(path)} must be {words[kind]}, not {_tname(value)}")
        elif kind == "number" and isinstance(value, float) and not math.isfinite(value):
            # nan would switch a timeout off and an inf tolerance makes a check that cannot fail
            self.problem(path, f"{self.dotted(path)} must be a finite number, got {value}")
            return False
        return ok

    def seed(self, path: tuple[str | int, ...], value: Any) -> None:
        if self.typed(path, value, "int") and not 0 <= value <= MAX_SEED:
            self.problem(
                path,
                f"{self.dotted(path)} must be in 0..{MAX_SEED}, got {value}",
                "seeds travel as JSON numbers to editors, which hold integers exactly up to 2**53 - 1",
            )

    def inplace(self, path: tuple[str | int, ...], op: dict[str, Any]) -> None:
        """``inplace``: names of the op's inputs, for an op gpuemu calls in its own process (a script gets
        copies through the protocol: what it writes never comes back)."""
        if not self.typed((*path, "inplace"), op["inplace"], "list"):
            return
        known = _input_names(op)
        for j, name in enumerate(op["inplace"]):
            if not self.typed((*path, "inplace", j), name, "str"):
                continue
            if name not in known:
                self.problem(
                    (*path, "inplace", j),
                    f"{self.dotted((*path, 'inplace', j))} names {name!r}, which is not an input of the op",
                    f"its inputs: {', '.join(known)}",
                )
        if op.get("execution_mode") == "script_based" or ("op_script" in op and "module" not in op):
            self.problem(
                (*path, "inplace"),
                f"{self.dotted((*path, 'inplace'))} needs an op gpuemu calls in-process (module = ...)",
                "a script op gets copies of its inputs through the protocol: what it writes never comes back",
            )

    def requires_grad(self, path: tuple[str | int, ...], op: dict[str, Any], raw: dict[str, Any]) -> None:
        """``requires_grad``: float inputs of a PyTorch op that it receives with ``requires_grad`` set (a kernel
        that computes its gradient only then); ``grad`` sets it on its own inputs already."""
        key = (*path, "requires_grad")
        if not self.typed(key, op["requires_grad"], "list"):
            return
        known = _input_names(op)
        declared = op.get("inputs") if isinstance(op.get("inputs"), dict) else {}
        for j, name in enumerate(op["requires_grad"]):
            if not self.typed((*key, j), name, "str"):
                continue
            spec = declared.get(name) if isinstance(declared.get(name), dict) else {}
            if name not in known:
                self.problem((*key, j), f"{self.dotted((*key, j))} names {name!r}, which is not an input of the op")
            elif isinstance(spec.get("dtype"), str) and not dt.is_float(spec["dtype"]):
                self.problem((*key, j), f"input {name!r} is {spec['dtype']}: only float tensors can require grad")
        project = raw.get("project") if isinstance(raw.get("project"), dict) else {}
        if op.get("framework", project.get("framework", "numpy")) != "pytorch":
            self.problem(key, f'{self.dotted(key)} needs framework = "pytorch"')

    def outputs(self, path: tuple[str | int, ...], op: dict[str, Any]) -> None:
        """``outputs``: distinct names for the op's positional outputs, none a name gpuemu gives another output
        (``grad_<input>`` of backward validation, an input written in place)."""
        key = (*path, "outputs")
        if not self.typed(key, op["outputs"], "list"):
            return
        if not op["outputs"]:
            self.problem(key, f"{self.dotted(key)} is empty", 'name the outputs in order: outputs = ["loss", "dx"]')
        grads = op.get("grad") if isinstance(op.get("grad"), list) else []
        written = op.get("inplace") if isinstance(op.get("inplace"), list) else []
        taken = {f"grad_{g}" for g in grads if isinstance(g, str)} | {n for n in written if isinstance(n, str)}
        seen: set[str] = set()
        for j, name in enumerate(op["outputs"]):
            if not self.typed((*key, j), name, "str"):
                continue
            if not name.isidentifier():
                self.problem((*key, j), f"output name {name!r} must be an identifier (letters, digits, _)")
            elif name in seen:
                self.problem((*key, j), f"output name {name!r} is given twice")
            elif name in taken:
                self.problem((*key, j), f"output name {name!r} is already an output gpuemu names (grad or inplace)")
            seen.add(name)

    def backward(self, path: tuple[str | int, ...], op: dict[str, Any], raw: dict[str, Any]) -> None:
        """``grad``, ``reference_framework`` and ``reference_grad``: what backward validation needs to run
        (docs/first-op.md, "Gradients"): differentiable float inputs of an in-process PyTorch op, and a
        reference whose gradients are known (its own autograd, or ``reference_grad``)."""
        if "reference_framework" in op:
            self.choice((*path, "reference_framework"), op["reference_framework"], REFERENCE_FRAMEWORKS, "framework")
            if isinstance(op.get("reference"), str) and not is_callable_ref(op["reference"]):
                self.problem(
                    (*path, "reference_framework"),
                    f'{self.dotted((*path, "reference_framework"))} needs a reference = "module:function"',
                    "a script reference reads JSON: it has no framework of its own",
                )
        if "reference_grad" in op and self.typed((*path, "reference_grad"), op["reference_grad"], "str"):
            self.callable_ref((*path, "reference_grad"), op["reference_grad"], "reference_grad")
            if "grad" not in op:
                self.problem((*path, "reference_grad"), "reference_grad is set but grad is not", 'add grad = ["x"]')
        if "grad" not in op or not self.typed((*path, "grad"), op["grad"], "list"):
            return
        key = (*path, "grad")
        known = _input_names(op)
        declared = op.get("inputs") if isinstance(op.get("inputs"), dict) else {}
        inplace = op.get("inplace") if isinstance(op.get("inplace"), list) else []
        for j, name in enumerate(op["grad"]):
            if not self.typed((*key, j), name, "str"):
                continue
            spec = declared.get(name) if isinstance(declared.get(name), dict) else {}
            if name not in known:
                self.problem(
                    (*key, j),
                    f"{self.dotted((*key, j))} names {name!r}, which is not an input of the op",
                    f"its inputs: {', '.join(known)}",
                )
            elif isinstance(spec.get("dtype"), str) and not dt.is_float(spec["dtype"]):
                self.problem((*key, j), f"input {name!r} is {spec['dtype']}: only float inputs have a gradient")
            elif name in inplace:
                self.problem(
                    (*key, j),
                    f"input {name!r} is written in place (inplace) and cannot also be differentiated",
                    "autograd forbids writing into a leaf that requires grad",
                )
        if not op["grad"]:
            self.problem(key, f"{self.dotted(key)} is empty", 'name the inputs to differentiate: grad = ["x"]')
        if op.get("execution_mode") == "script_based" or ("op_script" in op and "module" not in op):
            self.problem(
                key,
                f"{self.dotted(key)} needs an op gpuemu calls in-process (module = ...)",
                "a script's outputs are JSON: they carry no autograd graph",
            )
        project = raw.get("project") if isinstance(raw.get("project"), dict) else {}
        framework = op.get("framework", project.get("framework", "numpy"))
        if framework not in ("pytorch", "jax"):
            self.problem(
                key,
                f'{self.dotted(key)} needs framework = "pytorch" or "jax" (the op runs forward and backward '
                f"under torch.autograd or jax.vjp); this op's framework is {framework!r}",
            )
        reference = op.get("reference")
        if "reference_grad" not in op and isinstance(reference, str) and not is_callable_ref(reference):
            self.problem(
                key,
                f"{self.dotted(key)} needs a reference gpuemu calls in-process (module:function) to differentiate",
                "a script reference's gradients are judged by finite differences of a module:function reference "
                'only: point reference at one, or set reference_grad = "module:function"',
            )

    def pin(self, path: tuple[str | int, ...], value: Any) -> None:
        """A pinned seed: an integer (a case of plan 1) or ``{ seed = N, plan = P }``."""
        if not isinstance(value, dict):
            self.seed(path, value)
            return
        for key in value:
            if key not in ("seed", "plan"):
                self.problem((*path, key), f"unknown key {key!r} in {self.dotted(path)}", "a pin has seed and plan")
        if "seed" not in value:
            self.problem(path, f"{self.dotted(path)} needs a seed: {{ seed = N, plan = {PLAN} }}")
        else:
            self.seed((*path, "seed"), value["seed"])
        plan = value.get("plan", 1)
        if self.typed((*path, "plan"), plan, "int") and plan not in PLAN_DISTRIBUTIONS:
            self.problem(
                (*path, "plan"),
                f"{self.dotted((*path, 'plan'))} must be one of {sorted(PLAN_DISTRIBUTIONS)}, got {plan}",
                "the plan version a seed was drawn under (docs/verdicts.md, plan versions)",
            )

    def str_list(
        self,
        path: tuple[str | int, ...],
        value: Any,
        choices: tuple[str, ...] | None = None,
        what: str = "value",
        allow_empty: bool = False,
    ) -> None:
        if not self.typed(path, value, "list"):
            return
        if not value and not allow_empty:
            self.problem(path, f"{self.dotted(path)} must not be empty")
        seen: set[str] = set()
        for i, item in enumerate(value):
            if not self.typed((*path, i), item, "str"):
                continue
            if choices is not None and item not in choices:
                close = difflib.get_close_matches(item, choices, n=1)
                hint = f"did you mean {close[0]!r}?" if close else f"valid: {', '.join(choices)}"
                self.problem((*path, i), f"unknown {what} {item!r}", hint)
            if item in seen:
                self.problem((*path, i), f"{what} {item!r} is listed twice")
            seen.add(item)

    def nonneg(self, path: tuple[str | int, ...], value: Any, kind: str = "number", positive: bool = False) -> None:
        """A number >= 0 (> 0 with ``positive``) within the key's entry in NUMERIC_BOUNDS, if it has one."""
        if not self.typed(path, value, kind):
            return
        if value <= 0 if positive else value < 0:
            self.problem(path, f"{self.dotted(path)} must be {'> 0' if positive else '>= 0'}, got {value}")
            return
        key = path[-1] if isinstance(path[-1], str) else ""
        lo, hi = NUMERIC_BOUNDS.get(key, (0, MAX_DIM if kind == "int" else math.inf))
        if not lo <= value <= hi:
            self.problem(path, f"{self.dotted(path)} must be in [{_num(lo)}, {_num(hi)}], got {value}")

    def budget(self, path: tuple[str | int, ...], value: Any) -> None:
        """A duration (``"90s"``, ``"5m"``, seconds as a number, or ``"off"``) within the budget bounds."""
        try:
            why = check_budget(parse_duration(value))
        except ValueError as exc:
            why = str(exc)
        if why:
            self.problem(path, f"{self.dotted(path)}: {why}", 'e.g. budget = "90s", "5m", 300 or "off"')

    def tile_hint(self, path: tuple[str | int, ...], spec: dict[str, Any], name: str) -> None:
        """``tile``/``block``: a size (or sizes) >= 1 the op tiles this dim by; one of the two keys."""
        keys = [k for k in ("tile", "block") if k in spec]
        if len(keys) == 2:
            self.problem((*path, "block"), f"dim {name}: tile and block mean the same; keep one", on_key=True)
        for k in keys:
            v = spec[k]
            items = v if isinstance(v, list) else [v]
            if isinstance(v, list) and not v:
                self.problem((*path, k), f"dim {name}: {k} lists no sizes")
            for j, t in enumerate(items):
                p = (*path, k, j) if isinstance(v, list) else (*path, k)
                if self.typed(p, t, "int") and not 1 <= t <= MAX_DIM:
                    self.problem(p, f"dim {name}: a {k} size must be in 1..{MAX_DIM}, got {t}")

    def tolerances(self, path: tuple[str | int, ...], value: Any) -> None:
        tbl = self.table(path, value)
        if tbl is None:
            return
        for name, tol in tbl.items():
            if name not in dt.FLOAT_NAMES:
                close = difflib.get_close_matches(name, dt.FLOAT_NAMES, n=1)
                self.problem(
                    (*path, name),
                    f"tolerances are per float dtype; {name!r} is not one",
                    f"did you mean {close[0]!r}?" if close else f"valid: {', '.join(dt.FLOAT_NAMES)}",
                    on_key=True,
                )
                continue
            t = self.table((*path, name), tol)
            if t is None:
                continue
            self.keys((*path, name), t, _TOL_KEYS)
            if not t:
                self.problem(
                    (*path, name), "a tolerance needs atol, rtol and/or ulp", "e.g. { atol = 1e-4, rtol = 1e-5 }"
                )
            for k in ("atol", "rtol"):
                if k in t:
                    self.nonneg((*path, name, k), t[k])
            if "ulp" in t and self.typed((*path, name, "ulp"), t["ulp"], "int") and not 0 <= t["ulp"] <= MAX_ULP:
                self.problem(
                    (*path, name, "ulp"),
                    f"ulp must be an integer in [0, {MAX_ULP}], got {t['ulp']}",
                    "ulp = 0 means bit-exact after the output rounding",
                )

    def domain(self, path: tuple[str | int, ...], tbl: dict[str, Any], dims: set[str] | None) -> None:
        """``scale`` (> 0), ``offset``, ``sign`` and a float ``range`` at [validation] or [[ops]]; ``dims``:
        the dim names a range bound may use (None under [validation], where bounds are numbers)."""
        if "scale" in tbl:
            self.nonneg((*path, "scale"), tbl["scale"], positive=True)
        if "offset" in tbl:
            self.typed((*path, "offset"), tbl["offset"], "number")
        if "sign" in tbl:
            self.choice((*path, "sign"), tbl["sign"], SIGNS, "sign")
        if "range" in tbl:
            self.value_range((*path, "range"), tbl["range"], dims)

    def value_range(self, path: tuple[str | int, ...], r: Any, dims: set[str] | None) -> set[str]:
        """A ``range = [low, high]``: two finite numbers (or dim names where ``dims`` allows), low < high.

        Returns the dim names it uses."""
        used: set[str] = set()
        if not isinstance(r, list) or len(r) != 2:
            self.problem(path, "range is [low, high] with two bounds", 'e.g. range = [-1.0, 1.0] or [0, "C"]')
            return used
        for j, b in enumerate(r):
            if isinstance(b, str):
                if dims is None:
                    self.problem((*path, j), f"{self.dotted(path)} bounds are numbers", "dims belong to an op")
                    continue
                used.add(b)
                if b not in dims:
                    self.problem((*path, j), f"dim {b!r} is used but not declared in [ops.dims]")
            elif isinstance(b, bool) or not isinstance(b, (int, float)):
                self.problem((*path, j), "a range bound is a number or a dim name")
            elif not math.isfinite(b):
                self.problem(
                    (*path, j),
                    f"a range bound must be a finite number, got {b}",
                    'for one-sided values use sign = "positive" or "negative"',
                )
        numeric = all(isinstance(b, (int, float)) and not isinstance(b, bool) and math.isfinite(b) for b in r)
        if numeric and r[0] >= r[1]:
            self.problem(path, f"empty range [{r[0]}, {r[1]}]", "low must be below high")
        return used

    # --- the document ----------------------------------------------------------------------
    def check_document(self, raw: dict[str, Any]) -> None:
        self.keys((), raw, _USER_KEYS if self.user else _TOP_KEYS)
        handlers: dict[str, Callable[[tuple[str | int, ...], Any], None]] = {
            "project": self.check_project,
            "validation": self.check_validation,
            "policies": self.check_policies,
            "ci": self.check_ci,
            "cuda": self.check_cuda,
            "store": self.check_store,
        }
        for key, handler in handlers.items():
            if key in raw:
                handler((key,), raw[key])
        if self.user:
            return
        if "ops" in raw:
            self.check_ops(raw["ops"], raw)
        if "kernels" in raw:
            self.check_kernels(raw["kernels"])
        if not raw.get("ops") and not raw.get("kernels"):
            self.warnings.append(
                Problem(
                    "no [[ops]] or [[kernels]]: nothing to validate",
                    self.path,
                    1,
                    1,
                    "add an [[ops]] entry; `gpuemu init` writes a working example",
                )
            )

    def check_project(self, path: tuple[str | int, ...], value: Any) -> None:
        tbl = self.table(path, value)
        if tbl is None:
            return
        self.keys(path, tbl, _PROJECT_KEYS)
        for k in ("name", "description"):
            if k in tbl:
                self.typed((*path, k), tbl[k], "str")
        if "framework" in tbl:
            self.choice((*path, "framework"), tbl["framework"], FRAMEWORKS, "framework")
        if "allow_external_paths" in tbl:
            self.typed((*path, "allow_external_paths"), tbl["allow_external_paths"], "bool")

    def choice(self, path: tuple[str | int, ...], value: Any, choices: tuple[str, ...], what: str) -> None:
        if self.typed(path, value, "str") and value not in choices:
            close = difflib.get_close_matches(value, choices, n=1)
            self.problem(
                path,
                f"unknown {what} {value!r}",
                f"did you mean {close[0]!r}?" if close else f"valid: {', '.join(choices)}",
            )

    def check_validation(self, path: tuple[str | int, ...], value: Any) -> None:
        tbl = self.table(path, value)
        if tbl is None:
            return
        self.keys(path, tbl, _VALIDATION_KEYS)
        if "dtypes" in tbl:
            self.str_list((*path, "dtypes"), tbl["dtypes"], dt.FLOAT_NAMES, "dtype")
        for k in ("check_nan", "check_inf", "strict"):
            if k in tbl:
                self.typed((*path, k), tbl[k], "bool")
        if "seed" in tbl:
            self.seed((*path, "seed"), tbl["seed"])
        if "tolerances" in tbl:
            self.tolerances((*path, "tolerances"), tbl["tolerances"])
        if "iterations" in tbl:
            self.nonneg((*path, "iterations"), tbl["iterations"], "int", positive=True)
        if "timeout" in tbl:
            self.nonneg((*path, "timeout"), tbl["timeout"], positive=True)
        if "distributions" in tbl:
            self.str_list((*path, "distributions"), tbl["distributions"], DISTRIBUTIONS, "distribution")
        self.domain(path, tbl, None)
        for k in ("max_failure_snapshots", "memory_limit_mb"):
            if k in tbl:
                self.nonneg((*path, k), tbl[k], "int", positive=k == "memory_limit_mb")

    def check_policies(self, path: tuple[str | int, ...], value: Any) -> None:
        tbl = self.table(path, value)
        if tbl is None:
            return
        self.keys(path, tbl, _POLICY_KEYS)
        if "fail_on_regression" in tbl:
            self.typed((*path, "fail_on_regression"), tbl["fail_on_regression"], "bool")
        if "warn_threshold" in tbl:
            v = tbl["warn_threshold"]
            if self.typed((*path, "warn_threshold"), v, "number") and not 0 < v <= 1:
                self.problem((*path, "warn_threshold"), f"warn_threshold is a fraction in (0, 1], got {v}")

    def check_ci(self, path: tuple[str | int, ...], value: Any) -> None:
        tbl = self.table(path, value)
        if tbl is None:
            return
        self.keys(path, tbl, _CI_KEYS)
        if "quick_dtypes" in tbl:
            self.str_list((*path, "quick_dtypes"), tbl["quick_dtypes"], dt.FLOAT_NAMES, "dtype")
        if "thorough_timeout" in tbl:
            self.nonneg((*path, "thorough_timeout"), tbl["thorough_timeout"], positive=True)
        for k in ("parallel_jobs", "fuzz_iterations"):
            if k in tbl and not (k == "parallel_jobs" and tbl[k] == "auto"):
                self.nonneg((*path, k), tbl[k], "int", positive=True)
        if "regression_threshold" in tbl:
            self.nonneg((*path, "regression_threshold"), tbl["regression_threshold"])
        if "budget" in tbl:
            self.budget((*path, "budget"), tbl["budget"])
        if "quick" in tbl:
            q = self.table((*path, "quick"), tbl["quick"])
            if q is not None:
                self.keys((*path, "quick"), q, _CI_QUICK_KEYS)
                if "iterations" in q:
                    self.nonneg((*path, "quick", "iterations"), q["iterations"], "int", positive=True)
                if "dtypes" in q:
                    self.str_list((*path, "quick", "dtypes"), q["dtypes"], dt.FLOAT_NAMES, "dtype")
                if "budget" in q:
                    self.budget((*path, "quick", "budget"), q["budget"])

    def check_store(self, path: tuple[str | int, ...], value: Any) -> None:
        tbl = self.table(path, value)
        if tbl is None:
            return
        self.keys(path, tbl, _STORE_KEYS)
        if "keep_runs" in tbl and tbl["keep_runs"] != "all":
            v = tbl["keep_runs"]
            if isinstance(v, str):
                self.problem((*path, "keep_runs"), f'keep_runs is a number of runs or "all", got {v!r}')
            else:
                self.nonneg((*path, "keep_runs"), v, "int", positive=True)
        if "keep_failures_days" in tbl and tbl["keep_failures_days"] != "all":
            v, where = tbl["keep_failures_days"], (*path, "keep_failures_days")
            if isinstance(v, str):
                self.problem(where, f'keep_failures_days is a number of days or "all", got {v!r}')
            else:
                self.nonneg(where, v)

    def check_cuda(self, path: tuple[str | int, ...], value: Any) -> None:
        tbl = self.table(path, value)
        if tbl is None:
            return
        self.keys(path, tbl, _CUDA_KEYS)
        for k in ("nvcc", "arch"):
            if k in tbl:
                self.typed((*path, k), tbl[k], "str")
        self.compiler_args(path, tbl)
        if "artifact_checks" in tbl:
            self.artifact_checks((*path, "artifact_checks"), tbl["artifact_checks"])

    def compiler_args(self, path: tuple[str | int, ...], tbl: dict[str, Any]) -> None:
        """flags, include_dirs, defines: strings; flags and defines free of shell characters (nvcc's
        driver runs through /bin/sh, so ``defines = ["X=$(cmd)"]`` would run cmd)."""
        from ..cuda.compile import SHELL_SAFE_TEXT, shell_safe

        for key in ("flags", "include_dirs", "defines"):
            if key not in tbl:
                continue
            self.str_list((*path, key), tbl[key], what=key[:-1], allow_empty=True)
            if key == "include_dirs" or not isinstance(tbl[key], list):
                continue
            for i, item in enumerate(tbl[key]):
                if isinstance(item, str) and not shell_safe(item):
                    self.problem(
                        (*path, key, i),
                        f"{key[:-1]} {item!r} holds characters a shell would interpret",
                        f"nvcc runs its phases through /bin/sh; use only {SHELL_SAFE_TEXT}",
                    )

    def artifact_checks(self, path: tuple[str | int, ...], value: Any) -> None:
        tbl = self.table(path, value)
        if tbl is None:
            return
        self.keys(path, tbl, _CHECK_KEYS)
        for k in ("max_registers", "max_spills", "max_local_memory_bytes", "max_shared_memory_bytes"):
            if k in tbl:
                self.nonneg((*path, k), tbl[k], "int")
        for k in ("forbidden_instructions", "required_instructions"):
            if k in tbl:
                self.str_list((*path, k), tbl[k], what="instruction pattern", allow_empty=True)

    # --- ops ---------------------------------------------------------------------------------
    def check_ops(self, value: Any, raw: dict[str, Any]) -> None:
        if not isinstance(value, list):
            self.problem(("ops",), "ops must be an array of tables: write each op as [[ops]]")
            return
        names: dict[str, tuple[int, str]] = {}
        for i, op in enumerate(value):
            path: tuple[str | int, ...] = ("ops", i)
            tbl = self.table(path, op)
            if tbl is None:
                continue
            self.keys(path, tbl, _OP_KEYS)
            name = tbl.get("name")
            if "name" not in tbl:
                self.problem(path, "[[ops]] entry has no name", 'add name = "my_op"', on_key=True)
            elif self.typed((*path, "name"), name, "str"):
                self.unique_name(path, "op", name, names)
            self.check_op(path, tbl, raw)

    def unique_name(self, path: tuple[str | int, ...], kind: str, name: str, seen: dict[str, tuple[int, str]]) -> None:
        """Names become file names (reproductions, inputs): a safe character set, unique ignoring case
        (``Double`` and ``double`` share one file on macOS and Windows)."""
        why = name_problem(name)
        if why:
            self.problem((*path, "name"), f"{kind} name {name!r} cannot be used: {why}", f"use {NAME_RULE}")
            return
        key = name.casefold()
        if key in seen:
            index, other = seen[key]
            first = self.index.value((path[0], index, "name"))
            case = "" if other == name else f" (the same as {other!r} but for case)"
            self.problem(
                (*path, "name"),
                f"duplicate {kind} name {name!r}{case}",
                f"first defined at line {first.line}" if first else None,
            )
        else:
            seen[key] = (int(path[1]), name)

    def check_op(self, path: tuple[str | int, ...], op: dict[str, Any], raw: dict[str, Any]) -> None:
        for k in ("module", "reference", "op_script", "output_dtype", "description"):
            if k in op:
                self.typed((*path, k), op[k], "str")
        mode = op.get("execution_mode")
        if mode is not None:
            self.choice((*path, "execution_mode"), mode, EXECUTION_MODES, "execution_mode")
        for k in ("call", "reference_call"):
            if k in op:
                self.choice((*path, k), op[k], CALL_STYLES, k)
        if isinstance(op.get("module"), str):
            self.callable_ref((*path, "module"), op["module"], "module")
        if isinstance(op.get("op_script"), str):
            self.script_ref((*path, "op_script"), op["op_script"])
        ref = op.get("reference")
        if "reference" not in op:
            self.problem(
                path,
                f"op {op.get('name', '?')!r} has no reference",
                'add reference = "refs/my_ref.py" (a script) or "module:function" (float64, in process)',
                on_key=True,
            )
        elif isinstance(ref, str):
            if is_callable_ref(ref):
                self.callable_ref((*path, "reference"), ref, "reference")
            else:
                self.script_ref((*path, "reference"), ref)
        if mode == "script_based" and "op_script" not in op:
            self.problem(
                (*path, "execution_mode"),
                "execution_mode = 'script_based' needs op_script",
                'add op_script = "ops/my_op.py" (reads the inputs as JSON on stdin)',
            )
        if mode == "in_process" and "module" not in op:
            self.problem(
                (*path, "execution_mode"), "execution_mode = 'in_process' needs module", 'add module = "file:function"'
            )
        if mode in (None, "in_process", "script_based") and "module" not in op and "op_script" not in op:
            self.problem(
                path,
                f"op {op.get('name', '?')!r} has nothing to run: neither module nor op_script",
                'add module = "file:function" or op_script = "ops/my_op.py"',
                on_key=True,
            )
        if "module" in op and "op_script" in op and mode is None:
            self.problem(
                (*path, "op_script"),
                "both module and op_script are set; which one is the op?",
                "set execution_mode = 'script_based' or 'in_process'",
            )
        if "framework" in op:
            self.choice((*path, "framework"), op["framework"], FRAMEWORKS, "framework")
        if "dtypes" in op:
            self.str_list((*path, "dtypes"), op["dtypes"], dt.FLOAT_NAMES, "dtype")
        if "layouts" in op:
            self.str_list((*path, "layouts"), op["layouts"], LAYOUTS, "layout")
        if "distributions" in op:
            self.str_list((*path, "distributions"), op["distributions"], DISTRIBUTIONS, "distribution")
        if "invariants" in op:
            self.str_list((*path, "invariants"), op["invariants"], INVARIANTS, "invariant", allow_empty=True)
        if "input_names" in op:
            self.str_list((*path, "input_names"), op["input_names"], what="input name")
        if "tolerances" in op:
            self.tolerances((*path, "tolerances"), op["tolerances"])
        if isinstance(op.get("output_dtype"), str) and op["output_dtype"] not in dt.ALL_NAMES:
            self.problem(
                (*path, "output_dtype"), f"unknown dtype {op['output_dtype']!r}", f"valid: {', '.join(dt.ALL_NAMES)}"
            )
        if "timeout" in op:
            self.nonneg((*path, "timeout"), op["timeout"], positive=True)
        if "iterations" in op:
            self.nonneg((*path, "iterations"), op["iterations"], "int", positive=True)
        if "seeds" in op and self.typed((*path, "seeds"), op["seeds"], "list"):
            for j, s in enumerate(op["seeds"]):
                self.pin((*path, "seeds", j), s)
        if "kwargs" in op:
            self.table((*path, "kwargs"), op["kwargs"])
        for k in ("nan_contract", "strict"):
            if k in op:
                self.typed((*path, k), op[k], "bool")
        if "inplace" in op:
            self.inplace(path, op)
        self.backward(path, op, raw)
        if "outputs" in op:
            self.outputs(path, op)
        if "requires_grad" in op:
            self.requires_grad(path, op, raw)
        if "budget" in op:
            self.budget((*path, "budget"), op["budget"])
        if "cost" in op:
            self.choice((*path, "cost"), op["cost"], COSTS, "cost")
        dims = self.check_dims((*path, "dims"), op.get("dims", {}))
        self.domain(path, op, set(dims) | (set(DEFAULT_DIMS) if "inputs" not in op else set()))
        self.check_inputs(path, op, dims)

    def check_dims(self, path: tuple[str | int, ...], value: Any) -> dict[str, Any]:
        tbl = self.table(path, value)
        if tbl is None:
            return {}
        for name, spec in tbl.items():
            p = (*path, name)
            if isinstance(spec, dict):
                self.tile_hint(p, spec, name)
                if "also" in spec and self.typed((*p, "also"), spec["also"], "list"):
                    if not spec["also"]:
                        self.problem((*p, "also"), f"dim {name}: also is empty", "e.g. also = [32768]")
                    for j, v in enumerate(spec["also"]):
                        self.nonneg((*p, "also", j), v, "int")
            if isinstance(spec, bool) or not isinstance(spec, (int, list, dict)):
                self.problem(
                    p,
                    f"dim {name} must be an integer, a list of candidates or {{min, max, default}}",
                    f"e.g. {name} = {{ min = 1, max = 4096, default = 1024 }}",
                )
            elif isinstance(spec, int):
                self.nonneg(p, spec, "int")
            elif isinstance(spec, list):
                if not spec:
                    self.problem(p, f"dim {name} has no candidates")
                for j, c in enumerate(spec):
                    self.nonneg((*p, j), c, "int")
            elif "candidates" in spec:
                self.keys(p, spec, _DIM_KEYS)
                cands = spec["candidates"]
                for k in ("min", "max"):
                    if k in spec:
                        self.problem((*p, k), f"dim {name}: candidates and {k} do not mix", "keep one of the two")
                if self.typed((*p, "candidates"), cands, "list"):
                    if not cands:
                        self.problem((*p, "candidates"), f"dim {name} has no candidates")
                    for j, c in enumerate(cands):
                        self.nonneg((*p, "candidates", j), c, "int")
                    de = spec.get("default")
                    if "default" in spec and self.typed((*p, "default"), de, "int") and de not in cands:
                        self.problem((*p, "default"), f"dim {name}: default {de} is not one of the candidates {cands}")
            else:
                self.keys(p, spec, _DIM_KEYS)
                for k in ("min", "max"):
                    if k not in spec:
                        self.problem(p, f"dim {name} needs {k}", f"e.g. {name} = {{ min = 1, max = 4096 }}")
                for k in ("min", "max", "default"):
                    if k in spec:
                        self.nonneg((*p, k), spec[k], "int")
                lo, hi, de = spec.get("min"), spec.get("max"), spec.get("default")
                if _ints(lo, hi) and lo > hi:
                    self.problem((*p, "max"), f"dim {name}: max ({hi}) < min ({lo})")
                if _ints(lo, hi, de) and not lo <= de <= hi:
                    self.problem((*p, "default"), f"dim {name}: default {de} is outside [{lo}, {hi}]")
        return tbl

    def sentinels(self, path: tuple[str | int, ...], value: Any, dtype: Any) -> None:
        """``sentinels = { value = -100, share = 0.25 }`` (or a list of such): special values of an integer input
        (an ignore_index) and the share of its elements that hold each."""
        if not (isinstance(dtype, str) and dtype in dt.ALL_NAMES and not dt.is_float(dtype)):
            self.problem(path, 'sentinels need an integer input (dtype = "int64", ...)', "floats draw distributions")
            return
        tables = [value] if isinstance(value, dict) else value if isinstance(value, list) else None
        if tables is None or not tables:
            self.problem(path, f"{self.dotted(path)} must be {{ value = -100, share = 0.25 }} or a list of such tables")
            return
        total = 0.0
        for j, t in enumerate(tables):
            p = path if isinstance(value, dict) else (*path, j)
            if not isinstance(t, dict) or set(t) != {"value", "share"}:
                self.problem(p, f"{self.dotted(p)} must have exactly value and share", "{ value = -100, share = 0.25 }")
                continue
            if self.typed((*p, "value"), t["value"], "int"):
                info = np.iinfo(dt.numpy_dtype(dtype))
                if not info.min <= t["value"] <= info.max:
                    self.problem((*p, "value"), f"sentinel {t['value']} does not fit {dtype}")
            if self.typed((*p, "share"), t["share"], "number"):
                if not 0 < t["share"] <= 1:
                    self.problem((*p, "share"), f"a share is in (0, 1], got {t['share']}")
                else:
                    total += t["share"]
        if total > 1 + 1e-9:
            self.problem(path, f"the sentinels' shares add up to {total:g}, more than 1")

    def shape_entry(self, path: tuple[str | int, ...], entry: str, dims: dict[str, Any], used: set[str]) -> None:
        """A shape entry that is a dim name or an expression of dims (``"2*D2"``, config/dimexpr.py)."""
        try:
            named = dimexpr.names(entry)
        except dimexpr.DimExprError as exc:
            self.problem(path, str(exc), 'a shape entry is a dim name, an integer, or e.g. "2*D" or "H*D"')
            return
        used.update(named)
        for d in sorted(named):
            if d not in dims:
                self.problem(
                    path,
                    f"dim {d!r} is used but not declared in [ops.dims]",
                    f"add {d} = {{ min = 1, max = 1024, default = 64 }} under [ops.dims]",
                )
        if not dimexpr.is_name(entry):
            bounds = {d: b for d in named if (b := _dim_bounds(dims.get(d))) is not None}
            why = dimexpr.problem(entry, bounds)
            if why:
                self.problem(path, why)

    def check_inputs(self, path: tuple[str | int, ...], op: dict[str, Any], dims: dict[str, Any]) -> None:
        inputs = op.get("inputs")
        used: set[str] = set()
        if isinstance(op.get("range"), list):  # the op's float range may name dims
            used.update(b for b in op["range"] if isinstance(b, str))
        if inputs is None:
            for d in DEFAULT_INPUT_SHAPE:
                used.add(d)
            missing = [d for d in DEFAULT_INPUT_SHAPE if d not in dims]
            if missing and dims:
                self.problem(
                    (*path, "dims"),
                    f"without [ops.inputs], inputs have shape {list(DEFAULT_INPUT_SHAPE)}; "
                    f"dims {', '.join(missing)} are then built in",
                    warning=True,
                )
        else:
            tbl = self.table((*path, "inputs"), inputs)
            if tbl is None:
                return
            if not tbl:
                self.problem((*path, "inputs"), "an op needs at least one input")
            for name, spec in tbl.items():
                p = (*path, "inputs", name)
                s = self.table(p, spec)
                if s is None:
                    continue
                self.keys(p, s, _INPUT_KEYS)
                if "shape" not in s:
                    self.problem(p, f"input {name} has no shape", 'e.g. shape = ["B", "N"]', on_key=True)
                elif self.typed((*p, "shape"), s["shape"], "list"):
                    for j, d in enumerate(s["shape"]):
                        if isinstance(d, str):
                            self.shape_entry((*p, "shape", j), d, dims, used)
                        elif isinstance(d, bool) or not isinstance(d, int) or d < 0:
                            self.problem((*p, "shape", j), "a shape entry is a dim name or an integer >= 0")
                if "dtype" in s and self.typed((*p, "dtype"), s["dtype"], "str") and s["dtype"] not in dt.ALL_NAMES:
                    close = difflib.get_close_matches(s["dtype"], dt.ALL_NAMES, n=1)
                    self.problem(
                        (*p, "dtype"),
                        f"unknown dtype {s['dtype']!r}",
                        f"did you mean {close[0]!r}?" if close else f"valid: {', '.join(dt.ALL_NAMES)}",
                    )
                if "distributions" in s:
                    self.str_list((*p, "distributions"), s["distributions"], DISTRIBUTIONS, "distribution")
                if "sentinels" in s:
                    self.sentinels((*p, "sentinels"), s["sentinels"], s.get("dtype"))
                if "range" in s:
                    used |= self.value_range((*p, "range"), s["range"], set(dims))
                self.domain(p, {k: v for k, v in s.items() if k != "range"}, set(dims))
                fixed = s.get("dtype")
                if isinstance(fixed, str) and fixed in dt.ALL_NAMES and not dt.is_float(fixed):
                    for k in ("scale", "offset", "sign"):
                        if k in s:
                            self.problem(
                                (*p, k),
                                f"{k} applies to float inputs; input {name} is {fixed}",
                                "an integer input draws uniformly from its range = [low, high)",
                                on_key=True,
                            )
            names = op.get("input_names")
            if isinstance(names, list) and all(isinstance(n, str) for n in names) and set(names) != set(tbl):
                self.problem(
                    (*path, "input_names"),
                    f"input_names {names} do not match the [ops.inputs] tables {list(tbl)}",
                    "name the same inputs in both, or drop input_names (order = table order)",
                )
        for name in dims:
            if name not in used:
                self.problem(
                    (*path, "dims", name),
                    f"dim {name!r} is declared but no input uses it",
                    "use it in a shape or range, or remove it",
                    on_key=True,
                    warning=True,
                )

    def callable_ref(self, path: tuple[str | int, ...], ref: str, what: str) -> None:
        if ":" not in ref:
            self.problem(path, f"{what} {ref!r} must be 'module:function'", f'e.g. "{ref}:my_function"')
            return
        mod, attr = ref.split(":", 1)
        func = attr.split(".", 1)[0]  # "mod:Class.apply" names an attribute of a top-level name
        if not mod or not attr or not all(p.isidentifier() for p in (*mod.split("."), *attr.split("."))):
            self.problem(path, f"{what} {ref!r} is not 'module:function'", 'e.g. "softmax:softmax_kernel"')
            return
        root = self.path.parent
        file = module_file(root, mod)
        if file is None:
            top = mod.split(".")[0]
            in_workspace = root.joinpath(top).is_dir() or root.joinpath(f"{top}.py").is_file()
            if not in_workspace and importlib.util.find_spec(top) is not None:
                return  # an installed package (pkg.sub:fn too): the rest is checked when it is imported
            self.problem(
                path,
                f"module {mod!r} not found in the workspace ({root})",
                f"expected {mod.replace('.', '/')}.py next to {CONFIG_NAME}",
            )
            return
        found = top_level_names(file)
        if found is None:
            where = _syntax_error_at(file)
            self.problem(
                path,
                f"cannot parse {file.name} to find {func!r}: syntax error at {where}",
                f"fix the Python syntax error at {where} first",
            )
        elif func not in found and "?" in found and "*" not in found and "__getattr__" not in found:
            self.problem(
                path,
                f"{file.name} binds no {func!r} that a static read can see; it makes names at import time "
                f"(line {found['?']}), so {func!r} is looked up when the module is imported",
                warning=True,
            )
        elif func not in found and "*" not in found and "__getattr__" not in found:
            close = difflib.get_close_matches(func, sorted(found), n=1)
            self.problem(
                path,
                f"{file.name} defines no {func!r}",
                f"did you mean {close[0]!r}?" if close else f"define def {func}(...) in {file.name}",
            )

    def script_ref(self, path: tuple[str | int, ...], rel: str) -> None:
        target = (self.path.parent / rel).resolve()
        if not target.is_file():
            self.problem(path, f"script {rel!r} not found", f"looked for {target}")
        elif target.suffix != ".py":
            self.problem(path, f"script {rel!r} is not a .py file", "scripts run with the Python interpreter")

    # --- kernels -----------------------------------------------------------------------------
    def check_kernels(self, value: Any) -> None:
        if not isinstance(value, list):
            self.problem(("kernels",), "kernels must be an array of tables: write each kernel as [[kernels]]")
            return
        names: dict[str, tuple[int, str]] = {}
        for i, k in enumerate(value):
            path: tuple[str | int, ...] = ("kernels", i)
            tbl = self.table(path, k)
            if tbl is None:
                continue
            self.keys(path, tbl, _KERNEL_KEYS)
            name = tbl.get("name")
            if "name" not in tbl:
                self.problem(path, "[[kernels]] entry has no name", 'add name = "my_kernel"', on_key=True)
            elif self.typed((*path, "name"), name, "str"):
                self.unique_name(path, "kernel", name, names)
            if "source" not in tbl:
                self.problem(path, f"kernel {name!r} has no source", 'add source = "kernels/my_kernel.cu"', on_key=True)
            elif self.typed((*path, "source"), tbl["source"], "str"):
                src = (self.path.parent / tbl["source"]).resolve()
                if not src.is_file():
                    self.problem((*path, "source"), f"kernel source {tbl['source']!r} not found", f"looked for {src}")
            for key in ("reference", "function", "arch"):
                if key in tbl:
                    self.typed((*path, key), tbl[key], "str")
            self.compiler_args(path, tbl)
            if "artifact_checks" in tbl:
                self.artifact_checks((*path, "artifact_checks"), tbl["artifact_checks"])

    # --- building ----------------------------------------------------------------------------
    def build(self, root: Path, path: Path, raw: dict[str, Any]) -> Config:
        project = raw.get("project", {})
        framework = project.get("framework", "numpy")
        v = raw.get("validation", {})
        validation = ValidationConfig(
            dtypes=tuple(v.get("dtypes", DEFAULT_DTYPES)),
            dtypes_listed="dtypes" in v,
            check_nan=v.get("check_nan", True),
            check_inf=v.get("check_inf", True),
            strict=bool(v.get("strict", False)),
            seed=v.get("seed", 0),
            tolerances=_tols(v.get("tolerances", {})),
            iterations=v.get("iterations", 50),
            timeout=float(v.get("timeout", 30.0)),
            distributions=tuple(v.get("distributions", DEFAULT_DISTRIBUTIONS)),
            distributions_listed="distributions" in v,
            max_failure_snapshots=v.get("max_failure_snapshots", 200),
            memory_limit_mb=v.get("memory_limit_mb"),
            **_domain(v),
        )
        c = raw.get("ci", {})
        quick = c.get("quick", {})
        ci = CIConfig(
            quick_dtypes=_opt_tuple(quick.get("dtypes", c.get("quick_dtypes"))),
            quick_iterations=quick.get("iterations", 16),
            thorough_timeout=c.get("thorough_timeout"),
            parallel_jobs=c.get("parallel_jobs"),
            fuzz_iterations=c.get("fuzz_iterations", 100),
            regression_threshold=float(c.get("regression_threshold", 0.1)),
            budget=parse_duration(c["budget"]) if "budget" in c else None,
            quick_budget=parse_duration(quick["budget"]) if "budget" in quick else None,
        )
        st = raw.get("store", {})
        keep = st.get("keep_runs", StoreConfig.keep_runs)
        days = st.get("keep_failures_days", StoreConfig.keep_failures_days)
        store = StoreConfig(keep_runs=None if keep == "all" else keep, keep_failures_days=_days(days))
        p = raw.get("policies", {})
        policies = PoliciesConfig(p.get("fail_on_regression", False), float(p.get("warn_threshold", 0.8)))
        cu = raw.get("cuda", {})
        cuda = CudaConfig(
            nvcc=cu.get("nvcc"),
            arch=cu.get("arch", "sm_90"),
            flags=tuple(cu.get("flags", ())),
            include_dirs=tuple(cu.get("include_dirs", ())),
            defines=tuple(cu.get("defines", ())),
            artifact_checks=_checks(cu.get("artifact_checks", {})),
        )
        ops = tuple(self.build_op(root, i, o, validation, framework) for i, o in enumerate(raw.get("ops", [])))
        kernels = tuple(
            KernelConfig(
                name=k["name"],
                index=i,
                source=k["source"],
                reference=k.get("reference"),
                function=k.get("function"),
                arch=k.get("arch"),
                flags=tuple(k.get("flags", ())),
                include_dirs=tuple(k.get("include_dirs", ())),
                defines=tuple(k.get("defines", ())),
                artifact_checks=_checks(k.get("artifact_checks", {})),
            )
            for i, k in enumerate(raw.get("kernels", []))
        )
        allow_external = bool(project.get("allow_external_paths", False))
        if not allow_external:
            self.check_inside(root, raw)
            if self.problems:
                raise ConfigError(self.problems)
        return Config(
            root=root,
            path=path,
            project_name=project.get("name", root.name),
            framework=framework,
            validation=validation,
            ci=ci,
            policies=policies,
            cuda=cuda,
            ops=ops,
            kernels=kernels,
            allow_external_paths=allow_external,
            positions=self.index,
            warnings=tuple(self.warnings),
            store=store,
        )

    def check_inside(self, root: Path, raw: dict[str, Any]) -> None:
        """Scripts and sources must stay inside the workspace unless ``allow_external_paths`` is set."""
        refs: list[tuple[tuple[str | int, ...], str]] = []
        for i, op in enumerate(raw.get("ops", [])):
            for key in ("op_script", "reference"):
                val = op.get(key)
                if isinstance(val, str) and not (key == "reference" and is_callable_ref(val)):
                    refs.append((("ops", i, key), val))
        for i, k in enumerate(raw.get("kernels", [])):
            if isinstance(k.get("source"), str):
                refs.append((("kernels", i, "source"), k["source"]))
        for path, rel in refs:
            target = (root / rel).resolve()
            if not target.is_relative_to(root):
                self.problem(
                    path,
                    f"{rel!r} resolves outside the workspace ({target})",
                    "set allow_external_paths = true under [project] if this is intended",
                )
        outside: dict[str, tuple[Path, Path] | None] = {}  # by module: 3,000 ops may share a package
        for i, op in enumerate(raw.get("ops", [])):
            for key in ("module", "reference"):
                val = op.get(key)
                if isinstance(val, str) and is_callable_ref(val):
                    module = val.split(":", 1)[0]
                    if module not in outside:
                        outside[module] = module_outside(root, module)
                    found = outside[module]
                    if found is not None:
                        self.problem(
                            ("ops", i, key),
                            f"module {module!r}: {found[0].relative_to(root)} resolves outside the workspace"
                            f" ({found[1]})",
                            "set allow_external_paths = true under [project] if this is intended",
                        )

    def build_op(
        self, root: Path, index: int, op: dict[str, Any], validation: ValidationConfig, framework: str
    ) -> OpConfig:
        dims: dict[str, DimSpec] = {}
        raw_dims = op.get("dims", {})
        if "inputs" not in op:
            for name, (lo, hi, de) in DEFAULT_DIMS.items():
                if name not in raw_dims:
                    dims[name] = DimSpec(name, lo, hi, de)
        for name, spec in raw_dims.items():
            dims[name] = _dim(name, spec)
        if "inputs" in op:
            order = _input_names(op)
            inputs = tuple(
                InputSpec(
                    name=n,
                    shape=tuple(op["inputs"][n]["shape"]),
                    dtype=op["inputs"][n].get("dtype"),
                    range=tuple(op["inputs"][n]["range"]) if "range" in op["inputs"][n] else None,  # type: ignore[arg-type]
                    distributions=tuple(op["inputs"][n]["distributions"])
                    if "distributions" in op["inputs"][n]
                    else None,
                    **{k: v for k, v in _domain(op["inputs"][n]).items() if k != "range"},
                    sentinels=_sentinels(op["inputs"][n].get("sentinels")),
                )
                for n in order
            )
        else:
            inputs = tuple(InputSpec(n, DEFAULT_INPUT_SHAPE) for n in _input_names(op))
        mode = op.get("execution_mode") or ("script_based" if "op_script" in op else "in_process")
        cost, cost_reason = op_cost(root, op)
        return OpConfig(
            name=op["name"],
            index=index,
            module=op.get("module"),
            reference=op.get("reference"),
            op_script=op.get("op_script"),
            execution_mode=mode,
            input_names=tuple(i.name for i in inputs),
            inputs=inputs,
            dims=dims,
            kwargs=dict(op.get("kwargs", {})),
            invariants=tuple(op.get("invariants", ())),
            tolerances=_tols(op.get("tolerances", {})),
            dtypes=tuple(op.get("dtypes", validation.dtypes)),
            layouts=tuple(op.get("layouts", ("contiguous",) if mode == "script_based" else LAYOUTS)),
            distributions=tuple(op.get("distributions", validation.distributions)),
            framework=op.get("framework", framework),
            output_dtype=op.get("output_dtype"),
            timeout=float(op["timeout"]) if "timeout" in op else None,
            iterations=op.get("iterations"),
            seeds=tuple(pinned_seed(p) for p in op.get("seeds", ())),
            pin_plans={pinned_seed(p): pinned_plan(p) for p in op.get("seeds", ())},
            default_distributions="distributions" not in op and not validation.distributions_listed,
            default_dtypes="dtypes" not in op and not validation.dtypes_listed,
            budget=parse_duration(op["budget"]) if "budget" in op else None,
            cost=cost,
            cost_reason=cost_reason,
            nan_contract=bool(op.get("nan_contract", False)),
            inplace=tuple(op.get("inplace", ())),
            grad=tuple(op.get("grad", ())),
            outputs=tuple(op.get("outputs", ())),
            requires_grad=tuple(op.get("requires_grad", ())),
            reference_framework=op.get("reference_framework", "numpy"),
            reference_grad=op.get("reference_grad"),
            strict=bool(op.get("strict", validation.strict)),
            call=op.get("call", "positional"),
            reference_call=op.get("reference_call", op.get("call", "positional")),
            **{k: v if k in op else getattr(validation, k) for k, v in _domain(op).items()},
        )


def _sentinels(value: Any) -> tuple[tuple[int, float], ...]:
    """``sentinels`` (one table or a list of them, checked) as (value, share) pairs."""
    if value is None:
        return ()
    tables = [value] if isinstance(value, dict) else list(value)
    return tuple((int(t["value"]), float(t["share"])) for t in tables)


def _dim_bounds(spec: Any) -> tuple[int, int] | None:
    """(smallest, largest) size a raw dim declaration allows, or None when it is malformed (reported elsewhere)."""
    if isinstance(spec, bool):
        return None
    if isinstance(spec, int):
        return spec, spec
    values = spec if isinstance(spec, list) else spec.get("candidates") if isinstance(spec, dict) else None
    if isinstance(values, list) and values and all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return min(values), max(values)
    if isinstance(spec, dict) and _ints(spec.get("min"), spec.get("max")):
        return spec["min"], spec["max"]
    return None


def _input_names(op: dict[str, Any]) -> list[str]:
    """An op's input names in call order: ``input_names``, else its ``[ops.inputs]`` tables, else ``x``."""
    names = op.get("input_names")
    if isinstance(names, list) and names:
        return [n for n in names if isinstance(n, str)]
    return list(op["inputs"]) if isinstance(op.get("inputs"), dict) else ["x"]


#: What ``cost = "auto"`` says of an op that imports triton: why it is planned as expensive.
TRITON_REASON = "imports triton: its kernels run in Triton's CPU interpreter"


def op_cost(root: Path, op: dict[str, Any]) -> tuple[str, str]:
    """An op's cost and why: as declared, else (``auto``) high when its module or script imports triton,
    whose interpreter pays milliseconds per program and loop trip, where small shapes find the same bugs."""
    declared = op.get("cost", "auto")
    if declared != "auto":
        return declared, "declared"
    start: str | Path | None = None
    if isinstance(op.get("module"), str):
        start = op["module"].split(":", 1)[0]
    elif isinstance(op.get("op_script"), str):
        start = root / op["op_script"]
    if start is not None and "triton" in imported_packages(root, start):
        return "high", TRITON_REASON
    return "normal", ""


def _tiles(spec: dict[str, Any]) -> tuple[int, ...]:
    """The declared tile sizes of a dim (``tile`` or ``block``, one size or a list), sorted."""
    v = spec.get("tile", spec.get("block", ()))
    return tuple(sorted(set(v if isinstance(v, list) else [v])))


def _dim(name: str, spec: Any) -> DimSpec:
    if isinstance(spec, dict) and "also" in spec:
        also = tuple(sorted(set(spec["also"])))
        return dataclasses.replace(_dim(name, {k: v for k, v in spec.items() if k != "also"}), also=also)
    if isinstance(spec, dict) and ("tile" in spec or "block" in spec):
        return dataclasses.replace(
            _dim(name, {k: v for k, v in spec.items() if k not in ("tile", "block")}), tiles=_tiles(spec)
        )
    if isinstance(spec, int):
        return DimSpec(name, spec, spec, spec)
    if isinstance(spec, list):
        return DimSpec(name, min(spec), max(spec), spec[0], tuple(spec))
    if "candidates" in spec:
        cands = tuple(spec["candidates"])
        return DimSpec(name, min(cands), max(cands), spec.get("default", cands[0]), cands)
    lo, hi = spec["min"], spec["max"]
    return DimSpec(name, lo, hi, spec.get("default", min(hi, max(lo, 32))))


def _domain(raw: dict[str, Any]) -> dict[str, Any]:
    """The value-domain fields of a checked table (None where absent)."""
    return {
        "scale": float(raw["scale"]) if "scale" in raw else None,
        "offset": float(raw["offset"]) if "offset" in raw else None,
        "sign": raw.get("sign"),
        "range": tuple(b if isinstance(b, str) else float(b) for b in raw["range"]) if "range" in raw else None,
    }


def module_outside(root: Path, module: str) -> tuple[Path, Path] | None:
    """(the file or folder, where it resolves) of the first part of a workspace module, or of a package it is
    imported through, that resolves outside the workspace ``root`` (resolved): a symlinked ``ops.py`` or
    ``pkg/`` would otherwise import code from anywhere. None: all inside. Only a symbolic link can lead out
    (the parts are identifiers, never ``..``, and each part's folder was checked before it), so only links
    are resolved: a path walk per link, not per part (3,000 ops took seconds)."""
    parts = module.split(".")
    for n in range(1, len(parts) + 1):
        base = root.joinpath(*parts[:n])
        for candidate in (base.with_suffix(".py"), base / "__init__.py", base):
            if not os.path.islink(candidate):
                continue
            target = candidate.resolve()
            if not target.is_relative_to(root):
                return candidate, target
    return None


def _opt_tuple(value: Any) -> tuple[str, ...] | None:
    return None if value is None else tuple(value)


def _days(value: Any) -> float | None:
    """``[store] keep_failures_days``: None keeps failing cases forever (``"all"``)."""
    return None if value == "all" or value is None else float(value)


def _tols(raw: dict[str, Any]) -> dict[str, Tolerance]:
    return {
        name: Tolerance(
            float(t["atol"]) if "atol" in t else None,
            float(t["rtol"]) if "rtol" in t else None,
            int(t["ulp"]) if "ulp" in t else None,
        )
        for name, t in raw.items()
    }


def _checks(raw: dict[str, Any]) -> ArtifactChecksConfig:
    def tup(key: str) -> tuple[str, ...] | None:
        return tuple(raw[key]) if key in raw else None

    return ArtifactChecksConfig(
        max_registers=raw.get("max_registers"),
        max_spills=raw.get("max_spills"),
        max_local_memory_bytes=raw.get("max_local_memory_bytes"),
        max_shared_memory_bytes=raw.get("max_shared_memory_bytes"),
        forbidden_instructions=tup("forbidden_instructions"),
        required_instructions=tup("required_instructions"),
    )


def _ints(*values: Any) -> bool:
    return all(isinstance(v, int) and not isinstance(v, bool) for v in values)


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e16 else f"{x:g}"
