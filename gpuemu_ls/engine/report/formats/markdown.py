"""A results document as GitHub-flavoured Markdown: the job summary of the GitHub Action (and any CI page
that renders Markdown). One table of ops and kernels, then the first failing cases of each failing op
with the command that replays them. Text from user code is escaped: it is shown, never rendered."""

from __future__ import annotations

import re
from typing import Any

from .text import WORD, _err, edge_line

ICON = {
    "passed": "✅",
    "failed": "❌",
    "edge": "⚠️",
    "not_judged": "❔",
    "error": "💥",
    "not_run": "⏸️",
    "cancelled": "⏹️",
}
_SPECIAL = re.compile(r"([\\`*_\[\]|<>~])")


def _md(text: Any) -> str:
    """Plain text in a Markdown table cell or line: one line, every markup character escaped."""
    return _SPECIAL.sub(r"\\\1", " ".join(str(text).split()))


def _code(text: str) -> str:
    """A code span that holds any text (backticks included)."""
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    return f"{fence} {text} {fence}" if longest else f"`{text}`"


def render_markdown(doc: dict[str, Any], *, show: int = 3, replay_prefix: str = "") -> str:
    s = doc["summary"]
    lines = [
        f"### gpuemu-ls: {WORD.get(doc['status'], doc['status'])} "
        f"({s.get('passed', 0)} passed, "
        + (f"{s['edge']} with edge findings only, " if s.get("edge") else "")
        + f"{s.get('failed', 0)} failed, {s.get('error', 0)} errors, "
        + (f"{s['not_judged']} not judged, " if s.get("not_judged") else "")
        + f"{s.get('not_run', 0)} not run; {doc.get('mode')}"
        + (f", seed {doc.get('seed')})" if s.get("ops") else ")"),
        "",
        "| | name | verdict | cases | diagnosis |",
        "|---|---|---|---|---|",
    ]
    for e in doc["ops"]:
        cases = f"{e.get('passed', 0)}/{e.get('cases', 0)}"
        said = e.get("diagnosis") or ""
        if e.get("edge"):
            said = f"{said} {edge_line(e)}".strip()
        if e["status"] == "not_judged" and e.get("reason"):
            said = f"{said} {e['reason']}".strip()
        lines.append(
            f"| {ICON.get(e['status'], '')} | {_md(e['name'])} | {_md(e.get('message', ''))} | {cases} | {_md(said)} |"
        )
    for k in doc["kernels"]:
        lines.append(f"| {ICON.get(k['status'], '')} | {_md(k['name'])} (kernel) | {_md(k.get('summary', ''))} | | |")
    failing = [e for e in doc["ops"] if e.get("failures")]
    for e in failing:
        lines += ["", f"#### {_md(e['name'])}", ""]
        for f in e["failures"][:show]:
            shapes = " ".join(f"{n}={v}" for n, v in f["shapes"].items())
            replay = f["replay"] if not replay_prefix else f["replay"].replace("gpuemu ", f"gpuemu {replay_prefix} ", 1)
            edge = "edge finding: " if f.get("tier") == "edge" else ""
            lines.append(
                f"- {edge}seed {f['seed']}, {f['dtype']} {_md(shapes)}, {f['layout']}, {f['distribution']}: "
                f"{_md(_err(f))}  \n  replay: {_code(replay)}"
            )
        more = e.get("failures_total", len(e["failures"])) - min(show, len(e["failures"]))
        if more > 0:
            lines.append(f"- ... {more} more ({_code('gpuemu failures --op ' + e['name'])})")
    for k in doc["kernels"]:
        errors = [f for f in k.get("findings", []) if f.get("severity") == "error"]
        if errors:
            lines += ["", f"#### {_md(k['name'])} (kernel)", ""]
            lines += [f"- {_md(f.get('file'))}:{f.get('line')}: {_md(f.get('message'))}" for f in errors[:show]]
    for r in doc.get("regressions", []):
        lines.append(f"- regression {_md(r['kind'])} {_md(r['name'])}: {_md(r['reason'])}")
    return "\n".join(lines) + "\n"
