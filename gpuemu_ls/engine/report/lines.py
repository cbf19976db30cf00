"""Human-readable lines for results: the same words in the terminal, in CI logs and in the editor.

A failure line carries everything needed to act on it: op, kind, seed, dtype, shapes, layout,
distribution, error against tolerance, and the exact command that replays it.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

from ..config.keys import PLAN, format_duration
from ..oracle.outcome import CaseResult

KIND_TEXT = {
    "mismatch": "wrong values",
    "unexpected_nan": "NaN where the reference is finite",
    "unexpected_inf": "inf where the reference is finite",
    "missing_nan": "finite where the reference is NaN",
    "shape_mismatch": "wrong output shape",
    "dtype_mismatch": "wrong output dtype",
    "output_names": "different output names",
    "input_mutation": "wrote into its inputs",
    "invariant": "invariant violated",
    "op_error": "op raised",
    "op_exit": "op exited",
    "op_bad_output": "op output unusable",
    "op_crash": "op crashed",
    "op_timeout": "op timed out",
    "op_import": "op could not be loaded",
    "reference_error": "reference raised",
    "reference_exit": "reference exited",
    "reference_bad_output": "reference output unusable",
    "reference_crash": "reference crashed",
    "reference_timeout": "reference timed out",
    "out_of_memory": "out of memory",
    "internal_error": "gpuemu internal error",
}


def row_plan(row: dict[str, Any]) -> int | None:
    """The plan version of a stored case row (from its spec; plan 1 for one stored before plan versions)."""
    detail = row.get("detail")
    if isinstance(detail, str):
        try:
            detail = json.loads(detail or "{}")
        except ValueError:
            return None
    spec = (detail or {}).get("spec") if isinstance(detail, dict) else None
    return int(spec.get("plan", 1)) if isinstance(spec, dict) else None


def replay_command(
    op: str, seed: int, root: Path | None = None, cwd: Path | None = None, *, plan: int | None = None
) -> str:
    """The command that replays (op, seed), runnable from ``cwd`` (with ``-C`` when that is not the workspace);
    with ``--plan`` when the case was drawn under an earlier plan version than a bare seed now means."""
    cmd = ["gpuemu"]
    if root is not None and cwd is not None and root.resolve() != cwd.resolve():
        try:
            rel = root.resolve().relative_to(cwd.resolve())
            cmd += ["-C", str(rel)]
        except ValueError:
            cmd += ["-C", str(root)]
    cmd += ["reproduce", "--op", op, "--seed", str(seed)]
    if plan and plan != PLAN:
        cmd += ["--plan", str(plan)]
    return shlex.join(cmd)


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.3g}"


def error_text(max_abs: float | None, tolerance: Any, max_ratio: float | None) -> str:
    tol = tolerance if isinstance(tolerance, (list, tuple)) else None
    if max_abs is None:
        return ""
    text = f"max abs err {_fmt(max_abs)}"
    if tol:
        text += f" vs atol={tol[0]:g} rtol={tol[1]:g}"
    if max_ratio is not None and max_ratio > 0:
        text += f" ({_fmt(max_ratio)}x tolerance)" if max_ratio < 1e299 else " (non-finite)"
    return text


def case_line(r: CaseResult, root: Path | None = None, cwd: Path | None = None) -> str:
    """One failure line from a live result."""
    st = r.stats()
    return failure_line(
        r.op,
        r.status,
        r.kind,
        r.seed,
        r.spec.dtype,
        r.spec.shape_text(),
        r.spec.layout,
        r.spec.distribution,
        _detail(r.kind, r.message, st["max_abs"], r.tolerance, st["max_ratio"]),
        replay_command(r.op, r.seed, root, cwd, plan=r.spec.plan),
    )


_NUMERIC = ("mismatch", "unexpected_nan", "unexpected_inf", "missing_nan")


def _detail(kind: str | None, message: str, max_abs: float | None, tolerance: Any, max_ratio: float | None) -> str:
    """Error against tolerance for wrong values; the message for everything else."""
    if kind in _NUMERIC and max_abs is not None:
        return error_text(max_abs, tolerance, max_ratio)
    return _first_line(message)


def row_line(row: dict[str, Any], root: Path | None = None, cwd: Path | None = None) -> str:
    """One failure line from a stored case row."""
    shapes = json.loads(row["shapes"] or "{}")
    shape_text = " ".join(f"{k}={v}" for k, v in shapes.items())
    tol = json.loads(row["tolerance"]) if row.get("tolerance") else None
    detail = _detail(row["kind"], row["message"] or "", row["max_abs"], tol, row["max_ratio"])
    return failure_line(
        row["op"],
        row["status"],
        row["kind"],
        row["seed"],
        row["dtype"],
        shape_text,
        row["layout"],
        row["distribution"],
        detail,
        replay_command(row["op"], row["seed"], root, cwd, plan=row_plan(row)),
    )


def _first_line(text: str) -> str:
    line = (text or "").strip().splitlines()[0] if (text or "").strip() else ""
    return line[:200]


def failure_line(
    op: str,
    status: str,
    kind: str | None,
    seed: int,
    dtype: str,
    shapes: str,
    layout: str,
    distribution: str,
    detail: str,
    replay: str,
) -> str:
    tag = {"failed": "FAIL", "edge": "EDGE"}.get(status, "ERROR")
    what = KIND_TEXT.get(kind or "", kind or status)
    return (
        f"{tag} {op} [{kind}: {what}] seed={seed} dtype={dtype} {shapes} layout={layout} "
        f"dist={distribution}: {detail}\n    replay: {replay}"
    )


def budget_head(budget: dict[str, Any]) -> str:
    """What an op's budget was: "budget 20s (op budget)", or a work budget's share of the plan's work."""
    head = "budget"
    if budget.get("seconds"):
        head = f"budget {format_duration(budget['seconds'])}"
    elif isinstance(budget.get("work"), dict) and budget["work"].get("share"):
        head = f"budget {budget['work']['share']:.0%} of the plan's work"
    return head + (f" ({budget['source']})" if budget.get("source") else "")
