"""JUnit XML: one testcase per op (classname ``gpuemu.ops``) and per kernel (``gpuemu.kernels``).

Follows the Jenkins xunit ``junit-10.xsd`` (what GitHub, GitLab and Jenkins readers accept): a failing
op has a ``<failure>`` whose message holds op, seed, dtype, shape and layout; an op that could not
run has ``<error>`` (it errored) or ``<skipped>`` (nothing runnable).
"""

from __future__ import annotations

import datetime as _dt
import platform
import re
import xml.etree.ElementTree as ET
from typing import Any

from .text import edge_line, failure_text


def _fail_message(e: dict[str, Any]) -> str:
    if not e["failures"]:
        return e.get("message", "")
    f = e["failures"][0]
    shapes = " ".join(f"{k}={v}" for k, v in f["shapes"].items())
    return (
        f"{e['name']} [{f['kind']}] seed={f['seed']} dtype={f['dtype']} {shapes} layout={f['layout']} "
        f"dist={f['distribution']}: {f.get('message', '')}"
    )[:1000]


def _op_case(suite: ET.Element, e: dict[str, Any]) -> None:
    tc = ET.SubElement(suite, "testcase", classname="gpuemu.ops", name=e["name"], time=f"{e.get('elapsed', 0):.3f}")
    body = []
    if e.get("diagnosis"):
        body.append(f"diagnosis: {e['diagnosis']}")
    loc = e.get("source") or e.get("location")
    if loc:
        body.append(f"at {loc['file']}:{loc['line']}")
    body += [failure_text(e["name"], f) for f in e["failures"]]
    status = e["status"]
    if status == "not_run" or status == "cancelled":
        ET.SubElement(tc, "skipped", message=f"not run: {e.get('message', '')}"[:1000])
    elif status == "failed":
        el = ET.SubElement(
            tc, "failure", message=_fail_message(e), type=e["failures"][0]["kind"] if e["failures"] else "failed"
        )
        el.text = "\n".join(body)
    elif status == "not_judged":  # nothing was checked: never a pass
        why = e.get("reason") or "not judged"
        el = ET.SubElement(tc, "error", message=f"{e['name']}: {why}"[:1000], type="not_judged")
        el.text = "\n".join(body) or why
    elif status == "error":
        se = e.get("setup_error") or {}
        msg = _fail_message(e) if e["failures"] else (se.get("message") or e.get("message", "error"))
        kind = e["failures"][0]["kind"] if e["failures"] else se.get("kind", "error")
        el = ET.SubElement(tc, "error", message=msg.splitlines()[0][:1000] if msg else "error", type=str(kind))
        el.text = "\n".join(body) or msg
    if e.get("message"):
        ET.SubElement(tc, "system-out").text = f"{e['message']}; {e.get('cases', 0)} cases"


def _kernel_case(suite: ET.Element, k: dict[str, Any]) -> None:
    tc = ET.SubElement(suite, "testcase", classname="gpuemu.kernels", name=k["name"], time=f"{k.get('elapsed', 0):.3f}")
    findings = k.get("findings", [])
    lines = [
        f"{f.get('file')}:{f.get('line')}: {f.get('severity')} {f.get('code')}: {f.get('message')}" for f in findings
    ]
    errors = [f for f in findings if f.get("severity") == "error"]
    if k["status"] == "not_run":
        ET.SubElement(tc, "skipped", message=f"not run: {k.get('message', '')}"[:1000])
    elif k["status"] == "failed":
        first = errors[0] if errors else {}
        el = ET.SubElement(
            tc,
            "failure",
            message=f"{k['name']}: {first.get('message', k.get('message', ''))}"[:1000],
            type=str(first.get("code", "lint")),
        )
        el.text = "\n".join(lines)
    elif k["status"] == "error":
        el = ET.SubElement(tc, "error", message=(k.get("message") or "compile error")[:1000], type="compile")
        el.text = "\n".join(lines)
    if k.get("summary"):
        ET.SubElement(tc, "system-out").text = k["summary"]


