"""The gate's verdict vocabulary in every format: an op with edge findings only passes (exit 0) and shows them
(text EDGE, JSON ``edge``, SARIF ``warning``, JUnit properties, markdown), ``--strict`` fails it (exit 1, SARIF
``error``, a JUnit ``<failure>``); an op that judged nothing is ``not_judged`` and fails (JUnit ``<error>``)."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from gatekit import validate_junit, validate_sarif
from kit.cli import check, out
from kit.ops import op_toml, project_toml
from kit.workspace import write_ws

OPS_PY = """\
import numpy as np


def rms(x):
    with np.errstate(all="ignore"):
        xf = np.asarray(x, dtype=np.float32)
        return (xf / np.sqrt((xf * xf).mean(axis=-1, keepdims=True) + np.float32(1e-6))).astype(x.dtype)


def reference(x):
    x = x.astype(np.float64)  # the common way: the reference cannot overflow where a float32 kernel must
    return x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + 1e-6)


def copy(x):
    return np.array(x, copy=True)


def nan_reference(x):
    return np.full(x.shape, np.nan)
"""


def _ws(root: Path, *ops: tuple[str, str, str]) -> Path:
    toml = project_toml("vocab", validation={"dtypes": ["float32"], "iterations": 6}) + "".join(
        op_toml(name, module=module, reference=ref, distributions=["boundary"], dims={"B": [4], "N": [16]})
        for name, module, ref in ops
    )
    return write_ws(root, toml, {"ops.py": OPS_PY})


EDGE = ("rms", "ops:rms", "ops:reference")
NOTHING = ("blind", "ops:copy", "ops:nan_reference")


def test_edge_findings_only_pass_the_gate_and_are_shown_in_every_format(tmp_path: Path, schemas) -> None:
    ws = _ws(tmp_path / "ws", EDGE)
    files = {fmt: tmp_path / f"report.{fmt}" for fmt in ("json", "sarif", "junit", "markdown")}
    for fmt, path in files.items():
        proc = check(str(ws), "--format", fmt, "--output", str(path), cwd=tmp_path)
        assert proc.returncode == 0, out(proc)
        assert "EDGE    rms" in proc.stdout and "not a bug of this kernel" in proc.stdout, proc.stdout
    doc = json.loads(files["json"].read_text())
    (e,) = doc["ops"]
    assert doc["schema"] == 2 and doc["status"] == "edge" and doc["exit_code"] == 0
    assert e["status"] == "edge" and e["edge"] > 0 and e["failed"] == 0
    assert all(f["tier"] == "edge" and f["edge"]["reasons"] == ["overflow"] for f in e["failures"])
    sarif = json.loads(files["sarif"].read_text())
    validate_sarif(sarif, schemas.sarif())
    results = sarif["runs"][0]["results"]
    assert {(r["ruleId"], r["level"]) for r in results} == {("gpuemu/edge-finding", "warning")}
    xml = files["junit"].read_text()
    validate_junit(xml, schemas.junit())
    tree = ET.fromstring(xml)
    (case,) = tree.iter("testcase")
    assert case.find("failure") is None and case.find("error") is None
    props = {p.get("name"): p.get("value") for p in tree.iter("property")}
    assert int(props["rms.edge_findings"]) == e["edge"] and "exceeds float32" in props["rms.edge"]
    md = files["markdown"].read_text()
    assert "⚠️ | rms" in md and "edge finding" in md


def test_strict_fails_the_same_edge_findings(tmp_path: Path, schemas) -> None:
    ws = _ws(tmp_path / "ws", EDGE)
    sarif_file, junit_file = tmp_path / "r.sarif", tmp_path / "r.xml"
    proc = check(str(ws), "--strict", "--format", "sarif", "--output", str(sarif_file), cwd=tmp_path)
    assert proc.returncode == 1 and "FAIL    rms" in proc.stdout, out(proc)
    sarif = json.loads(sarif_file.read_text())
    validate_sarif(sarif, schemas.sarif())
    assert {(r["ruleId"], r["level"]) for r in sarif["runs"][0]["results"]} == {("gpuemu/edge-finding", "error")}
    proc = check(str(ws), "--strict", "--format", "junit", "--output", str(junit_file), cwd=tmp_path)
    assert proc.returncode == 1, out(proc)
    (case,) = ET.fromstring(junit_file.read_text()).iter("testcase")
    assert case.find("failure") is not None
    # strict in gpuemu.toml means the same as --strict
    toml = (ws / "gpuemu.toml").read_text().replace('name = "rms"', 'name = "rms"\nstrict = true')
    (ws / "gpuemu.toml").write_text(toml)
    assert check(str(ws), cwd=tmp_path).returncode == 1


@pytest.mark.parametrize("fmt", ["json", "junit"])
def test_an_op_that_judged_nothing_fails_the_gate(tmp_path: Path, fmt: str, schemas) -> None:
    ws = _ws(tmp_path / "ws", NOTHING)
    report = tmp_path / f"r.{fmt}"
    proc = check(str(ws), "--format", fmt, "--output", str(report), cwd=tmp_path)
    assert proc.returncode == 1, out(proc)
    assert "UNJUDGED blind" in proc.stdout and "not judged: " in proc.stdout, proc.stdout
    if fmt == "json":
        (e,) = json.loads(report.read_text())["ops"]
        assert e["status"] == "not_judged" and "NaN" in e["reason"] and e["failed"] == 0
    else:
        xml = report.read_text()
        validate_junit(xml, schemas.junit())
        (case,) = ET.fromstring(xml).iter("testcase")
        err = case.find("error")
        assert err is not None and err.get("type") == "not_judged"
