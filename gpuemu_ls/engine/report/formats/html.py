"""The results document as one self-contained HTML page (``--format html``): the run's provenance, a table of
every op that filters in the page, and for each op that did not pass its verdict, tiers, diagnosis, failing
cases with their replay commands and plots. It loads nothing at view time (a Content-Security-Policy says so
to the browser) and prints whole.

Every number in it is the document's; the plots add what the store holds of the same runs (each case of a
failing op, earlier runs). Plots are drawn for at most :data:`MAX_PLOTTED_OPS` ops that did not pass (bugs
first, then errors, in table order) and for the run's summaries, which keeps a 1,000-op page to seconds: a
figure costs matplotlib 0.15-0.5 s.
"""

from __future__ import annotations

import datetime
from typing import Any

from ..libraries import shown
from ..redact import redact as redact_document
from . import html_plots as plots
from .html_data import Case, CaseBook, open_casebook
from .html_page import data_uri_svg, esc, page
from .text import WORD, _err

MAX_PLOTTED_OPS = 12
#: Failing cases listed per op (the document keeps up to 100).
MAX_LISTED_FAILURES = 10
NOT_PASSED = ("failed", "error", "edge", "not_judged", "not_run", "cancelled")
PLOTS_NEED = "plots need matplotlib: pip install 'gpuemu-ls[report]'"


def render_html(doc: dict[str, Any], *, show: int = 3, replay_prefix: str = "", redact: bool = False) -> str:
    """The page of ``doc``; with ``redact`` absolute paths and the host name are left out of it."""
    book = open_casebook(doc)  # before redacting: the store is found by the workspace's path
    try:
        shown = redact_document(doc) if redact else doc
        body = _body(doc, shown, book, max(show, MAX_LISTED_FAILURES), replay_prefix)
    finally:
        book.close()
    return page(f"gpuemu-ls report: {shown.get('project') or shown.get('workspace') or ''}", body)


def _body(doc: dict[str, Any], shown: dict[str, Any], book: CaseBook, listed: int, prefix: str) -> str:
    can_plot = plots.available()
    parts = [
        f"<h1>gpuemu-ls correctness report: {esc(shown.get('project') or '')}</h1>",
        f'<p class="verdict v-{esc(shown.get("status"))}" id="run-status">{_word(shown.get("status"))}'
        f" &middot; {_summary_text(shown.get('summary') or {})}</p>",
        _run_facts(shown),
    ]
    if not can_plot:
        parts.append(f'<p class="note" id="plots-note">{esc(PLOTS_NEED)}</p>')
    elif book.note:
        parts.append(f'<p class="note" id="store-note">{esc(book.note)}</p>')
    if can_plot:
        parts.append(_summaries(shown, book))
    parts.append(_op_table(shown))
    parts.append(_op_details(doc, shown, book, listed, prefix, can_plot))
    parts.append(_kernels(shown))
    parts.append(_regressions(shown))
    return "\n".join(p for p in parts if p)


def _word(status: Any) -> str:
    return esc(WORD.get(status, status))


def _summary_text(summary: dict[str, Any]) -> str:
    counts = ", ".join(f"{summary[s]} {s}" for s in WORD if summary.get(s))
    return esc(f"{summary.get('ops', 0)} ops, {summary.get('kernels', 0)} kernels: {counts or 'nothing ran'}")


def _date(ts: Any) -> str:
    if not isinstance(ts, (int, float)):
        return ""
    return datetime.datetime.fromtimestamp(ts, datetime.timezone.utc).isoformat(timespec="seconds")


