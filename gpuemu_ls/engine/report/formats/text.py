"""The terminal and CI-log rendering of a results document."""

from __future__ import annotations

from typing import Any

from ...oracle.tier import edge_summary
from ..lines import KIND_TEXT, budget_head

WORD = {
    "passed": "PASS",
    "failed": "FAIL",
    "edge": "EDGE",
    "not_judged": "UNJUDGED",
    "error": "ERROR",
    "not_run": "NOT RUN",
    "cancelled": "CANCELLED",
}
#: The tag of one failing case's line.
CASE_WORD = {"failed": "FAIL", "edge": "EDGE", "error": "ERROR"}


def nonfinite_text(kind: str, ex: dict[str, Any]) -> str:
    """ "NaN where the reference is 0.567 (first at [2, 2, 0], 1 of 16 elements)": what a NaN failure is."""
    op, ref = _num(ex.get("op")), _num(ex.get("ref"))
    head = {
        "unexpected_nan": f"NaN where the reference is {ref}",
        "unexpected_inf": f"{op} where the reference is {ref}",
        "missing_nan": f"{op} where the reference is NaN",
    }[kind]
    return f"{head} (first at {ex.get('index')}, {ex.get('count', '?')} of {ex.get('total', '?')} elements)"


def _num(x: Any) -> str:
    return f"{x:.4g}" if isinstance(x, (int, float)) else str(x)


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and x == x and abs(x) != float("inf")


def nonfinite_worst(worst: dict[str, Any], mismatches: Any, total: Any) -> str:
    """ "op nan where the reference is inf at [9] (3 of 16 elements off)": a worst element that is not a number
    is shown as itself, never as the finite error of some other element."""
    return (
        f"op {_num(worst.get('op')).lower()} where the reference is {_num(worst.get('ref')).lower()} at "
        f"{worst.get('index')} ({mismatches} of {total} elements off)"
    )


def _err(f: dict[str, Any]) -> str:
    where = f" (first at {f['first_index']})" if f.get("first_index") is not None else ""
    examples = f.get("examples") or {}
    worst = f.get("worst") or {}
    if worst and not all(_finite(worst.get(k)) for k in ("op", "ref")):  # the worst element is NaN/inf
        return nonfinite_worst(worst, f.get("mismatches"), f.get("total"))
    for key, what in (
        ("unexpected_nan", "NaN where the reference is finite"),
        ("unexpected_inf", "inf where the reference is finite"),
        ("missing_nan", "finite where the reference is NaN"),
    ):
        if f["kind"] == key and examples.get(key):
            return nonfinite_text(key, examples[key])
        if f["kind"] == key and f.get(key):
            return f"{f[key]}/{f.get('total')} outputs {what}{where}"
    if f["kind"] in ("mismatch", "unexpected_nan", "unexpected_inf", "missing_nan") and f.get("max_abs") is not None:
        tol = f.get("tolerance")
        text = f"max abs err {f['max_abs']:.3g}"
        if tol:
            text += f" vs atol={tol[0]:g} rtol={tol[1]:g}"
        ratio = f.get("max_ratio")
        if isinstance(ratio, (int, float)) and ratio > 0:
            text += f" ({ratio:.3g}x tolerance)" if ratio < 1e299 else " (non-finite)"
        return text
    return f.get("message", "")


def failure_text(op: str, f: dict[str, Any], replay_prefix: str = "") -> str:
    tag = CASE_WORD.get(f["status"], "ERROR")
    shapes = " ".join(f"{k}={v}" for k, v in f["shapes"].items())
    where = f" ({f['file']}:{f['line']})" if f.get("file") and f.get("line") else ""
    if f.get("file") and not f.get("line"):
        where = f" ({f['file']})"
    replay = f["replay"] if not replay_prefix else f["replay"].replace("gpuemu ", f"gpuemu {replay_prefix} ", 1)
    edge = f"\n    edge finding: {f['edge']['text']}" if f.get("tier") == "edge" and f.get("edge") else ""
    upstream = " upstream=" + ",".join(f"{v}" for v in f["upstream"].values()) if f.get("upstream") else ""
    worst = f" (worst output {f['output']})" if f.get("output") else ""
    return (
        f"{tag} {op} [{f['kind']}: {KIND_TEXT.get(f['kind'], f['kind'])}] seed={f['seed']} dtype={f['dtype']} "
        f"{shapes} layout={f['layout']} dist={f['distribution']}{upstream}: {_err(f)}{worst}{where}{edge}"
        f"\n    replay: {replay}"
    )


def edge_line(e: dict[str, Any]) -> str:
    """An op's edge findings in one line: what they share, and that they are not a bug of this kernel."""
    records = [f["edge"] for f in e.get("failures", []) if f.get("tier") == "edge" and f.get("edge")]
    return edge_summary(records, strict=bool(e.get("strict"))) if records else f"{e.get('edge')} edge findings"


def budget_text(budget: dict[str, Any]) -> str:
    """An op's budget in a few words: "budget 20s (op budget): 24/100 cases, all 31 classes covered", or the
    classes it cut."""
    head = budget_head(budget)
    cases = f"{budget.get('ran')}/{budget.get('planned')} cases"
    if budget.get("smaller_cases"):
        cases += f" ({budget['smaller_cases']} smaller stand-ins)"
    cut = budget.get("cut_classes") or []
    if not cut:
        return f"{head}: {cases}, all {budget.get('classes')} classes covered"
    more = ", ..." if len(cut) > 6 else ""
    return f"{head}: {cases}, {len(cut)} of {budget.get('classes')} classes cut: {', '.join(map(str, cut[:6]))}{more}"


