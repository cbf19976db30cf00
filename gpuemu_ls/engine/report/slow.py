"""``gpuemu report --slow [N]``: where the time of the latest runs went, from the store.

Each op's time by phase (generating inputs, the op, the reference, comparing; the rest is workers,
transfers and storing) and the N slowest cases across ops, so a slow gate says whether an op is slow
itself, its reference is, or gpuemu is, and which case to look at (its seed replays it).
"""

from __future__ import annotations

import json
import time
from typing import Any

from ..config.model import Config
from ..oracle.outcome import PHASES
from .lines import replay_command, row_plan

#: Cases ``--slow`` lists without a count.
SLOW_DEFAULT = 10


def slow_cases(config: Config, store: Any, n: int = SLOW_DEFAULT, *, since: float | None = None) -> dict[str, Any]:
    """The ``n`` slowest cases of each op's latest verdict run (``since`` hours back at most), and per op
    its wall time and the seconds of each phase summed over its cases."""
    names = {o.name for o in config.ops}
    cutoff = time.time() - since * 3600 if since else None
    ops: list[dict[str, Any]] = []
    cases: list[dict[str, Any]] = []
    for row in store.latest_op_results(kind="op").values():
        if row["op"] not in names or (cutoff is not None and (row.get("finished_at") or 0) < cutoff):
            continue
        totals = dict.fromkeys(PHASES, 0.0)
        count = 0
        for r in store.query(
            "SELECT seed, status, dtype, strategy, shapes, detail FROM cases WHERE run_id = ? AND op = ?",
            (row["run_id"], row["op"]),
        ):
            durations = (json.loads(r["detail"] or "{}").get("durations")) or {}
            count += 1
            for p in PHASES:
                totals[p] += float(durations.get(p) or 0.0)
            if durations.get("case") is not None:
                cases.append(
                    {
                        "op": row["op"],
                        "seed": r["seed"],
                        "seconds": round(float(durations["case"]), 4),
                        "phases": {p: round(float(durations.get(p) or 0.0), 4) for p in PHASES},
                        "status": r["status"],
                        "dtype": r["dtype"],
                        "strategy": r["strategy"],
                        "shapes": json.loads(r["shapes"] or "{}"),
                        "replay": replay_command(row["op"], r["seed"], plan=row_plan(r)),
                    }
                )
        elapsed = float(row.get("duration") or 0.0)
        ops.append(
            {
                "name": row["op"],
                "elapsed": round(elapsed, 4),
                "cases": count,
                **{p: round(v, 4) for p, v in totals.items()},
                "other": round(max(0.0, elapsed - sum(totals.values())), 4),
                "budget": (json.loads(row.get("detail") or "{}").get("budget")),
            }
        )
    ops.sort(key=lambda o: -o["elapsed"])
    cases.sort(key=lambda c: -c["seconds"])
    return {"ops": ops, "slowest": cases[:n]}


def render_slow(slow: dict[str, Any]) -> str:
    """The text of ``report --slow``: ops by time with their phases, then the slowest cases."""
    head = ("op", "time", "cases", "generate", "op", "reference", "compare", "other")
    lines = ["{:24} {:>8} {:>6} {:>9} {:>8} {:>10} {:>8} {:>8}".format(*head)]
    for o in slow["ops"]:
        lines.append(
            f"{o['name']:24} {o['elapsed']:7.2f}s {o['cases']:6d} {o['generate']:8.2f}s {o['op']:7.2f}s "
            f"{o['reference']:9.2f}s {o['compare']:7.2f}s {o['other']:7.2f}s"
        )
    if not slow["ops"]:
        lines.append("(no stored results: run `gpuemu test` or `gpuemu ci` first)")
    if slow["slowest"]:
        lines += ["", f"slowest {len(slow['slowest'])} cases:"]
        for c in slow["slowest"]:
            shapes = " ".join(f"{k}={v}" for k, v in c["shapes"].items())
            ph = c["phases"]
            lines.append(
                f"  {c['seconds']:7.3f}s {c['op']} seed={c['seed']} {c['dtype']} {c['strategy']} {shapes} "
                f"(op {ph['op']:.3f}s, reference {ph['reference']:.3f}s, generate {ph['generate']:.3f}s, "
                f"compare {ph['compare']:.3f}s) {c['status']}; replay: {c['replay']}"
            )
    return "\n".join(lines)