def _suite(root: ET.Element, name: str, entries: list[dict[str, Any]], doc: dict[str, Any]) -> ET.Element:
    statuses = ("failed", "error", "not_judged", "not_run", "cancelled")
    counts = {s: sum(1 for e in entries if e["status"] == s) for s in statuses}
    suite = ET.SubElement(
        root,
        "testsuite",
        name=name,
        tests=str(len(entries)),
        failures=str(counts["failed"]),
        errors=str(counts["error"] + counts["not_judged"]),
        skipped=str(counts["not_run"] + counts["cancelled"]),
        time=f"{sum(e.get('elapsed', 0) for e in entries):.3f}",
        timestamp=_dt.datetime.fromtimestamp(doc.get("created_at", 0), _dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S"),
        hostname=platform.node() or "localhost",
    )
    props = ET.SubElement(suite, "properties")
    for key in ("mode", "seed", "shard", "run_id", "project"):
        if doc.get(key) is not None:
            ET.SubElement(props, "property", name=key, value=str(doc[key]))
    run_budget = doc.get("budget") or {}
    for key in ("seconds", "cut_cases", "cut_classes", "full_estimate"):
        if name == "gpuemu.ops" and run_budget.get(key) is not None:
            ET.SubElement(props, "property", name=f"budget.{key}", value=str(run_budget[key]))
    for e in entries:  # what is neither passed nor failed (junit-10 has no properties per testcase)
        st = e.get("stats") or {}
        for key in ("out_of_range", "out_of_range_cases", "suspect_nan", "suspect_cases", "suspect_inf_cases"):
            if st.get(key):
                ET.SubElement(props, "property", name=f"{e['name']}.{key}", value=str(st[key]))
        if e.get("edge"):  # edge findings: shown, failing only under strict
            ET.SubElement(props, "property", name=f"{e['name']}.edge_findings", value=str(e["edge"]))
            ET.SubElement(props, "property", name=f"{e['name']}.edge", value=edge_line(e))
        if e["status"] == "not_judged":
            ET.SubElement(props, "property", name=f"{e['name']}.not_judged", value=str(e.get("reason") or ""))
        for key, value in _budget_properties(e):
            ET.SubElement(props, "property", name=f"{e['name']}.{key}", value=value)
    return suite


def _budget_properties(e: dict[str, Any]) -> list[tuple[str, str]]:
    """An op's budget (what ran, what it cut, what everything needs) and its time by phase, as properties."""
    out: list[tuple[str, str]] = []
    b = e.get("budget")
    if b:
        for key in ("seconds", "planned", "ran", "cut_cases", "smaller_cases", "classes", "covered", "full_estimate"):
            if b.get(key) is not None:
                out.append((f"budget.{key}", str(b[key])))
        out.append(("budget.cut_classes", "; ".join(b.get("cut_classes") or [])))
        work = b.get("work") if isinstance(b.get("work"), dict) else {}
        for key in ("share", "ran", "full"):  # a work budget's share of the plan and the elements it ran
            if work.get(key) is not None:
                out.append((f"budget.work_{key}", str(work[key])))
    timing = e.get("timing") or {}
    for key in ("generate", "op", "reference", "compare", "other"):
        if timing.get(key) is not None:
            out.append((f"time.{key}", f"{timing[key]:.3f}"))
    return out


def render_junit(doc: dict[str, Any]) -> str:
    entries = doc["ops"] + doc["kernels"]
    root = ET.Element(
        "testsuites",
        name="gpuemu",
        tests=str(len(entries)),
        failures=str(sum(1 for e in entries if e["status"] == "failed")),
        errors=str(sum(1 for e in entries if e["status"] in ("error", "not_judged"))),
        time=f"{doc.get('elapsed', 0):.3f}",
    )
    ops = _suite(root, "gpuemu.ops", doc["ops"], doc)
    for e in doc["ops"]:
        _op_case(ops, e)
    if doc["kernels"]:
        ks = _suite(root, "gpuemu.kernels", doc["kernels"], doc)
        for k in doc["kernels"]:
            _kernel_case(ks, k)
    if doc.get("regressions"):
        regs = _suite(
            root,
            "gpuemu.regressions",
            [
                {"status": "failed" if doc.get("fail_on_regression") else "passed", "elapsed": 0}
                for _ in doc["regressions"]
            ],
            doc,
        )
        for r in doc["regressions"]:
            tc = ET.SubElement(
                regs, "testcase", classname="gpuemu.regressions", name=f"{r['kind']}:{r['name']}", time="0.000"
            )
            if doc.get("fail_on_regression"):
                ET.SubElement(tc, "failure", message=r["reason"][:1000], type="regression").text = r["reason"]
            else:
                ET.SubElement(tc, "system-out").text = f"regression (not failing the run): {r['reason']}"
    _xml_safe(root)
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


#: Terminal colour and cursor sequences (common in real exception messages): dropped whole, not left as "[31m".
_ANSI = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[@-Z\\-_])")
#: What XML 1.0 cannot hold at all, escaped or not: C0 controls but tab and newlines, lone surrogates,
#: U+FFFE and U+FFFF. Each is shown as a visible escape, so no parser rejects the report.
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def xml_text(text: str) -> str:
    """``text`` as XML 1.0 can hold it: ANSI sequences dropped, other forbidden characters as ``\\xNN``."""
    return _NOT_XML.sub(
        lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 256 else f"\\u{ord(m.group()):04x}",
        _ANSI.sub("", text),
    )


def _xml_safe(root: ET.Element) -> None:
    """Every text, tail and attribute of the tree made safe for XML 1.0 (see :func:`xml_text`)."""
    for el in root.iter():
        if el.text:
            el.text = xml_text(el.text)
        if el.tail:
            el.tail = xml_text(el.tail)
        for key, value in list(el.attrib.items()):
            el.attrib[key] = xml_text(value)
