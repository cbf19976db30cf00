"""`gpuemu report` from the store (issue 4, CI half): after a gate run, every format renders the stored
latest verdicts; `--since-hours` leaves out older results; `--include-lint` adds the kernels; replaying
or minimizing a case does not change what is reported."""

from __future__ import annotations

import json
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from gatekit import copy_workspace, gpuemu, jdoc, make_mixed_workspace, out, validate_junit, validate_sarif


def _build(root: Path) -> None:
    ws = make_mixed_workspace(root / "mixed")
    proc = gpuemu("ci", "--quick", "--format", "json", "--output", "live.json", cwd=ws)
    assert proc.returncode == 1, out(proc)


@pytest.fixture(scope="module")
def stored(shared) -> Path:
    return shared("report-mixed", _build) / "mixed"


@pytest.fixture
def ws(stored: Path, tmp_path: Path) -> Path:
    return copy_workspace(stored, tmp_path / "mixed")


def _live(ws: Path) -> dict:
    return json.loads((ws / "live.json").read_text(encoding="utf-8"))


def _verdicts(doc: dict) -> dict:
    return {
        e["name"]: (
            e["status"],
            e.get("cases"),
            e.get("passed"),
            e.get("failed"),
            e.get("errors"),
            e.get("diagnosis"),
            sorted(f["seed"] for f in e.get("failures", [])),
        )
        for e in doc["ops"]
    }


def test_report_renders_the_stored_verdicts(ws: Path, schemas) -> None:
    live = _live(ws)
    proc = gpuemu("report", "--format", "json", cwd=ws)
    assert proc.returncode == 1, out(proc)
    doc = jdoc(proc)
    assert _verdicts(doc) == _verdicts(live)
    assert doc["kernels"] == []  # lint results only with --include-lint
    for e in doc["ops"]:
        assert e["run_id"] == live["run_id"]

    lint = jdoc(gpuemu("report", "--format", "json", "--include-lint", cwd=ws))
    assert {k["name"]: k["status"] for k in lint["kernels"]} == {k["name"]: k["status"] for k in live["kernels"]}
    assert all("sass_instructions" not in k for k in lint["kernels"])
    full = jdoc(gpuemu("report", "--format", "json", "--include-lint", "--include-artifacts", cwd=ws))
    assert [k["name"] for k in full["kernels"]] == [k["name"] for k in lint["kernels"]]

    junit = gpuemu("report", "--format", "junit", "--include-lint", cwd=ws)
    assert junit.returncode == 1
    validate_junit(junit.stdout, schemas.junit())
    cases = {(tc.get("classname"), tc.get("name")) for tc in ET.fromstring(junit.stdout).iter("testcase")}
    assert cases == {("gpuemu.ops", n) for n in _verdicts(live)} | {
        ("gpuemu.kernels", k["name"]) for k in live["kernels"]
    }

    sarif = gpuemu("report", "--format", "sarif", "--include-lint", cwd=ws)
    assert sarif.returncode == 1
    log = json.loads(sarif.stdout)
    validate_sarif(log, schemas.sarif())
    ops = {r["properties"]["op"] for r in log["runs"][0]["results"] if "op" in (r.get("properties") or {})}
    assert ops == {"double_bad", "double_raises", "double_remote"}

    text = gpuemu("report", cwd=ws)
    assert text.returncode == 1
    for line in ("PASS    double_ok", "FAIL    double_bad", "ERROR   double_raises", "NOT RUN double_remote"):
        assert line in text.stdout, text.stdout
    bad = next(e for e in live["ops"] if e["name"] == "double_bad")
    assert f"diagnosis: {bad['diagnosis']}" in text.stdout


def test_since_hours_leaves_out_older_results(ws: Path) -> None:
    t_old = max(e["finished_at"] for e in jdoc(gpuemu("report", "--format", "json", cwd=ws))["ops"])
    time.sleep(max(0.0, t_old + 0.5 - time.time()))  # 0.0001 h = 0.36 s
    old = gpuemu("report", "--since-hours", "0.0001", "--format", "json", "--include-lint", cwd=ws)
    doc = jdoc(old)
    assert doc["ops"] == [] and doc["kernels"] == [], doc
    assert old.returncode == 1  # nothing recent is no verdict, never a pass
    recent = jdoc(gpuemu("report", "--since-hours", "1", "--format", "json", cwd=ws))
    assert set(_verdicts(recent)) == set(_verdicts(_live(ws)))

    time.sleep(max(0.0, t_old + 2.0 - time.time()))
    rerun = gpuemu("test", "--op", "double_ok", "--quick", "--iterations", "2", cwd=ws)
    assert rerun.returncode == 0, out(rerun)
    since = (time.time() - t_old - 1.0) / 3600  # newer than the first run + 1 s: only the rerun
    fresh = gpuemu("report", "--since-hours", f"{since:.8f}", "--format", "json", cwd=ws)
    assert [e["name"] for e in jdoc(fresh)["ops"]] == ["double_ok"]
    assert fresh.returncode == 0


def test_reproduce_and_minimize_do_not_change_the_reported_verdict(ws: Path) -> None:
    before = jdoc(gpuemu("report", "--format", "json", cwd=ws))
    bad = next(e for e in before["ops"] if e["name"] == "double_bad")
    seed = bad["failures"][0]["seed"]
    rep = gpuemu("reproduce", "--op", "double_bad", "--seed", str(seed), cwd=ws)
    assert rep.returncode == 1 and "FAILED" in rep.stdout, out(rep)
    ok = gpuemu("reproduce", "--op", "double_ok", "--seed", "0", cwd=ws)
    assert ok.returncode == 0, out(ok)
    raised = gpuemu("reproduce", "--op", "double_raises", "--seed", "0", "--regenerate", cwd=ws)
    assert raised.returncode == 1, out(raised)
    mini = gpuemu("minimize", "--op", "double_bad", "--seed", str(seed), cwd=ws)
    assert mini.returncode == 1, out(mini)
    after = jdoc(gpuemu("report", "--format", "json", cwd=ws))
    assert _verdicts(after) == _verdicts(before)
    assert [e["run_id"] for e in after["ops"]] == [e["run_id"] for e in before["ops"]]


def test_stored_sarif_uris_are_relative(ws: Path) -> None:
    log = json.loads(gpuemu("report", "--format", "sarif", "--include-lint", cwd=ws).stdout)
    uris = [
        loc["physicalLocation"]["artifactLocation"]["uri"]
        for r in log["runs"][0]["results"]
        for loc in r.get("locations", []) + r.get("relatedLocations", [])
    ]
    assert uris and all(not u.startswith("/") for u in uris), uris
    text = gpuemu("report", cwd=ws).stdout
    assert str(ws) not in text and "(ops.py:" in text
