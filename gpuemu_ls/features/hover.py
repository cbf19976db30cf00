"""Hover text for an op (in gpuemu.toml or on its function) and a kernel: the last results at a glance.

Hovers are markdown, and most of what they show is text the workspace controls: op and output names,
exception messages, diagnoses and lint findings read back from the store (written by any process,
trusted or not). All of it goes through :func:`md` (literal text) or :func:`code` (a code span), so it
can never become a link, a ``command:`` link, an image or HTML; :func:`own_links_only` then keeps only
links to this server's own commands, should a template ever add one.
"""

from __future__ import annotations

import json
import re
import time
from typing import Any

from ..engine.report.lines import KIND_TEXT, replay_command
from ..session.workspace import OpView
from .code_actions import COMMANDS

SHADES = " .:-=+*#%@"
#: What could start markdown syntax in literal text, escaped with a backslash (CommonMark escapes any ASCII
#: punctuation): backslashes, code, emphasis, links and images (brackets), table cells, strikethrough,
#: always; an underscore unless inside a word (``op_name`` stays readable), ``<`` before what could open a
#: tag or an autolink, ``&`` before an entity, ``#`` at the start (a heading in a list item).
_MARKUP = re.compile(r"[\\`*\[\]|~]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])|<(?=[A-Za-z/!?])|&(?=[#A-Za-z])|^#")
_LIVE = r"(?P<pre>(?<!\\)(?:\\\\)*)"  # an even run of backslashes (or none): the next character is live
_LINK = re.compile(_LIVE + r"(?P<bang>!?)\[(?P<label>(?:[^\]\\]|\\.)*)\]\((?P<target>[^)]*)\)")
_ANGLE = re.compile(_LIVE + r"<[^>\n]*>")
_CODE = re.compile(r"(?<![\\`])(`+)(?!`)[\s\S]*?(?<!`)\1(?!`)")  # code spans and fences: shown verbatim
_OWN = re.compile(r"^command:(" + "|".join(re.escape(c) for c in COMMANDS) + r")(\?[^\s]*)?$")


def md(text: Any) -> str:
    """``text`` as literal markdown text on one line: whitespace runs (newlines too) and control characters
    become one space, and every character that could start markup is escaped."""
    flat = " ".join("".join(ch if ch.isprintable() else " " for ch in str(text)).split())
    return _MARKUP.sub(lambda m: "\\" + m.group(0), flat)


def code(text: Any) -> str:
    """``text`` as an inline code span (shown verbatim, never a link), on one line: the fence is longer than
    any run of backticks inside it."""
    flat = " ".join("".join(ch if ch.isprintable() else " " for ch in str(text)).split())
    fence = "`" * (max((len(r) for r in re.findall(r"`+", flat)), default=0) + 1)
    pad = " " if flat.startswith("`") or flat.endswith("`") or not flat else ""
    return f"{fence}{pad}{flat}{pad}{fence}"


def own_links_only(markdown: str) -> str:
    """``markdown`` with every link and image whose target is not one of this server's commands reduced to
    its text, and every autolink or HTML tag dropped (escaped text never matches: this guards templates)."""

    def link(m: re.Match[str]) -> str:
        if not m.group("bang") and _OWN.match(m.group("target").strip()):
            return m.group(0)
        return m.group("pre") + m.group("label")

    def clean(text: str) -> str:
        return _ANGLE.sub(lambda m: m.group("pre"), _LINK.sub(link, text))

    out, end = [], 0
    for m in _CODE.finditer(markdown):
        out += [clean(markdown[end : m.start()]), m.group(0)]
        end = m.end()
    return "".join([*out, clean(markdown[end:])])


