"""Hover text for an op (in gpuemu.toml or on its function) and a kernel: the last results at a glance."""

from __future__ import annotations

import json
import time
from typing import Any

from ..engine.report.lines import KIND_TEXT, replay_command
from ..session.workspace import OpView

SHADES = " .:-=+*#%@"


def heatmap_text(grid: list[list[float]]) -> str:
    """A small text heatmap: one character per cell, darker = a larger fraction of mismatches."""
    rows = []
    for row in grid:
        rows.append("".join(SHADES[min(len(SHADES) - 1, round(v * (len(SHADES) - 1)))] if v > 0 else "·" for v in row))
    return "\n".join(rows)


def _ago(t: float) -> str:
    dt = max(0.0, time.time() - t)
    if dt < 90:
        return f"{dt:.0f} s ago"
    if dt < 5400:
        return f"{dt / 60:.0f} min ago"
    if dt < 172800:
        return f"{dt / 3600:.0f} h ago"
    return f"{dt / 86400:.0f} days ago"


def _ratio(v: Any) -> str:
    if not isinstance(v, (int, float)):
        return "-"
    if v >= 1e299:
        return "non-finite"
    return f"{v:.2g}x" if v >= 1 else f"{v:.0%}"


def op_hover(view: OpView | None, name: str, running: str | None = None) -> str:
    if view is None:
        text = f"**{name}**: no results yet"
        return text + (
            f" ({running})" if running else " (save a file of the op, or run `gpuemu test --op " + f"{name}`)"
        )
    word = {"passed": "PASS", "failed": "FAIL", "error": "ERROR", "not_run": "NOT RUN"}.get(view.status, view.status)
    lines = [f"**{name}**: {word}: {view.message} ({_ago(view.finished_at)})"]
    if running:
        lines[0] += f"; {running}"
    if view.diagnosis:
        lines.append(f"\n*Diagnosis:* {view.diagnosis}")
    if view.by_variant:
        lines += ["", "| dtype | layout | passed | max error / tolerance |", "|---|---|---|---|"]
        for v in view.by_variant:
            lines.append(f"| {v['dtype']} | {v['layout']} | {v['passed']}/{v['cases']} | {_ratio(v['max_ratio'])} |")
    if view.failures:
        row = view.failures[0]
        shapes = " ".join(f"{k}={s}" for k, s in json.loads(row["shapes"] or "{}").items())
        tol = json.loads(row["tolerance"]) if row.get("tolerance") else None
        numeric = row.get("max_abs") is not None and row.get("kind") == "mismatch"
        err = f"max abs err {row['max_abs']:.3g}" if numeric else (row.get("message") or "").split("\n")[0]
        if tol and numeric:
            err += f" vs atol={tol[0]:g} rtol={tol[1]:g}"
        lines += [
            "",
            f"First failure: **{KIND_TEXT.get(row['kind'], row['kind'])}** at seed {row['seed']}: "
            f"{row['dtype']} {shapes} layout={row['layout']} dist={row['distribution']}: {err}",
        ]
        detail = json.loads(row.get("detail") or "{}")
        for out_name, feats in (detail.get("features", {}).get("outputs") or {}).items():
            grid = feats.get("heatmap")
            if grid:
                lines += [
                    "",
                    f"Where `{out_name}` is wrong (rows x columns, darker = more mismatches):",
                    "```",
                    heatmap_text(grid),
                    "```",
                ]
                break
        mini = view.minimized.get(row["seed"])
        if mini:
            lines.append(f"Minimized: {' '.join(f'{k}={s}' for k, s in mini['shapes'].items())}")
        lines.append(f"\nReplay: `{replay_command(name, row['seed'])}`")
    return "\n".join(lines)


def kernel_hover(view: OpView | None, name: str) -> str:
    if view is None:
        return f"**{name}**: not linted yet (save the .cu file, or run `gpuemu lint --kernel {name}`)"
    entry = view.detail or {}
    lines = [f"**kernel {name}**: {view.status.upper()} {entry.get('summary', '')} ({_ago(view.finished_at)})"]
    res = entry.get("resources") or {}
    if res:
        lines += ["", "| resource | value |", "|---|---|"]
        for k, v in res.items():
            if v is not None and not isinstance(v, dict):
                lines.append(f"| {k.replace('_', ' ')} | {v} |")
    for f in entry.get("findings", [])[:10]:
        lines.append(f"- {f.get('severity')} `{f.get('code')}`: {f.get('message')}")
    return "\n".join(lines)