def render_text(doc: dict[str, Any], *, show: int = 3, replay_prefix: str = "") -> str:
    lines: list[str] = []
    for e in doc["ops"]:
        stats = e.get("stats") or {}
        err = ""
        if e["status"] in ("failed", "edge") and stats.get("nonfinite_cases"):
            err = f"NaN/inf in {stats['nonfinite_cases']} cases"  # not a small finite "max err"
        elif e["status"] in ("passed", "edge") and isinstance(stats.get("max_ratio"), (int, float)):
            # how close to failing, in the unit the verdict uses: an absolute error (1.8e+33 on huge values) or a
            # relative one (1e+11 where a gradient's reference is ~0) says nothing of that on its own
            err = f"worst {stats['max_ratio']:.0%} of tolerance"
        elif stats.get("max_abs") is not None:
            err = f"max err {stats['max_abs']:.3g}"
        message = e["message"]
        # a long message keeps its figures apart (never "... not judged) NaN/inf in 11 cases", run together)
        body = f"{message:40} {err:32}" if len(message) <= 40 else (f"{message}; {err}" if err else message)
        lines.append(f"{WORD.get(e['status'], e['status']) + ' ':8}{e['name']:24} {body} {e.get('elapsed', 0):6.2f} s")
        se = e.get("setup_error")
        if se:
            loc = f"{se.get('file')}:{se.get('line')}: " if se.get("file") else ""
            msg = (se.get("message") or "").strip().splitlines()
            lines.append(f"    {loc}{msg[0] if msg else ''}")
        if e["status"] == "not_run":
            lines.append(f"    {e['message']}")
        if e.get("diagnosis"):
            lines.append(f"    diagnosis: {e['diagnosis']}")
        if e.get("edge"):
            lines.append(f"    {edge_line(e)}")
        if e["status"] == "not_judged" and e.get("reason"):
            lines.append(f"    {e['reason']}")
        b = e.get("budget")
        if b and (b.get("cut_cases") or b.get("cut_classes")):
            lines.append(f"    {budget_text(b)}")
        for f in e["failures"][:show]:
            lines.append("    " + failure_text(e["name"], f, replay_prefix).replace("\n", "\n    "))
        more = e.get("failures_total", len(e["failures"])) - min(show, len(e["failures"]))
        if more > 0:
            lines.append(f"    ... {more} more (gpuemu failures --op {e['name']})")
    unchecked = 0
    for k in doc["kernels"]:
        word = WORD.get(k["status"], k["status"])
        if k["status"] == "passed" and k.get("limits") is False:
            word, unchecked = "INFO", unchecked + 1  # figures only: nothing could have failed
        lines.append(f"{word:8}{k['name']:24} kernel {k.get('summary', '')}")
        for f in k.get("findings", [])[: max(show, 10)]:
            lines.append(
                f"    {f.get('file')}:{f.get('line')}: {f.get('severity')} {f.get('code')}: {f.get('message')}"
            )
        if k["status"] == "not_run" and k.get("message"):
            lines.append(f"    {k['message']}")
    if unchecked:
        lines.append(
            f"no limits apply to {unchecked} kernel(s) (INFO: figures only): add a [[kernels]] entry with "
            "artifact_checks (e.g. max_spills = 0, max_registers = 128) or [cuda.artifact_checks] to check them"
        )
    for r in doc.get("regressions", []):
        lines.append(f"REGRESSION {r['kind']} {r['name']}: {r['reason']}")
    if (doc.get("budget") or {}).get("line"):
        lines.append(doc["budget"]["line"])
    s = doc["summary"]
    tail = (
        f"{s.get('passed', 0) - unchecked} passed, "
        + (f"{s['edge']} with edge findings only, " if s.get("edge") else "")
        + f"{s.get('failed', 0)} failed, {s.get('error', 0)} errors, "
        + (f"{s['not_judged']} not judged, " if s.get("not_judged") else "")
        + f"{s.get('not_run', 0)} not run"
        + (f", {unchecked} without limits" if unchecked else "")
    )
    if s.get("regressions"):
        tail += f", {s['regressions']} regressions" + (
            "" if doc.get("fail_on_regression") else " (not failing the run)"
        )
    cases = sum(e.get("cases", 0) for e in doc["ops"])
    lint_only = not s.get("ops") and not cases  # no case ran: no seed drew anything
    tail += " (" if lint_only else f" ({s.get('ops', 0)} ops, {cases} cases, "
    if s.get("kernels"):
        tail += f"{s['kernels']} kernels, "
    seed = "" if lint_only else f"seed {doc.get('seed')}, "
    tail += f"{doc.get('mode')}, {seed}{doc.get('elapsed', 0):.1f} s)"
    if doc.get("shard"):
        tail += f" [shard {doc['shard']}]"
    if doc.get("run_id"):
        tail += (
            f"; run {doc['run_id'][:12]} stored"
            if doc.get("stored", True)
            else f"; run {doc['run_id'][:12]} NOT stored: the result store was replaced during the run (a forced"
            " `gpuemu store reset` or `repair`); its results went to the file set aside"
        )
    lines.append(tail)
    return "\n".join(lines)
