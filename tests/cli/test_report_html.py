"""``gpuemu report --format html`` (issue 28 item 1): one page, valid HTML, self-contained (nothing loaded at view
time, a Content-Security-Policy that says so), every user string escaped, the same numbers as the JSON
document, plots that render in a real headless Chromium, ``--redact``, and the page without matplotlib.

One small workspace runs once for the module (three ops: correct, a bug, one that raises an exception whose
text is HTML); every test renders from its JSON document and store.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import html5lib
import pytest
from kit.browser import open_page, require_browser
from kit.cli import gpuemu, jdoc, out
from kit.ops import NUMPY_OPS, SOFTMAX_REF, op_toml, project_toml
from kit.workspace import write_ws

from gpuemu_ls.engine.config.load import load_config
from gpuemu_ls.engine.oracle.outcome import TIER_COUNTS
from gpuemu_ls.engine.report.provenance import canonical_json, config_settings, git_state, sha256

#: exception text from the user's world: markup that must arrive as text, and characters HTML text cannot hold
HOSTILE = "<img src=x onerror=alert(1)> & </script><script>alert(2)</script>"
#: as the op's source spells them (escapes), and as the page shows them
CONTROLS = r"\x1b[31mred\x1b[0m bell\x07 nul\x00 c1\x9b lone \udcff"
RAISES = f"""
from ops import softmax


def raises(x):
    if x.shape[-1] > 100:
        raise ValueError({HOSTILE!r} + " {CONTROLS}")
    return softmax(x)
