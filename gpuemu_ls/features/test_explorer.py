"""Test Explorer: the ops and kernels of every workspace (``gpuemu/discoverOps``) and the state of each as it
runs (``gpuemu/opState``), as JSON payloads: failing cases in brief, their worst element, ranges."""

from __future__ import annotations

import contextlib
import math
from pathlib import Path
from typing import Any

from lsprotocol import types as lsp

from ..diagnostics.hover import layout_text
from ..diagnostics.ranges import op_header_range, op_target
from ..engine.errors import Problem
from ..session.jobs import Job
from ..session.workspace import WorkspaceSession
from . import Server

DISCOVER_OPS, RUN_OPS, OP_STATE = "gpuemu/discoverOps", "gpuemu/runOps", "gpuemu/opState"


def item_id(kind: str, name: str) -> str:
    return f"{'kernel' if kind in ('lint', 'kernel') else 'op'}:{name}"


def _case_brief(case: Any) -> dict[str, Any]:
    st = case.stats()
    return {
        "seed": case.seed,
        "status": case.status,
        "kind": case.kind,
        "tier": case.tier,
        "dtype": case.spec.dtype,
        "shapes": {k: list(v) for k, v in case.spec.shapes.items()},
        "layout": case.spec.layout,
        "distribution": case.spec.distribution,
        "maxAbs": st["max_abs"],
        "tolerance": case.tolerance,
        "message": (case.message or "").strip().splitlines()[0][:300] if case.message else "",
        "replay": f"gpuemu reproduce --op {case.op} --seed {case.seed}",
        "worst": _worst_brief(case),
    }


def _worst_brief(case: Any) -> dict[str, Any] | None:
    """The worst element of a failing case (op and reference values there, for a client's diff), the elements
    around it (``window``, see oracle/features.py) and where the failing elements lie (``layout``), or None."""
    w = case.worst()
    if w is None or w.worst_index is None:
        return None
    feats = ((case.features or {}).get("outputs") or {}).get(w.output)
    feats = feats if isinstance(feats, dict) else {}
    return {
        "window": feats.get("window"),
        "layout": layout_text(feats) or None,
        "output": w.output,
        "index": [int(i) for i in w.worst_index],
        "op": _json_number(w.worst_op),
        "ref": _json_number(w.worst_ref),
        "allowed": _json_number(w.worst_allowed),
        "firstIndex": [int(i) for i in w.first_index] if w.first_index is not None else None,
        "mismatches": w.mismatches,
        "total": w.total,
        "examples": {
            k: {"index": list(v.get("index") or []), "op": _json_number(v.get("op")), "ref": _json_number(v.get("ref"))}
            for k, v in (w.examples or {}).items()
        },
    }


def _json_number(x: Any) -> float | str | None:
    """A float for JSON: NaN and infinities as the strings "nan", "inf", "-inf" (JSON has no such numbers)."""
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else ("nan" if math.isnan(x) else ("inf" if x > 0 else "-inf"))


def op_state(job: Job, kind: str, event: dict[str, Any]) -> dict[str, Any]:
    """The ``gpuemu/opState`` payload of a job event: the op or kernel, its state and its cases so far."""
    state = {
        "queued": "queued",
        "started": "running",
        "progress": "running",
        "cancelled": "cancelled",
        "failed": "errored",
    }.get(kind)
    payload: dict[str, Any] = {
        "workspace": str(job.session.root),
        "id": item_id(job.kind, job.name),
        "name": job.name,
        "kind": "kernel" if job.kind == "lint" else "op",
        "done": job.done,
        "total": job.total,
        "failedCases": job.failed,
    }
    if kind == "finished":
        result = event.get("result")
        if job.kind == "validate" and result is not None and result.outcomes:
            o = result.outcomes[0]
            payload.update(
                state=o.status,
                message=o.message,
                diagnosis=o.diagnosis,
                failures=[_case_brief(c) for c in o.failures[:20]],
                cases=len(o.cases),
                elapsed=o.elapsed,  # the op's own seconds, not its wait in the queue (a client's test duration)
            )
        elif job.kind == "lint" and result:
            e = result[0]
            payload.update(
                state=e["status"],
                message=e.get("summary") or e.get("message", ""),
                failures=[
                    {
                        "message": f.get("message"),
                        "file": f.get("file"),
                        "line": f.get("line"),
                        "code": f.get("code"),
                    }
                    for f in e.get("findings", [])
                ],
            )
        else:
            payload.update(state="errored", message="nothing ran")
    else:
        payload["state"] = state
        if kind == "progress":
            case = event.get("case")
            if case is not None and case.status != "passed":
                payload["lastFailure"] = _case_brief(case)
    return payload


def discover(ls: Server, s: WorkspaceSession) -> dict[str, Any]:
    cfg = s.config
    items: list[dict[str, Any]] = []
    if cfg is not None:
        for op in cfg.ops:
            view = s.view("op", op.name)
            target = op_target(cfg, op)
            rng = op_header_range(cfg, op)
            items.append(
                {
                    "id": item_id("op", op.name),
                    "name": op.name,
                    "kind": "op",
                    "uri": cfg.path.as_uri(),
                    "range": _range_json(rng),
                    "sourceUri": target[0].as_uri() if target else None,
                    "sourceRange": _range_json(target[1]) if target else None,
                    "status": view.status if view else "unknown",
                    "message": view.message if view else "",
                    "diagnosis": view.diagnosis if view else "",
                    "running": (s.root, op.name) in ls.running,
                }
            )
        for i, k in enumerate(cfg.kernels):
            view = s.view("kernel", k.name)
            src = cfg.resolve(k.source)
            line = ((view.detail.get("source") or {}).get("line") if view else None) or 1
            items.append(
                {
                    "id": item_id("kernel", k.name),
                    "name": k.name,
                    "kind": "kernel",
                    "uri": cfg.path.as_uri(),
                    "range": _range_json(op_header_range_kernel(cfg, i)),
                    "sourceUri": src.as_uri(),
                    "sourceRange": {
                        "start": {"line": line - 1, "character": 0},
                        "end": {"line": line - 1, "character": 0},
                    },
                    "status": view.status if view else "unknown",
                    "message": (view.detail.get("summary") if view else "") or "",
                }
            )
    return {
        "root": str(s.root),
        "uri": s.root.as_uri(),
        "config": s.config_path.as_uri(),
        "configError": [_problem_text(p, s.root) for p in s.problems],
        "trusted": ls.options.trusted,
        "items": items,
    }


def _problem_text(p: Problem, root: Path) -> str:
    """A configuration problem as the Test Explorer lists it: where, relative to the workspace ("gpuemu.toml:3:1",
    an absolute path made the item's name unreadable), what, and the hint."""
    where = p.location()
    if p.file is not None:
        with contextlib.suppress(ValueError):
            where = where.replace(str(p.file), str(Path(p.file).resolve().relative_to(root.resolve())), 1)
    return f"{where}: {p.message}" + (f" ({p.hint})" if p.hint else "")


def op_header_range_kernel(cfg: Any, index: int) -> lsp.Range:
    from ..diagnostics.ranges import kernel_header_range

    return kernel_header_range(cfg, index)


def _range_json(r: lsp.Range) -> dict[str, Any]:
    return {
        "start": {"line": r.start.line, "character": r.start.character},
        "end": {"line": r.end.line, "character": r.end.character},
    }