def _run_facts(doc: dict[str, Any]) -> str:
    prov = doc.get("provenance") or {}
    git = prov.get("git")
    machine = prov.get("machine") or {}
    if git:
        commit = git.get("commit", "") + (f" (dirty, diff sha256 {git.get('diff_sha256')})" if git.get("dirty") else "")
    else:
        commit = "not a git checkout" if prov else ""
    budget = doc.get("budget") or {}
    facts = [
        ("tool", f"{(doc.get('tool') or {}).get('name', 'gpuemu-ls')} {(doc.get('tool') or {}).get('version', '')}"),
        ("workspace", doc.get("workspace")),
        ("config", doc.get("config")),
        ("resolved config sha256", prov.get("config_sha256")),
        (f"{doc.get('config') or 'gpuemu.toml'} sha256", prov.get("toml_sha256")),
        ("git commit", commit),
        ("seed", doc.get("seed")),
        ("mode", doc.get("mode")),
        ("run", doc.get("run_id")),
        ("shard", doc.get("shard") or ", ".join(map(str, doc.get("merged_from") or [])) or None),
        (
            "machine",
            ", ".join(f"{machine[k]}" for k in ("host", "os", "arch") if machine.get(k))
            + (f", Python {machine['python']}, {machine.get('cpus')} CPUs" if machine.get("python") else ""),
        ),
        ("libraries", shown(prov.get("libraries"))),
        ("date", prov.get("date") or _date(doc.get("created_at"))),
        ("provenance of", {"run": "the run", "report": "the workspace when this report was built"}.get(prov.get("of"))),
        ("elapsed", f"{doc['elapsed']:.2f} s" if isinstance(doc.get("elapsed"), (int, float)) else None),
        ("budget cuts", budget.get("line") or ("none" if budget else None)),
    ]
    rows = "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in facts if v not in (None, ""))
    return f'<h2>Run</h2>\n<dl class="facts" id="run-facts">{rows}</dl>'


def _img(svg: str, alt: str, cls: str = "plot") -> str:
    return f'<img class="{cls}" alt="{esc(alt)}" src="{data_uri_svg(svg)}">'


def _summaries(doc: dict[str, Any], book: CaseBook) -> str:
    out = ["<h2>Summary</h2>"]
    ratios = [(e.get("stats") or {}).get("max_ratio") for e in doc.get("ops", [])]
    out.append(_img(plots.summary_figure(doc.get("summary") or {}, [_float(r) for r in ratios]), "verdicts and errors"))
    if book.history:
        out.append(_img(plots.history_figure(book.history), "op verdicts of the last stored runs"))
    figures = _lint_figures(doc)
    if figures:
        out.append(_img(plots.lint_figure(figures), "kernel lint figures against their limits"))
    return "\n".join(out)


def _float(x: Any) -> float | None:
    if isinstance(x, (int, float)):
        return float(x)
    if x in ("inf", "nan"):
        return plots.NON_FINITE_RATIO * 10
    return None


def _lint_figures(doc: dict[str, Any]) -> list[tuple[str, float, float]]:
    out = []
    for k in doc.get("kernels", []):
        for f in k.get("findings") or []:
            if isinstance(f.get("value"), (int, float)) and isinstance(f.get("limit"), (int, float)):
                out.append((f"{k.get('name')}: {f.get('code')}", float(f["value"]), float(f["limit"])))
    return out


def _tiers(e: dict[str, Any]) -> dict[str, Any]:
    """An op's cases by tier: a bug (a failing case), an edge finding, out of range, suspect (NaN/inf both
    sides could explain); None where the document does not count it (verdicts stored before it kept them)."""
    st = e.get("stats") or {}
    suspect = None
    if "suspect_cases" in st:
        suspect = (st.get("suspect_cases") or 0) + (st.get("suspect_inf_cases") or 0)
    return {
        "bug": e.get("failed"),
        "edge": e.get("edge"),
        "out_of_range": st.get("out_of_range_cases"),
        "suspect": suspect,
    }


def _num(x: Any) -> str:
    if isinstance(x, bool) or x is None:
        return "–"
    if isinstance(x, int):
        return str(x)
    if isinstance(x, float):
        return "non-finite" if x >= plots.NON_FINITE_RATIO else f"{x:.4g}"
    return esc(x)