"""
DIMS = {"B": (1, 16, 4), "N": (1, 512, 64)}
TOML = (
    project_toml("html <report>", validation={"dtypes": ["float32", "float16"], "iterations": 24})
    + op_toml("softmax_ok", module="ops:softmax", reference="ref:softmax", dims=DIMS)
    + op_toml("softmax_no_max", module="ops:softmax_no_max", reference="ref:softmax", dims=DIMS)
    + op_toml("raises", module="raises:raises", reference="ref:softmax", dims=DIMS)
)


@dataclass
class Run:
    ws: Path
    doc: dict[str, Any]
    html: str
    page: Path


def _git(ws: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=ws, check=True, capture_output=True)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    ws = write_ws(
        tmp_path_factory.mktemp("html") / "ws",
        TOML,
        {"ops.py": NUMPY_OPS, "ref.py": SOFTMAX_REF, "raises.py": RAISES, ".gitignore": "*.json\n*.html\n"},
    )
    _git(ws, "init", "-q")
    _git(ws, "add", ".")
    _git(ws, "commit", "-q", "-m", "ops")
    (ws / "notes.txt").write_text("uncommitted\n")  # the tree is dirty: an untracked file
    proc = gpuemu("test", "--format", "json", "--output", "r.json", "--no-progress", cwd=ws)
    assert proc.returncode == 1, out(proc)
    proc = gpuemu("report", "--input", "r.json", "--format", "html", "--output", "r.html", cwd=ws)
    assert proc.returncode == 1, out(proc)  # the document's exit code: an op failed
    doc = json.loads((ws / "r.json").read_text())
    return Run(ws, doc, (ws / "r.html").read_text(encoding="utf-8"), ws / "r.html")


def tree(text: str) -> ET.Element:
    """The page parsed by html5lib in strict mode: any parse error of the WHATWG algorithm raises."""
    return html5lib.HTMLParser(strict=True, namespaceHTMLElements=False).parse(text)


def op_rows(root: ET.Element) -> dict[str, dict[str, str]]:
    table = root.find(".//table[@id='op-table']")
    assert table is not None
    rows = {}
    for tr in table.iterfind("./tbody/tr"):
        cells = {td.get("class", "").split()[0]: "".join(td.itertext()).strip() for td in tr.iterfind("td")}
        rows[tr.get("data-op")] = cells
    return rows


def test_the_page_is_valid_and_self_contained(run: Run) -> None:
    root = tree(run.html)
    ids = [e.get("id") for e in root.iter() if e.get("id")]
    assert len(ids) == len(set(ids)), "duplicate ids"
    csp = root.find(".//meta[@http-equiv='Content-Security-Policy']")
    assert csp is not None and "default-src 'none'" in csp.get("content", "")
    assert "script-src 'sha256-" in csp.get("content", "") and "unsafe-inline" not in csp.get("content", "")
    assert root.findall(".//link") == [] and root.findall(".//iframe") == [] and root.findall(".//object") == []
    for e in root.iter():
        for attr in ("src", "href", "action", "srcset", "poster"):
            value = e.get(attr)
            if value is not None:
                assert value.startswith(("data:", "#")), f"<{e.tag} {attr}={value[:80]!r}> loads from outside"
    scripts = root.findall(".//script")
    assert len(scripts) == 1 and not scripts[0].get("src")
    assert "http://" not in run.html.replace("http://www.w3.org/", "") and "https://" not in run.html


def test_user_strings_arrive_as_text(run: Run) -> None:
    root = tree(run.html)
    assert HOSTILE not in run.html  # never raw
    texts = ["".join(e.itertext()) for e in root.iter("span") if e.get("class") == "message"]
    assert any(HOSTILE in t for t in texts), "the exception text is shown, as text"
    assert any(f"{HOSTILE} {CONTROLS}" in t for t in texts), "control characters and a lone surrogate as escapes"
    assert len(root.findall(".//script")) == 1
    assert all(img.get("src", "").startswith("data:image/svg+xml;base64,") for img in root.iter("img"))
    title = root.find(".//h1")
    assert title is not None and "html <report>" in "".join(title.itertext())


def test_the_page_shows_the_numbers_of_the_json_document(run: Run) -> None:
    rows = op_rows(tree(run.html))
    assert set(rows) == {e["name"] for e in run.doc["ops"]}
    for e in run.doc["ops"]:
        row, st = rows[e["name"]], e["stats"]
        assert [row["cases"], row["passed"], row["bug"], row["edge"], row["errors"]] == [
            str(e[k]) for k in ("cases", "passed", "failed", "edge", "errors")
        ], e["name"]
        assert row["out_of_range"] == str(st["out_of_range_cases"])
        assert row["suspect"] == str(st["suspect_cases"] + st["suspect_inf_cases"])
        ratio = st["max_ratio"]
        if isinstance(ratio, float) and ratio < 1e299:
            assert float(row["max_ratio"]) == pytest.approx(ratio, rel=1e-3)
        else:
            assert row["max_ratio"] == "non-finite"
    statuses = {e["name"]: e["status"] for e in run.doc["ops"]}
    assert statuses == {"softmax_ok": "passed", "softmax_no_max": "failed", "raises": "error"}
    for f in (e for e in run.doc["ops"] if e["failures"]):
        for case in f["failures"][:3]:
            assert case["replay"] in run.html  # the replay commands, verbatim


def test_a_report_from_the_store_has_the_runs_tiers(run: Run) -> None:
    """`gpuemu report` rebuilds the document from the store: its tier counts are the run's own."""
    proc = gpuemu("report", "--format", "json", cwd=run.ws)
    assert proc.returncode == 1, out(proc)
    stored = {e["name"]: e["stats"] for e in jdoc(proc)["ops"]}
    for e in run.doc["ops"]:
        assert {k: stored[e["name"]][k] for k in TIER_COUNTS} == {k: e["stats"][k] for k in TIER_COUNTS}, e["name"]


def test_the_run_facts_are_the_documents_provenance(run: Run) -> None:
    prov = run.doc["provenance"]
    cfg = load_config(run.ws)
    assert prov["config_sha256"] == sha256(canonical_json(config_settings(cfg)))
    assert prov["toml_sha256"] == sha256((run.ws / "gpuemu.toml").read_bytes())
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=run.ws, capture_output=True, text=True, check=True)
    assert prov["git"]["commit"] == head.stdout.strip() and prov["git"]["dirty"] is True
    assert prov["git"]["diff_sha256"] == git_state(run.ws)["diff_sha256"]
    facts = tree(run.html).find(".//dl[@id='run-facts']")
    assert facts is not None
    shown = dict(
        zip(("".join(d.itertext()) for d in facts.iter("dt")), ("".join(d.itertext()) for d in facts.iter("dd")))
    )
    assert shown["resolved config sha256"] == prov["config_sha256"]
    assert shown["gpuemu.toml sha256"] == prov["toml_sha256"]
    assert shown["git commit"].startswith(prov["git"]["commit"]) and prov["git"]["diff_sha256"] in shown["git commit"]
    assert shown["seed"] == str(run.doc["seed"]) and shown["mode"] == run.doc["mode"] and shown["date"] == prov["date"]
    assert f"numpy {prov['libraries']['numpy']}" in shown["libraries"].split(", ")  # what computed the numbers


