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

from ..engine.report.formats.text import budget_text
from ..engine.report.lines import KIND_TEXT, replay_command
from ..session.workspace import OpView
from .code_actions import COMMANDS
from .diagnostics import case_detail, case_plan, error_vs_tolerance, headline_row

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


def _worst(view: OpView) -> str:
    """The headline's error. A failing op: the case its diagnostic quotes, in the diagnostic's words (one
    source: a hover that named the run's worst case, say a non-finite edge finding, contradicted the
    diagnostic just above it). A passing op: the worst error against tolerance over the run."""
    row = headline_row(view) if view.failures else None
    if row is not None:
        return f"seed {md(row['seed'])}: {md(error_vs_tolerance(row))}"
    ratios = [v["max_ratio"] for v in view.by_variant if isinstance(v.get("max_ratio"), (int, float))]
    if not ratios:
        return ""
    worst = max(ratios)
    if worst >= 1e299:
        text = "worst error non-finite (NaN or inf where the reference is finite)"
    else:
        text = f"worst error {_ratio(worst)}{' tolerance' if worst >= 1 else ' of tolerance'}"
    return text


def _summary(view: OpView) -> str:
    parts = [f"{view.passed}/{view.cases} cases passed"]
    if view.failed:
        parts.append(f"{view.failed} failed")
    if view.errors:
        parts.append(f"{view.errors} errors")
    return ", ".join(parts)


def _span_text(bad_runs: Any, total: Any, noun: str) -> str | None:
    """Where along one axis the errors sit, in words: "every column", "the last 37 of 1000 columns"."""
    if not isinstance(total, int) or total <= 0 or not isinstance(bad_runs, list) or not bad_runs:
        return None
    spans = [(int(a), int(b)) for a, b in bad_runs if isinstance(a, int) and isinstance(b, int)]
    if not spans:
        return None
    count = sum(b - a for a, b in spans)
    plural = noun if total == 1 else noun + "s"
    if len(spans) == 1:
        a, b = spans[0]
        if (a, b) == (0, total):
            return f"every {noun}" if total > 1 else f"the one {noun}"
        if b == total:
            return f"the last {b - a} of {total} {plural}"
        if a == 0:
            return f"the first {b - a} of {total} {plural}"
        return f"{noun} {a} of {total}" if b - a == 1 else f"{plural} {a}..{b - 1} of {total}"
    shown = ", ".join(f"{a}" if b - a == 1 else f"{a}..{b - 1}" for a, b in spans[:4])
    more = ", ..." if len(spans) > 4 else ""
    at_least = "at least " if len(spans) >= 8 else ""  # only the first runs are stored
    return f"{at_least}{count} of {total} {plural} ({shown}{more})"


def _informative(grid: list[list[float]]) -> bool:
    """A heatmap says something only where its cells differ: an all-``@`` block (errors everywhere) does not."""
    text = heatmap_text(grid)
    return len({ch for ch in text if ch != "\n"}) > 1


def _pattern(feats: dict[str, Any]) -> str | None:
    """The failing elements' pattern in a word or two: "a row", "a column", "a tail" (the last columns of the
    rows), "one element"; None where it is none of these (every row and column holds some: their runs say so)."""
    rows, cols, bad_rows, bad_cols = (feats.get(k) for k in ("rows", "cols", "bad_rows", "bad_cols"))
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (rows, cols, bad_rows, bad_cols)):
        return None
    col_runs = feats.get("bad_col_runs") if isinstance(feats.get("bad_col_runs"), list) else []
    if bad_rows == 1 and bad_cols == 1:
        return "one element"
    if bad_rows == 1:
        return "a row"
    if bad_cols == 1 and cols > 1:
        return "a column"
    if len(col_runs) == 1 and col_runs[0][1] == cols and col_runs[0][0] > 0:
        return "a tail"
    return None


def layout_text(feats: dict[str, Any]) -> str:
    """Where a failing output's errors sit, in words ("every row; the last 7 of 135 columns: a tail"): what the
    hover and an editor's diff say of the failing elements' layout (one source)."""
    rows_text = _span_text(feats.get("bad_row_runs"), feats.get("rows"), "row")
    if rows_text is None and isinstance(feats.get("bad_rows"), int) and isinstance(feats.get("rows"), int):
        rows_text = f"{feats['bad_rows']} of {feats['rows']} rows"
    cols_text = _span_text(feats.get("bad_col_runs"), feats.get("cols"), "column")
    axes = "; ".join(t for t in (rows_text, cols_text) if t)
    masked = feats.get("bad_rows_masked")
    if isinstance(masked, int) and masked:
        axes += f" ({masked} of them fully masked)"
    pattern = _pattern(feats)
    return f"{axes}: {pattern}" if axes and pattern else axes


