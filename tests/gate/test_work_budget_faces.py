"""The default work budget through the real faces (issue 16): high-cost ops (declared here; an op that
imports triton is the same, tests/benchmarks/test_triton_ws.py) are cut by work before anything runs, so
``gpuemu test``, the gate and the Python API run the same cases, twice the same, on any machine; the cut
still fails a tail bug and passes its twin; text, JSON, JUnit and the hover say what it cut; ``--budget
off`` runs the whole plan; a stand-in replays from its seed."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from gatekit import check, gpuemu, out

from gpuemu_ls.api.client import Client
from gpuemu_ls.diagnostics.hover import op_hover
from gpuemu_ls.engine.store.db import Store
from gpuemu_ls.session.workspace import WorkspaceSession

OPS = """
import numpy as np


def scale(x):
    return np.asarray(x) * 2


def scale_bug_tail(x):
    # a kernel walking N in tiles of 16 that forgets the partial last tile
    out = np.asarray(x) * 2
    n = out.shape[-1]
    if n % 16:
        out[..., n - n % 16 :] = 0
    return out


def ref(x):
    return np.asarray(x, dtype=np.float64) * 2
"""

OP = """
[[ops]]
name = "{name}"
module = "ops:{name}"
reference = "ops:ref"
{cost}
[ops.inputs.x]
shape = ["B", "N"]
[ops.dims]
B = {{ min = 1, max = 64, default = 8 }}
N = {{ min = 1, max = 4096, default = 1024, tile = 16 }}
"""

TOML = (
    '[project]\nname = "work"\n[validation]\ndtypes = ["float32", "float16"]\niterations = 40\n'
    "[ci]\nfuzz_iterations = 40\n"  # the gate's thorough count, as gpuemu test's
    + OP.format(name="scale", cost='cost = "high"')
    + OP.format(name="scale_bug_tail", cost='cost = "high"')
    + OP.format(name="plain", cost="").replace('module = "ops:plain"', 'module = "ops:scale"')
)


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    (tmp_path / "ops.py").write_text(OPS)
    (tmp_path / "gpuemu.toml").write_text(TOML)
    return tmp_path


def _json(ws: Path, *args: str, face: str = "test") -> dict:
    target = ws / f"r-{face}-{len(list(ws.glob('r-*.json')))}.json"
    if face == "ci":
        proc = check(str(ws), *args, "-j", "1", "--format", "json", "--output", str(target), cwd=ws)
    else:
        proc = gpuemu("test", *args, "-j", "1", "--no-progress", "--format", "json", "--output", str(target), cwd=ws)
    assert proc.returncode == 1, out(proc)  # the bug fails
    return json.loads(target.read_text())


def _ops(doc: dict) -> dict[str, dict]:
    return {e["name"]: e for e in doc["ops"]}


def test_the_default_cut_catches_the_bug_and_says_so_in_every_face(ws: Path) -> None:
    doc = _json(ws)
    ops = _ops(doc)
    assert ops["scale_bug_tail"]["status"] == "failed" and ops["scale"]["status"] == "passed"
    assert ops["plain"]["status"] == "passed" and ops["plain"]["budget"] is None  # normal cost: never cut
    assert ops["plain"]["cases"] == 40
    b = ops["scale"]["budget"]
    assert b["source"] == "default, cost high: declared" and b["seconds"] is None
    assert b["planned"] == 40 and b["cut_cases"] > 0 and b["cut_classes"] == [] and ops["scale"]["cases"] == b["ran"]
    assert b["work"]["share"] == 0.25 and b["work"]["ran"] < b["work"]["full"] / 2
    run = doc["budget"]
    assert run["ops_cut"] == 2 and run["line"].startswith(
        "budget cut 2 of 3 ops to 25% of the plan's work (default, cost high: declared): "
    )
    assert run["line"].endswith("--budget off") and "every class still covered" in run["line"]
    text = gpuemu("test", "-j", "1", "--no-progress", cwd=ws).stdout  # the same cut, as text
    assert "budget 25% of the plan's work (default, cost high: declared): " in text
    assert run["line"].split("everything needs about")[0] in text  # the estimate is timed: it may differ
    # JUnit properties and the hover read the same store
    junit = gpuemu("report", "--format", "junit", cwd=ws)
    props = {p.get("name"): p.get("value") for p in ET.fromstring(junit.stdout.split("?>", 1)[1]).iter("property")}
    assert props["scale.budget.work_share"] == "0.25" and props["scale.budget.cut_cases"] == str(b["cut_cases"])
    session = WorkspaceSession(ws)
    session.load()
    session.refresh()
    hover = op_hover(session.view("op", "scale"), "scale")
    assert "*Budget:* 25% of the plan's work (default, cost high: declared)" in hover, hover
    session.close()


def test_every_face_runs_the_same_cases_every_time(ws: Path) -> None:
    first, again, gate = _json(ws), _json(ws), _json(ws, face="ci")
    for name in ("scale", "scale_bug_tail"):
        budgets = [_ops(d)[name]["budget"] for d in (first, again, gate)]
        assert all(b["work"] == budgets[0]["work"] and b["ran"] == budgets[0]["ran"] for b in budgets), budgets
    store = Store.for_workspace(ws, readonly=True)
    runs = [r["id"] for r in store.query("SELECT id FROM runs ORDER BY started_at")]
    seeds = [
        sorted(r["seed"] for r in store.query("SELECT seed FROM cases WHERE op = 'scale' AND run_id = ?", (run,)))
        for run in runs
    ]
    assert len(seeds) == 3 and seeds[0] == seeds[1] == seeds[2]
    api = Client(ws).test_op("scale")  # the Python API plans through the same cut
    assert sorted(c.spec.seed for c in api.cases) == seeds[0]


def test_budget_off_runs_the_whole_plan_and_a_stand_in_replays(ws: Path) -> None:
    whole = _ops(_json(ws, "--budget", "off"))
    assert whole["scale"]["budget"] is None and whole["scale"]["cases"] == 40
    cut = _ops(_json(ws))["scale"]
    store = Store.for_workspace(ws, readonly=True)
    beyond = store.query("SELECT seed, dtype, shapes FROM cases WHERE op = 'scale' AND seed >= 40 ORDER BY seed")
    assert cut["budget"]["smaller_cases"] > 0 and beyond  # stand-ins from after the plan ran
    row = beyond[0]
    rep = gpuemu("reproduce", "--op", "scale", "--seed", str(row["seed"]), "--regenerate", "--no-repro", cwd=ws)
    assert rep.returncode == 0, out(rep)
    shapes = " ".join(f"{k}={v}" for k, v in json.loads(row["shapes"]).items())
    assert shapes in rep.stdout and row["dtype"] in rep.stdout, (row, rep.stdout)