def heatmap_text(grid: list[list[float]]) -> str:
    """A small text heatmap: one character per cell, darker = a larger fraction of mismatches."""
    rows = []
    for row in grid:
        cells = [v if isinstance(v, (int, float)) and not isinstance(v, bool) and v == v else 0.0 for v in row]
        rows.append(
            "".join(SHADES[max(0, min(len(SHADES) - 1, round(v * (len(SHADES) - 1))))] if v > 0 else "·" for v in cells)
        )
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
    """The last results of op ``name``: every piece of stored or user text escaped (see the module doc)."""
    if view is None:
        text = f"**{md(name)}**: no results yet"
        return own_links_only(
            text
            + (
                f" ({md(running)})"
                if running
                else f" (save a file of the op, or run {code(f'gpuemu test --op {name}')})"
            )
        )
    word = {"passed": "PASS", "failed": "FAIL", "error": "ERROR", "not_run": "NOT RUN"}.get(view.status, view.status)
    lines = [f"**{md(name)}**: {md(word)}: {md(view.message)} ({_ago(view.finished_at)})"]
    if running:
        lines[0] += f"; {md(running)}"
    if view.diagnosis:
        lines.append(f"\n*Diagnosis:* {md(view.diagnosis)}")
    if view.by_variant:
        lines += ["", "| dtype | layout | passed | max error / tolerance |", "|---|---|---|---|"]
        for v in view.by_variant:
            passed = f"{md(v['passed'])}/{md(v['cases'])}"
            lines.append(f"| {md(v['dtype'])} | {md(v['layout'])} | {passed} | {_ratio(v['max_ratio'])} |")
    if view.failures:
        row = view.failures[0]
        shapes = " ".join(f"{k}={s}" for k, s in json.loads(row["shapes"] or "{}").items())
        tol = json.loads(row["tolerance"]) if row.get("tolerance") else None
        numeric = isinstance(row.get("max_abs"), (int, float)) and row.get("kind") == "mismatch"
        err = f"max abs err {row['max_abs']:.3g}" if numeric else (row.get("message") or "").split("\n")[0]
        if tol and numeric:
            err += f" vs atol={tol[0]:g} rtol={tol[1]:g}"
        lines += [
            "",
            f"First failure: **{md(KIND_TEXT.get(row['kind'], row['kind']))}** at seed {md(row['seed'])}: "
            f"{md(row['dtype'])} {md(shapes)} layout={md(row['layout'])} dist={md(row['distribution'])}: {md(err)}",
        ]
        detail = json.loads(row.get("detail") or "{}")
        for out_name, feats in (detail.get("features", {}).get("outputs") or {}).items():
            grid = feats.get("heatmap") if isinstance(feats, dict) else None
            if grid and isinstance(grid, list) and all(isinstance(r, list) for r in grid):
                lines += [
                    "",
                    f"Where {code(out_name)} is wrong (rows x columns, darker = more mismatches):",
                    "```",
                    heatmap_text(grid),
                    "```",
                ]
                break
        mini = view.minimized.get(row["seed"])
        if mini:
            lines.append(f"Minimized: {md(' '.join(f'{k}={s}' for k, s in mini['shapes'].items()))}")
        lines.append(f"\nReplay: {code(replay_command(name, row['seed']))}")
    return own_links_only("\n".join(lines))


def kernel_hover(view: OpView | None, name: str) -> str:
    """The last lint of kernel ``name``, its text escaped like :func:`op_hover`'s."""
    if view is None:
        return own_links_only(
            f"**{md(name)}**: not linted yet (save the .cu file, or run {code(f'gpuemu lint --kernel {name}')})"
        )
    entry = view.detail or {}
    summary = entry.get("summary", "")
    lines = [f"**kernel {md(name)}**: {md(str(view.status).upper())} {md(summary)} ({_ago(view.finished_at)})"]
    res = entry.get("resources") or {}
    if isinstance(res, dict) and res:
        lines += ["", "| resource | value |", "|---|---|"]
        for k, v in res.items():
            if v is not None and not isinstance(v, dict):
                lines.append(f"| {md(str(k).replace('_', ' '))} | {md(v)} |")
    for f in (entry.get("findings") or [])[:10]:
        if isinstance(f, dict):
            lines.append(f"- {md(f.get('severity'))} {code(f.get('code'))}: {md(f.get('message'))}")
    return own_links_only("\n".join(lines))
