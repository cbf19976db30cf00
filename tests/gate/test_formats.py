"""Report formats (issue 4, CI half): the JUnit of a run holding passed, failed, erroring and not-run ops
and lint-checked kernels validates against Jenkins' junit-10.xsd, its SARIF against the official SARIF
2.1.0 schema, and both say what CI readers need: classnames, failure messages with the case, skipped
and error elements, and locations on the right lines of the user's files, relative to %SRCROOT%."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from gatekit import (
    gpuemu,
    have_nvcc,
    line_of,
    make_mixed_workspace,
    ops_header_line,
    out,
    validate_junit,
    validate_sarif,
)

NVCC = have_nvcc()


def _build(root: Path) -> None:
    ws = make_mixed_workspace(root / "mixed")
    for fmt, name in (("json", "r.json"), ("junit", "r.xml"), ("sarif", "r.sarif")):
        proc = gpuemu("ci", "--quick", "--format", fmt, "--output", name, cwd=ws)
        assert proc.returncode == 1, out(proc)
        (ws / f"{fmt}.stdout").write_text(proc.stdout, encoding="utf-8")


@pytest.fixture(scope="module")
def run(shared) -> dict:
    ws = shared("formats-mixed", _build) / "mixed"
    return {
        "ws": ws,
        "doc": json.loads((ws / "r.json").read_text(encoding="utf-8")),
        "xml": (ws / "r.xml").read_text(encoding="utf-8"),
        "sarif": json.loads((ws / "r.sarif").read_text(encoding="utf-8")),
        "text": (ws / "junit.stdout").read_text(encoding="utf-8"),
    }


def test_the_run_has_every_verdict(run: dict) -> None:
    status = {e["name"]: e["status"] for e in run["doc"]["ops"] + run["doc"]["kernels"]}
    assert status["double_ok"] == "passed"
    assert status["double_bad"] == "failed"
    assert status["double_raises"] == "error"
    assert status["double_remote"] == "not_run"
    if NVCC:
        assert status["vector_add"] == "passed" and status["uses_printf"] == "failed"
    else:
        assert status["vector_add"] == status["uses_printf"] == "not_run"
    # with --output, the text report still goes to the CI log
    assert "FAIL    double_bad" in run["text"] and "NOT RUN double_remote" in run["text"]


def test_junit_validates_against_jenkins_xsd(run: dict, schemas) -> None:
    validate_junit(run["xml"], schemas.junit())


def test_junit_content(run: dict) -> None:
    root = ET.fromstring(run["xml"])
    cases = {(tc.get("classname"), tc.get("name")): tc for tc in root.iter("testcase")}
    ops = {n for c, n in cases if c == "gpuemu.ops"}
    kernels = {n for c, n in cases if c == "gpuemu.kernels"}
    assert ops == {"double_ok", "double_bad", "double_raises", "double_remote"}
    assert kernels == {"vector_add", "uses_printf"}

    def child(name: str, tag: str):
        return cases[("gpuemu.ops", name)].find(tag)

    assert all(child("double_ok", t) is None for t in ("failure", "error", "skipped"))
    # a failing op: <failure> whose message holds op, seed, dtype, shape and layout of a failing case
    failure = child("double_bad", "failure")
    assert failure is not None and child("double_bad", "error") is None
    entry = next(e for e in run["doc"]["ops"] if e["name"] == "double_bad")
    first = entry["failures"][0]
    msg = failure.get("message")
    for part in (
        "double_bad",
        f"seed={first['seed']}",
        f"dtype={first['dtype']}",
        f"x={first['shapes']['x']}",
        f"layout={first['layout']}",
    ):
        assert part in msg, (part, msg)
    assert failure.get("type") == first["kind"] == "mismatch"
    assert entry["diagnosis"] and entry["diagnosis"] in failure.text
    # an op that raised: <error>; an op with nothing runnable: <skipped> with the reason
    error = child("double_raises", "error")
    assert error is not None and "RuntimeError" in error.get("message") and error.get("type") == "op_error"
    skipped = child("double_remote", "skipped")
    assert skipped is not None and "client_side" in skipped.get("message")
    assert child("double_remote", "failure") is None and child("double_remote", "error") is None
    # suite counters agree with the cases
    suites = {s.get("name"): s for s in root.iter("testsuite")}
    assert suites["gpuemu.ops"].get("tests") == "4"
    assert (suites["gpuemu.ops"].get("failures"), suites["gpuemu.ops"].get("errors")) == ("1", "1")
    assert suites["gpuemu.ops"].get("skipped") == "1"
    if NVCC:
        kfail = cases[("gpuemu.kernels", "uses_printf")].find("failure")
        assert kfail is not None and kfail.get("type") == "forbidden-instruction"
        assert cases[("gpuemu.kernels", "vector_add")].find("failure") is None
    else:
        assert cases[("gpuemu.kernels", "uses_printf")].find("skipped") is not None


def test_sarif_validates_against_the_official_schema(run: dict, schemas) -> None:
    validate_sarif(run["sarif"], schemas.sarif())


def _uri(loc: dict) -> tuple[str, int]:
    phys = loc["physicalLocation"]
    assert phys["artifactLocation"]["uriBaseId"] == "%SRCROOT%"
    return phys["artifactLocation"]["uri"], phys["region"]["startLine"]


def test_sarif_locations(run: dict) -> None:
    ws, log = run["ws"], run["sarif"]
    (sarif_run,) = log["runs"]
    assert sarif_run["originalUriBaseIds"]["%SRCROOT%"]["uri"] == ws.resolve().as_uri() + "/"
    results = sarif_run["results"]
    by_op = {}
    for r in results:
        name = (r.get("properties") or {}).get("op")
        if name:
            by_op.setdefault(name, []).append(r)

    # every URI is relative to %SRCROOT% and names a file of the workspace
    for r in results:
        for loc in r.get("locations", []) + r.get("relatedLocations", []):
            uri, line = _uri(loc)
            assert not uri.startswith("/") and ":" not in uri, uri
            assert (ws / uri).is_file() and line >= 1, uri

    # a wrong answer: at the op function's def line, its [[ops]] entry as a related location
    (bad,) = by_op["double_bad"]
    assert bad["ruleId"] == "gpuemu/mismatch" and bad["level"] == "error"
    assert _uri(bad["locations"][0]) == ("ops.py", line_of(ws / "ops.py", r"^def double_bad\("))
    related = [_uri(x) for x in bad["relatedLocations"]]
    assert ("gpuemu.toml", ops_header_line(ws, "double_bad")) in related
    assert bad["properties"]["seed"] is not None and bad["properties"]["layout"]
    # an op that raised: at the raising line
    (raised,) = by_op["double_raises"]
    assert raised["ruleId"] == "gpuemu/op_error"
    assert _uri(raised["locations"][0]) == ("ops.py", line_of(ws / "ops.py", r"raise RuntimeError"))
    assert ("gpuemu.toml", ops_header_line(ws, "double_raises")) in [_uri(x) for x in raised["relatedLocations"]]
    # not run: a warning at its [[ops]] entry; a passing op: nothing
    (remote,) = by_op["double_remote"]
    assert remote["level"] == "warning"
    assert _uri(remote["locations"][0]) == ("gpuemu.toml", ops_header_line(ws, "double_remote"))
    assert "double_ok" not in by_op
    rules = [r["id"] for r in sarif_run["tool"]["driver"]["rules"]]
    assert all(rules[r["ruleIndex"]] == r["ruleId"] for r in results)


@pytest.mark.skipif(not NVCC, reason="nvcc not found (pip install './gpuemu-ls[cuda]' from a checkout)")
def test_sarif_kernel_finding_on_its_cu_line(run: dict) -> None:
    ws = run["ws"]
    lint = [r for r in run["sarif"]["runs"][0]["results"] if r["ruleId"].startswith("gpuemu-lint/")]
    (finding,) = lint
    assert finding["ruleId"] == "gpuemu-lint/forbidden-instruction" and finding["level"] == "error"
    expected = line_of(ws / "kernels" / "forbidden.cu", r"__global__ void uses_printf\(")
    assert _uri(finding["locations"][0]) == ("kernels/forbidden.cu", expected)


def test_html_shows_every_verdict_and_kernel(run: dict) -> None:
    """The HTML page of the same document (issue 28 item 1): every op's verdict, every kernel with its
    findings, and the lint figures against their limits as a plot where the lint measured any."""
    import html5lib

    from gpuemu_ls.engine.report.formats import render

    doc = run["doc"]
    root = html5lib.HTMLParser(strict=True, namespaceHTMLElements=False).parse(render(doc, "html"))
    rows = {tr.get("data-op"): tr.get("data-status") for tr in root.iterfind(".//table[@id='op-table']/tbody/tr")}
    assert rows == {e["name"]: e["status"] for e in doc["ops"]}
    kernels = root.find(".//table[@id='kernel-table']")
    assert kernels is not None
    names = ["".join(tr.find("td").itertext()) for tr in kernels.iterfind("./tbody/tr")]
    assert names == [k["name"] for k in doc["kernels"]]
    limited = any(
        f.get("value") is not None and f.get("limit") is not None for k in doc["kernels"] for f in k["findings"]
    )
    plots = [img.get("alt") for img in root.iter("img")]
    assert ("kernel lint figures against their limits" in plots) == limited