def _op_table(doc: dict[str, Any]) -> str:
    ops = doc.get("ops", [])
    if not ops:
        return "<h2>Ops</h2><p>No ops in this document.</p>"
    head = (
        "<tr><th>op</th><th>verdict</th><th class='n'>cases</th><th class='n'>passed</th><th class='n'>bug</th>"
        "<th class='n'>edge</th><th class='n'>out of range</th><th class='n'>suspect</th><th class='n'>errors</th>"
        "<th class='n'>max error / tol</th><th>diagnosis</th></tr>"
    ).replace("'", '"')
    rows = []
    for i, e in enumerate(ops):
        t = _tiers(e)
        name = esc(e["name"])
        link = f'<a href="#op-{i}">{name}</a>' if e["status"] in NOT_PASSED else name
        rows.append(
            f'<tr data-name="{esc(str(e["name"]).lower())}" data-status="{esc(e["status"])}" data-op="{name}">'
            f'<td class="name">{link}</td><td class="verdict v-{esc(e["status"])}">{_word(e["status"])}</td>'
            f'<td class="cases n">{_num(e.get("cases"))}</td><td class="passed n">{_num(e.get("passed"))}</td>'
            f'<td class="bug n">{_num(t["bug"])}</td><td class="edge n">{_num(t["edge"])}</td>'
            f'<td class="out_of_range n">{_num(t["out_of_range"])}</td><td class="suspect n">{_num(t["suspect"])}</td>'
            f'<td class="errors n">{_num(e.get("errors"))}</td>'
            f'<td class="max_ratio n">{_num(_float((e.get("stats") or {}).get("max_ratio")))}</td>'
            f'<td class="diagnosis">{esc(e.get("diagnosis") or "")}</td></tr>'
        )
    statuses = sorted({e["status"] for e in ops})
    options = "".join(f'<option value="{esc(s)}">{_word(s)}</option>' for s in statuses)
    return (
        f"<h2>Ops ({len(ops)})</h2>\n"
        '<div class="filter"><input id="op-filter" type="search" placeholder="filter ops by name" '
        'aria-label="filter ops by name"><select id="op-status" aria-label="verdict">'
        f'<option value="">every verdict</option>{options}</select><span id="op-count"></span></div>\n'
        f'<table id="op-table"><thead>{head}</thead><tbody>\n' + "\n".join(rows) + "\n</tbody></table>"
    )


def _op_details(
    doc: dict[str, Any], shown: dict[str, Any], book: CaseBook, listed: int, prefix: str, can_plot: bool
) -> str:
    out = []
    ranked = sorted(
        (i for i, e in enumerate(doc.get("ops", [])) if e["status"] in NOT_PASSED and e.get("failures")),
        key=lambda i: NOT_PASSED.index(doc["ops"][i]["status"]),
    )
    plotted = set(ranked[:MAX_PLOTTED_OPS])
    for i, (raw, e) in enumerate(zip(doc.get("ops", []), shown.get("ops", []))):
        if e["status"] not in NOT_PASSED:
            continue
        parts = [
            f'<section class="op" id="op-{i}"><h3>{esc(e["name"])}: '
            f'<span class="verdict v-{esc(e["status"])}">{_word(e["status"])}</span></h3>'
        ]
        for label, text in (
            ("message", e.get("message")),
            ("diagnosis", e.get("diagnosis")),
            ("not judged", e.get("reason")),
            ("setup error", e.get("setup_error")),
            ("budget", (e.get("budget") or {}).get("line")),
        ):
            if text:
                parts.append(
                    f'<p><b>{esc(label)}:</b> <span class="{esc(label.replace(" ", "_"))}">{esc(text)}</span></p>'
                )
        if can_plot and raw.get("failures"):
            parts.append(
                _op_plot(doc, raw, book)
                if i in plotted
                else f'<p class="note">plots are drawn for {MAX_PLOTTED_OPS} of the {len(ranked)} ops that did not'
                " pass (bugs first); this one's cases are in the table below, the JSON document and the store</p>"
            )
        parts.append(_failures(e, listed, prefix))
        parts.append("</section>")
        out.append("\n".join(p for p in parts if p))
    return ("<h2>Ops that did not pass</h2>\n" + "\n".join(out)) if out else ""


