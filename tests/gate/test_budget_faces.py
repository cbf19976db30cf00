"""Budgets through the real faces (issue 16): a deliberately slow op (time.sleep per case and per element)
run by the gate and `gpuemu test` under --budget finishes near the budget and says what it cut in text,
JSON, JUnit and the hover; a budgeted case replays from its seed; `gpuemu report --slow` lists the slowest
cases; a bad budget is a usage or configuration error."""

from __future__ import annotations

import json
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from gatekit import check, gpuemu, out

from gpuemu_ls.diagnostics.hover import op_hover
from gpuemu_ls.engine.store.db import Store
from gpuemu_ls.session.workspace import WorkspaceSession

OPS = """
import time

import numpy as np


def slow_scale(x):
    time.sleep(0.03 + 3e-6 * x.size)  # a fixed and a per-element cost, like an interpreter
    return np.asarray(x) * 2


def ref_scale(x):
    return np.asarray(x, dtype=np.float64) * 2
"""

TOML = """
[project]
name = "slow"

[validation]
dtypes = ["float32", "float16"]

[[ops]]
name = "slow_scale"
module = "ops:slow_scale"
reference = "ops:ref_scale"
iterations = 80

[ops.inputs.x]
shape = ["B", "N"]

[ops.dims]
B = { min = 1, max = 16, default = 4 }
N = { min = 1, max = 2048, default = 256 }

[ci]
fuzz_iterations = 80
"""


@pytest.fixture
def slow_ws(tmp_path: Path) -> Path:
    (tmp_path / "ops.py").write_text(OPS)
    (tmp_path / "gpuemu.toml").write_text(TOML)
    return tmp_path


def _doc(path: Path) -> dict:
    return json.loads(path.read_text())


def test_budgeted_gate_fits_and_reports_the_cut_in_every_face(slow_ws: Path) -> None:
    t0 = time.monotonic()
    proc = check(
        str(slow_ws), "--budget", "3s", "-j", "1", "--format", "json", "--output", str(slow_ws / "r.json"), cwd=slow_ws
    )
    wall = time.monotonic() - t0
    assert proc.returncode == 0, out(proc)
    doc = _doc(slow_ws / "r.json")
    assert doc["elapsed"] < 3.0 * 1.5 + 1.0, doc["elapsed"]  # near the budget (wall also holds a Python start)
    assert wall < 20, wall
    b = doc["ops"][0]["budget"]
    assert b["planned"] == 80 and b["ran"] < 80 and b["cut_cases"] > 0, b
    assert b["source"] == "--budget" and b["full_estimate"] > 3.0
    # every class of the plan still ran: each dtype, layout, distribution and shape strategy at least once
    for axis, entry in b["axes"].items():
        assert entry["covered"] == entry["planned"], (axis, entry)
    assert b["cut_classes"] == [] and b["covered"] == b["classes"]
    assert doc["ops"][0]["cases"] == b["ran"]
    run = doc["budget"]
    assert run["seconds"] == 3.0 and run["cut_cases"] == b["cut_cases"] and "everything needs about" in run["line"]
    timing = doc["ops"][0]["timing"]
    assert timing["op"] > 0.03 * b["ran"] * 0.9 and timing["slowest"], timing  # the op's own sleep is its time
    # text: the op's line and the run's one line, with the budget that would have run everything
    text = proc.stdout
    assert "budget 3s (--budget):" in text and f"{b['ran']}/80 cases" in text, text
    line = next(ln for ln in text.splitlines() if ln.startswith("budget 3s (--budget) cut 1 of 1 ops"))
    assert "planned cases not run" in line and "--budget " in line.split("everything needs about")[1]
    # JUnit properties
    junit = gpuemu("report", "--format", "junit", cwd=slow_ws)
    props = {p.get("name"): p.get("value") for p in ET.fromstring(junit.stdout.split("?>", 1)[1]).iter("property")}
    assert props["slow_scale.budget.cut_cases"] == str(b["cut_cases"]), props
    assert props["slow_scale.budget.planned"] == "80" and float(props["slow_scale.time.op"]) > 0
    # the hover (the editor reads the same store)
    session = WorkspaceSession(slow_ws)
    session.load()
    session.refresh()
    hover = op_hover(session.view("op", "slow_scale"), "slow_scale")
    assert "*Time:*" in hover and "*Budget:*" in hover and f"{b['ran']}/80 cases" in hover, hover
    session.close()


def test_a_budgeted_case_replays_from_its_seed(slow_ws: Path) -> None:
    proc = gpuemu(
        "test", "--budget", "2s", "-j", "1", "--no-progress", "--format", "json", "--output", "r.json", cwd=slow_ws
    )
    assert proc.returncode == 0, out(proc)
    store = Store.for_workspace(slow_ws, readonly=True)
    rows = store.query("SELECT seed, dtype, layout, distribution, shapes FROM cases WHERE op = 'slow_scale'")
    assert rows
    extra = [r for r in rows if r["seed"] >= 80] or rows  # a smaller stand-in from beyond the plan, if any ran
    row = extra[-1]
    rep = gpuemu(
        "reproduce", "--op", "slow_scale", "--seed", str(row["seed"]), "--regenerate", "--no-repro", cwd=slow_ws
    )
    assert rep.returncode == 0, out(rep)
    shapes = " ".join(f"{k}={v}" for k, v in json.loads(row["shapes"]).items())
    assert shapes in rep.stdout and row["dtype"] in rep.stdout, (row, rep.stdout)


def test_report_slow_lists_the_slowest_cases(slow_ws: Path) -> None:
    proc = gpuemu("test", "--budget", "2s", "-j", "1", "--no-progress", cwd=slow_ws)
    assert proc.returncode == 0, out(proc)
    rep = gpuemu("report", "--slow", "3", "--format", "json", cwd=slow_ws)
    assert rep.returncode == 0, out(rep)
    slow = json.loads(rep.stdout)
    assert len(slow["slowest"]) == 3
    secs = [c["seconds"] for c in slow["slowest"]]
    assert secs == sorted(secs, reverse=True) and secs[0] >= 0.03
    assert all(c["phases"]["op"] >= 0.03 for c in slow["slowest"])  # the op itself is what is slow
    assert slow["ops"][0]["name"] == "slow_scale" and slow["ops"][0]["op"] > slow["ops"][0]["reference"]
    text = gpuemu("report", "--slow", cwd=slow_ws)
    assert (
        text.returncode == 0 and "slowest" in text.stdout and "replay: gpuemu reproduce --op slow_scale" in text.stdout
    )


@pytest.mark.parametrize("value", ["0.5s", "2 days", "-3"])
def test_bad_budget_flags_are_usage_errors(slow_ws: Path, value: str) -> None:
    proc = gpuemu("test", f"--budget={value}", cwd=slow_ws)
    assert proc.returncode == 2 and "--budget" in proc.stderr, out(proc)


def test_bad_config_budget_is_a_configuration_error(slow_ws: Path) -> None:
    (slow_ws / "gpuemu.toml").write_text(TOML + 'budget = "0s"\n')  # under [ci]
    proc = check(str(slow_ws), cwd=slow_ws)
    assert proc.returncode == 2 and "ci.budget" in proc.stderr and "between 1 s" in proc.stderr, out(proc)
    line = TOML.count("\n") + 1
    assert f"gpuemu.toml:{line}:10:" in proc.stderr, out(proc)  # file, line and column
