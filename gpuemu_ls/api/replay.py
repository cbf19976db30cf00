"""What ``gpuemu reproduce`` can say about a case of a client-side op, whose kernel is not here.

A client-side op without ``module`` runs only in the process that has the kernel (a GPU box, a
pytest run there). Its failing cases are in the store with their exact inputs, so the CLI can still
show the stored comparison, write the inputs out for inspection, and say how to replay the case
where the kernel is: ``Client(workspace).reproduce(op, seed, run_op)``.
"""

from __future__ import annotations

import datetime
import json
from dataclasses import fields
from pathlib import Path
from typing import Any

from ..engine.cases.plan import CaseSpec
from ..engine.config.model import Config, OpConfig
from ..engine.oracle.compare import Comparison
from ..engine.private_files import check_name
from ..engine.report.lines import KIND_TEXT
from ..engine.store.db import Store
from ..engine.tools.repro import save_inputs
from .results import api_replay

_FIELDS = {f.name for f in fields(Comparison)}


def stored_comparisons(detail: dict[str, Any]) -> list[Comparison]:
    """The comparisons a stored case row kept, as :class:`Comparison` objects (for their reports)."""
    out = []
    for d in detail.get("comparisons") or []:
        kw = {k: v for k, v in d.items() if k in _FIELDS}
        for key in ("shape", "worst_index", "first_index"):
            if kw.get(key) is not None:
                kw[key] = tuple(kw[key])
        try:
            out.append(Comparison(**kw))
        except TypeError:
            continue
    return out


def client_replay_text(
    config: Config, op: OpConfig, seed: int, store: Store, *, write_inputs: bool = True, cwd: Path | None = None
) -> tuple[str, int]:
    """Text (and exit code) for ``gpuemu reproduce`` of a client-side op: the stored case, not a re-run.

    Exit code: 1 when the stored case did not pass (or nothing is stored), 0 when it passed.
    """
    cwd = cwd or Path.cwd()
    lines = [
        f"op {op.name}, seed {seed}: client-side op (execution_mode = {op.execution_mode!r}, no module): "
        "its kernel runs in the process that has it, not here; showing the stored result"
    ]
    row = store.find_case(op.name, seed)
    if row is None:
        lines.append(f"  no stored case for op {op.name!r} seed {seed} in {_show(store.path, cwd)}")
        lines.append(f"  run it where the kernel is: {api_replay(op.name, seed, config.root)}")
        return "\n".join(lines), 1
    detail = json.loads(row.get("detail") or "{}")
    run = store.run(row["run_id"]) or {}
    when = (
        datetime.datetime.fromtimestamp(row["created_at"]).isoformat(timespec="seconds") if row["created_at"] else "?"
    )
    lines.append(
        f"  stored by run {row['run_id'][:12]} (source {run.get('source', '?')}, host {run.get('host', '?')}, "
        f"{when}{', command: ' + run['command'] if run.get('command') else ''})"
    )
    spec = CaseSpec.from_dict(detail["spec"]) if detail.get("spec") else None
    if spec is not None:
        lines.append(
            f"  strategy={spec.strategy} dtype={spec.dtype} {spec.shape_text()} layout={spec.layout} "
            f"dist={spec.distribution} dims={spec.dims}"
        )
    upstream = (detail.get("features") or {}).get("upstream")
    if upstream:  # backward validation: what each output's upstream gradient was drawn from
        lines.append("  upstream gradients: " + ", ".join(f"{k}={v}" for k, v in upstream.items()))
    for cmp in stored_comparisons(detail):
        lines.append("  " + cmp.report().replace("\n", "\n  "))
    for v in detail.get("violations") or []:
        lines.append(f"  invariant {v.get('invariant')}: {v.get('message')}")
    status = row["status"]
    if status == "passed":
        lines.append("PASSED (stored): op and reference agreed on these inputs")
    else:
        kind = row["kind"]
        msg = (row["message"] or "").strip().splitlines()
        lines.append(
            f"{'FAILED' if status == 'failed' else 'ERROR'} (stored) [{kind}: {KIND_TEXT.get(kind or '', kind)}]: "
            f"{msg[0] if msg else ''}"
        )
        if detail.get("file"):
            lines.append(f"  at {detail['file']}:{detail.get('line')}")
    if row.get("snapshot_id"):
        lines.append(f"  inputs: snapshot {row['snapshot_id'][:12]} in {_show(store.path, cwd)}")
        if write_inputs:
            snap = store.load_snapshot(row["snapshot_id"])
            if snap is not None:
                path = save_inputs(config.root, f"{check_name('op name', op.name)}_{seed}", snap)
                lines.append(f"  inputs written to {_show(path, cwd)} (logical arrays; layout {row['layout']})")
    else:
        lines.append("  inputs: not kept (only failing cases keep a snapshot); regenerated from (op, seed) on replay")
    lines.append("replay it where the kernel runs (same inputs, byte for byte):")
    lines.append("    from gpuemu_ls import Client")
    lines.append(f"    {api_replay(op.name, seed, config.root)}   # run_op(inputs, **kwargs) -> output")
    return "\n".join(lines), 0 if status == "passed" else 1


def _show(path: Path, cwd: Path) -> str:
    try:
        return str(path.resolve().relative_to(cwd.resolve()))
    except ValueError:
        return str(path)


__all__ = ["client_replay_text", "stored_comparisons"]