def _op_plot(doc: dict[str, Any], e: dict[str, Any], book: CaseBook) -> str:
    run_id = e.get("run_id") or doc.get("run_id")
    fails = e.get("failures") or []
    bugs = [f for f in fails if f.get("tier") != "edge"] or fails
    worst = max(bugs, key=lambda f: _float(f.get("max_ratio")) or 0.0)
    cases = book.cases(run_id, e["name"])
    if not cases:  # no store: the document's failing cases alone
        cases = [
            Case(
                f["seed"],
                f["status"],
                f["dtype"],
                f["layout"],
                f["distribution"],
                f.get("dims") or {},
                _float(f.get("max_ratio")),
            )
            for f in fails
        ]
    grid = book.error_map(
        run_id, e["name"], worst["seed"], worst.get("output") or (worst.get("worst") or {}).get("output")
    )
    return _img(plots.op_figure(e["name"], cases, worst, grid), f"plots of {e['name']}")


def _failures(e: dict[str, Any], listed: int, prefix: str) -> str:
    fails = e.get("failures") or []
    if not fails:
        return ""
    rows = []
    for f in fails[:listed]:
        replay = f["replay"] if not prefix else f["replay"].replace("gpuemu ", f"gpuemu {prefix} ", 1)
        shapes = " ".join(f"{k}={v}" for k, v in (f.get("shapes") or {}).items())
        where = f"{f['file']}:{f['line']}" if f.get("file") and f.get("line") else (f.get("file") or "")
        edge = (f.get("edge") or {}).get("text") if f.get("tier") == "edge" else ""
        rows.append(
            f"<tr><td>{esc(f.get('tier') or f.get('status'))}</td><td>{esc(f.get('kind'))}</td>"
            f'<td class="n">{esc(f.get("seed"))}</td>'
            f"<td>{esc(f.get('dtype'))} {esc(shapes)}<br>{esc(f.get('layout'))}, {esc(f.get('distribution'))}</td>"
            f'<td class="err">{esc(_err(f))}'
            + (f'<br><span class="message">{esc(f.get("message"))}</span>' if f.get("message") else "")
            + (f"<br>edge finding: {esc(edge)}" if edge else "")
            + (f"<br><code>{esc(where)}</code>" if where else "")
            + f'</td><td><pre class="replay">{esc(replay)}</pre></td></tr>'
        )
    rest = int(e.get("failures_total") or len(fails)) - min(listed, len(fails))
    return (
        "<table class='failures'><thead><tr><th>tier</th><th>kind</th><th class='n'>seed</th><th>case</th>"
        "<th>what</th><th>replay</th></tr></thead><tbody>".replace("'", '"')
        + "".join(rows)
        + "</tbody></table>"
        + (f'<p class="note">{rest} more failing cases in the JSON document and the store</p>' if rest > 0 else "")
    )


def _kernels(doc: dict[str, Any]) -> str:
    ks = doc.get("kernels") or []
    if not ks:
        return ""
    rows = []
    for k in ks:
        findings = "".join(
            f"<li>{esc(f.get('severity'))} {esc(f.get('code'))}: {esc(f.get('message'))}</li>"
            for f in k.get("findings") or []
        )
        rows.append(
            f'<tr><td>{esc(k.get("name"))}</td><td class="verdict v-{esc(k.get("status"))}">'
            f"{_word(k.get('status'))}</td><td>{esc(k.get('summary') or k.get('message'))}"
            + (f"<ul>{findings}</ul>" if findings else "")
            + "</td></tr>"
        )
    return (
        f'<h2>Kernels ({len(ks)})</h2>\n<table id="kernel-table"><thead><tr><th>kernel</th><th>verdict</th>'
        "<th>figures and findings</th></tr></thead><tbody>" + "".join(rows) + "</tbody></table>"
    )


def _regressions(doc: dict[str, Any]) -> str:
    regs = doc.get("regressions") or []
    if not regs:
        return ""
    items = "".join(f"<li>{esc(r.get('kind'))} {esc(r.get('name'))}: {esc(r.get('reason'))}</li>" for r in regs)
    return f'<h2>Regressions ({len(regs)})</h2>\n<ul id="regressions">{items}</ul>'