def _where(row: dict[str, Any]) -> list[str]:
    """Where in the output the first failing case's errors sit: along the rows and columns in words, then the
    heatmap only when it carries information."""
    detail = case_detail(row)
    outputs = (detail.get("features") or {}).get("outputs") or {}
    for out_name, feats in outputs.items():
        if not isinstance(feats, dict):
            continue
        axes = layout_text(feats)
        lines = []
        if axes:
            lines.append(f"Where {code(out_name)} is wrong at seed {md(row['seed'])}: {md(axes)}")
        grid = feats.get("heatmap")
        if isinstance(grid, list) and grid and all(isinstance(r, list) for r in grid) and _informative(grid):
            lines += ["", "```text", heatmap_text(grid), "```", "(rows x columns, darker = more mismatches)"]
        if lines:
            return ["", *lines]
    return []


def _table(view: OpView) -> list[str]:
    """Cases by dtype x layout, with the distributions that failed in each."""
    if not view.by_variant:
        return []
    failing: dict[tuple[str, str], list[str]] = {}
    for r in view.failing_by_distribution:
        failing.setdefault((r["dtype"], r["layout"]), []).append(f"{r['distribution']} ({r['failed']})")
    with_dists = bool(failing)
    head = "| dtype | layout | passed | worst / tolerance |" + (" failing distributions |" if with_dists else "")
    lines = ["", head, "|---|---|---|---|" + ("---|" if with_dists else "")]
    for v in view.by_variant:
        cells = [md(v["dtype"]), md(v["layout"]), f"{md(v['passed'])}/{md(v['cases'])}", _ratio(v["max_ratio"])]
        if with_dists:
            cells.append(md(", ".join(failing.get((v["dtype"], v["layout"]), [])) or "-"))
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _time_lines(view: OpView) -> list[str]:
    """The op's own time by phase, and what its budget let run and cut (stored by runs since issue 16)."""
    timing = view.detail.get("timing") if isinstance(view.detail, dict) else None
    budget = view.detail.get("budget") if isinstance(view.detail, dict) else None
    lines: list[str] = []
    if isinstance(timing, dict) and isinstance(timing.get("total"), (int, float)):
        parts = [
            f"{label} {timing[key]:.2f} s"
            for key, label in (
                ("op", "op"),
                ("reference", "reference"),
                ("generate", "generation"),
                ("compare", "comparison"),
                ("other", "other"),
            )
            if isinstance(timing.get(key), (int, float))
        ]
        lines.append(f"\n*Time:* {timing['total']:.2f} s ({md(', '.join(parts))})")
    if isinstance(budget, dict) and isinstance(budget.get("planned"), int):
        lines.append(f"\n*Budget:* {md(budget_text(budget).removeprefix('budget '))}")
    return lines


def op_hover(view: OpView | None, name: str, running: str | None = None, *, beside_diagnostic: bool = False) -> str:
    """The last results of op ``name``: a one-line summary (status, cases, worst error against tolerance),
    then the table by dtype x layout, then where the errors sit. ``beside_diagnostic``: the editor shows the
    op's diagnostic above this hover, so its text (the diagnosis, the failing case, the replay) is left out.
    Every piece of stored or user text is escaped (see the module doc)."""
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
    word = {
        "passed": "PASS",
        "failed": "FAIL",
        "edge": "EDGE",
        "not_judged": "NOT JUDGED",
        "error": "ERROR",
        "not_run": "NOT RUN",
    }.get(view.status, view.status)
    head = [f"**{md(name)}** {md(word)}", md(_summary(view)) if view.cases else md(view.message)]
    worst = _worst(view)
    if worst:
        head.append(worst)
    head.append(_ago(view.finished_at))
    lines = [" · ".join(head)]
    if running:
        lines.append(f"\n*Now:* {md(running)}")
    lines += _table(view)
    if view.failures:
        lines += _where(view.failures[0])
        if not beside_diagnostic:
            if view.diagnosis:
                lines.append(f"\n*Diagnosis:* {md(view.diagnosis)}")
            bugs = [r for r in view.failures if case_detail(r).get("tier") != "edge"]
            row = (bugs or view.failures)[0]
            shapes = " ".join(f"{k}={s}" for k, s in json.loads(row["shapes"] or "{}").items())
            edge = case_detail(row).get("edge") if not bugs else None
            if edge:
                why = md(edge.get("text", ""))
                lines.append(f"\n*Edge finding:* {why} (not a bug of this kernel; strict = true fails it)")
            first = "First edge finding" if edge else "First failure"
            lines.append(
                f"\n{first}: {md(KIND_TEXT.get(row['kind'], row['kind'] or row['status']))} at seed "
                f"{md(row['seed'])}: {md(row['dtype'])} {md(shapes)} layout={md(row['layout'])} "
                f"dist={md(row['distribution'])}"
            )
            mini = view.minimized.get(row["seed"])
            if mini:
                lines.append(f"\nMinimized: {md(' '.join(f'{k}={s}' for k, s in mini['shapes'].items()))}")
            lines.append(f"\nReplay: {code(replay_command(name, row['seed'], plan=case_plan(row)))}")
    elif view.diagnosis and not beside_diagnostic:
        lines.append(f"\n*Diagnosis:* {md(view.diagnosis)}")
    lines += _time_lines(view)
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