def test_a_changed_diff_changes_its_digest(run: Run) -> None:
    before = git_state(run.ws)
    notes = run.ws / "notes.txt"
    notes.write_text("uncommitted, edited\n")
    try:
        after = git_state(run.ws)
    finally:
        notes.write_text("uncommitted\n")
    assert before["commit"] == after["commit"] and before["diff_sha256"] != after["diff_sha256"]


def test_it_renders_in_a_real_browser_with_its_plots(run: Run, tmp_path: Path) -> None:
    require_browser()
    shot = tmp_path / "report.png"
    seen = open_page(run.page, shot, filter_text="softmax", status="failed")
    assert seen["requests"] == [] and seen["csp"] == [] and seen["console"] == [], seen
    assert seen["filter_ready"] == "1"  # the page's script ran under its own policy
    # the run's summary, its history and the two ops that did not pass (the correct op has none)
    assert len(seen["images"]) == 4, seen["images"]
    assert all(i["complete"] and i["width"] > 100 for i in seen["images"]), seen["images"]
    names = [e["name"] for e in run.doc["ops"]]
    assert seen["rows_all"] == names
    assert seen["rows_text"] == [n for n in names if "softmax" in n]
    assert seen["rows_status"] == [e["name"] for e in run.doc["ops"] if e["status"] == "failed"]
    assert seen["count_text"] == f"1 of {len(names)} shown"
    assert seen["rows_print"] == names  # printed, every row is there
    assert shot.stat().st_size > 20_000 and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def tables_only(ws: Path, *args: str) -> subprocess.CompletedProcess:
    """The real ``gpuemu`` CLI where matplotlib cannot be imported (as without the [report] extra): the page's
    tables alone, a second or two instead of its plots."""
    code = (
        "import sys; sys.modules['matplotlib'] = None\n"  # `import matplotlib` raises ImportError
        "from gpuemu_ls.cli import gpuemu_main; sys.exit(gpuemu_main(sys.argv[1:]))"
    )
    return subprocess.run([sys.executable, "-c", code, *args], cwd=ws, capture_output=True, text=True, check=False)


def test_without_matplotlib_the_page_has_tables_and_says_why(run: Run) -> None:
    proc = tables_only(run.ws, "report", "--input", "r.json", "--format", "html", "--output", "tables.html")
    assert proc.returncode == 1, out(proc)
    root = tree((run.ws / "tables.html").read_text(encoding="utf-8"))
    assert root.findall(".//img") == []
    note = root.find(".//p[@id='plots-note']")
    assert note is not None and "gpuemu-ls[report]" in "".join(note.itertext())
    assert op_rows(root) == op_rows(tree(run.html))


def test_redact_leaves_out_paths_and_host(run: Run) -> None:
    proc = tables_only(run.ws, "report", "--input", "r.json", "--format", "html", "--redact", "--output", "red.html")
    assert proc.returncode == 1, out(proc)
    text = (run.ws / "red.html").read_text(encoding="utf-8")
    assert str(run.ws) in run.html and str(run.ws) not in text and "&lt;workspace&gt;" in text
    host = socket.gethostname()
    if len(host) >= 3:
        assert host not in text
    assert op_rows(tree(text)) == op_rows(tree(run.html))  # every number stays
    # any format: the JSON document too, with every number as it was
    proc = tables_only(run.ws, "report", "--input", "r.json", "--format", "json", "--redact")
    redacted = jdoc(proc)
    assert str(run.ws) not in proc.stdout and redacted["workspace"] == "<workspace>" and redacted["redacted"] is True
    assert redacted["provenance"]["machine"]["host"] == "<host>"
    assert [e["stats"] for e in redacted["ops"]] == [e["stats"] for e in run.doc["ops"]]
