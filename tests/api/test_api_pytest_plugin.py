"""The pytest plugin, run as a real pytest subprocess (`-p gpuemu_ls.pytest_plugin`), with and without xdist."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from kit.frameworks import plugin_args
from kit.ops import op_toml, project_toml
from kit.store import rows

from gpuemu_ls import Client
from gpuemu_ls.engine.config.load import load_config
from gpuemu_ls.engine.oracle.diagnose import diagnose_cases
from gpuemu_ls.engine.run.validate import plan_op

_BN = {"B": (1, 4, 2), "N": (1, 100, 64)}
TOML = (
    project_toml(
        "plugin-test", validation={"dtypes": ["float32", "float16"], "iterations": 8}, ci_quick={"iterations": 4}
    )
    + op_toml("good", module="ops:softmax", reference="refs:softmax", dims=_BN)
    + op_toml("bad", module="ops:tail_bug", reference="refs:softmax", dims=_BN)
    + op_toml("client_op", execution_mode="client_side", reference="refs:softmax", dtypes=["float32"], dims=_BN)
)

REFS = """
import numpy as np


def softmax(x):
    with np.errstate(all="ignore"):
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)
"""

OPS = """
import numpy as np


def softmax(x):
    with np.errstate(all="ignore"):
        xf = x.astype(np.float32)
        e = np.exp(xf - xf.max(axis=-1, keepdims=True))
        return (e / e.sum(axis=-1, keepdims=True)).astype(x.dtype)


def tail_bug(x):
    out = softmax(x)
    if x.shape[-1] % 16:
        out[..., -1] = 0  # the partial last tile is lost
    return out
"""

CLIENT_TESTS = """
import pytest
from ops import softmax

from gpuemu_ls import FuzzResult


@pytest.mark.gpuemu_op("client_op", iterations=6)
def test_client_op(gpuemu_check):
    result = gpuemu_check(lambda inputs: softmax(inputs["x"]))
    assert isinstance(result, FuzzResult) and result.total == 6


def test_client_fixture(gpuemu_client):
    assert gpuemu_client.ops() == ["good", "bad", "client_op"]
    case = gpuemu_client.get_test_case("client_op", 0)
    assert gpuemu_client.submit_output(case, softmax(case.inputs["x"])).passed


@pytest.mark.gpuemu_op("client_op", iterations=4)
def test_buggy_client_op_raises(gpuemu_check):
    from gpuemu_ls import ValidationError

    with pytest.raises(ValidationError, match="replay"):
        gpuemu_check(lambda inputs: softmax(inputs["x"]) * 2)
"""


@pytest.fixture
def plugin_ws(tmp_path: Path) -> Path:
    root = tmp_path / "pws"
    root.mkdir()
    for name, text in (("gpuemu.toml", TOML), ("refs.py", REFS), ("ops.py", OPS), ("test_client.py", CLIENT_TESTS)):
        (root / name).write_text(text, encoding="utf-8")
    return root


def run_pytest(root: Path, env: dict[str, str], *args: str) -> tuple[int, str, dict[str, str]]:
    """pytest in ``root`` with the plugin; returns exit code, output and {nodeid: outcome}."""
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", *plugin_args(), "-p", "no:cacheprovider", "-v", "-rs", *args],
        cwd=str(root),
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    out = proc.stdout + proc.stderr
    outcomes = {}
    status = r"(PASSED|FAILED|SKIPPED|ERROR|XFAIL)"
    for m in re.finditer(rf"^(\S+::\S+) {status}\b", out, re.M):  # without xdist: "nodeid STATUS [ n%]"
        outcomes[m.group(1)] = m.group(2)
    for m in re.finditer(rf"^\[gw\d+\] \[\s*\d+%\] {status} (\S+::\S+)", out, re.M):  # xdist
        outcomes[m.group(2).split("@")[0]] = m.group(1)
    return proc.returncode, out, outcomes


def planned(root: Path, op: str, mode: str = "thorough") -> list[int]:
    cfg = load_config(root)
    return [s.seed for s in plan_op(cfg, cfg.op(op), mode, None, None)]


def check_store(root: Path, expected_runs: int | None) -> dict[str, dict]:
    db = root / ".gpuemu" / "gpuemu.db"
    runs = rows(db, "SELECT * FROM runs")
    assert {r["source"] for r in runs} == {"pytest"} and {r["mode"] for r in runs} == {"thorough"}
    if expected_runs is not None:
        assert len(runs) == expected_runs
    verdicts = rows(db, "SELECT * FROM op_results")
    by_op: dict[str, dict] = {}
    for v in verdicts:
        assert v["op"] not in by_op, f"op {v['op']} has verdicts in two runs: its items were split"
        by_op[v["op"]] = v
    return by_op


def test_plugin_collects_ops_by_dtype_and_reports_failures(plugin_ws: Path, clean_env, gpuemu_cli) -> None:
    code, out, outcomes = run_pytest(plugin_ws, clean_env, "--gpuemu")
    assert code == 1, out
    dtypes = {"good": ["float32", "float16"], "bad": ["float32", "float16"]}
    for op, ds in dtypes.items():
        for d in ds:
            assert f"gpuemu.toml::{op}[{d}]" in outcomes, out
    assert {outcomes["gpuemu.toml::good[float32]"], outcomes["gpuemu.toml::good[float16]"]} == {"PASSED"}
    assert "FAILED" in {outcomes["gpuemu.toml::bad[float32]"], outcomes["gpuemu.toml::bad[float16]"]}
    assert outcomes["gpuemu.toml::client_op[float32]"] == "SKIPPED"
    assert "validated by test_client.py::test_client_op" in out
    for t in ("test_client_op", "test_client_fixture", "test_buggy_client_op_raises"):
        assert outcomes[f"test_client.py::{t}"] == "PASSED", out
    # the failure text: verdict, diagnosis, one line per failing case with its replay command
    assert re.search(r"FAILED bad: \d+/\d+ passed, \d+ failed", out)
    assert re.search(r"^    diagnosis: fails ", out, re.M)
    assert re.search(r"FAIL bad \[mismatch: wrong values\] seed=\d+ dtype=float\d+ x=\[\d+, \d+\]", out)
    assert re.search(r"replay: gpuemu reproduce --op bad --seed \d+", out)
    by_op = check_store(plugin_ws, expected_runs=1)
    assert (by_op["good"]["status"], by_op["good"]["cases"]) == ("passed", len(planned(plugin_ws, "good")))
    assert by_op["bad"]["status"] == "failed" and by_op["bad"]["cases"] == len(planned(plugin_ws, "bad"))
    assert by_op["client_op"]["cases"] == 6 + 1 + 4  # test_client_op, the fixture's case, the buggy check
    stored = rows(plugin_ws / ".gpuemu" / "gpuemu.db", "SELECT seed FROM cases WHERE op = 'good' ORDER BY seed")
    assert [r["seed"] for r in stored] == sorted(planned(plugin_ws, "good"))  # exactly gpuemu test's cases
    failures = gpuemu_cli(plugin_ws, "failures", "--op", "bad")
    assert "FAIL bad [mismatch" in failures.stdout and "replay: gpuemu reproduce --op bad" in failures.stdout


def test_plugin_with_xdist_records_one_run_with_complete_verdicts(plugin_ws: Path, clean_env) -> None:
    code, out, outcomes = run_pytest(plugin_ws, clean_env, "--gpuemu", "-n", "2")
    assert code == 1, out
    assert re.search(r"created: 2/2 workers|2 workers \[", out), out
    assert outcomes["gpuemu.toml::good[float32]"] == outcomes["gpuemu.toml::good[float16]"] == "PASSED"
    assert "FAILED" in {outcomes["gpuemu.toml::bad[float32]"], outcomes["gpuemu.toml::bad[float16]"]}
    assert outcomes["gpuemu.toml::client_op[float32]"] == "SKIPPED"
    assert outcomes["test_client.py::test_client_op"] == "PASSED"
    assert "replay: gpuemu reproduce --op bad --seed" in out
    # both workers recorded into one run; each op's verdict covers every case, whichever worker ran it
    by_op = check_store(plugin_ws, expected_runs=1)
    assert by_op["good"]["cases"] == len(planned(plugin_ws, "good"))
    assert by_op["bad"]["cases"] == len(planned(plugin_ws, "bad")) and by_op["bad"]["status"] == "failed"
    assert by_op["client_op"]["cases"] == 6 + 1 + 4
    db = plugin_ws / ".gpuemu" / "gpuemu.db"
    (run,) = rows(db, "SELECT * FROM runs")
    assert run["status"] == "failed" and run["finished_at"] and "-n 2" in run["command"]
    # the controller wrote the final verdicts once every worker was done
    (last_case,) = rows(db, "SELECT max(created_at) AS t FROM cases")
    assert min(v["finished_at"] for v in by_op.values()) >= last_case["t"]
    # the diagnosis rebuilt from the stored cases is the one the same cases give in a single process; that
    # process can also run confirmation cases (the rebuilt one has none: it says so, and states no "iff")
    with Client(plugin_ws, store=False) as c:
        live = c.test_op("bad")
    bad_op = load_config(plugin_ws).op("bad")
    assert by_op["bad"]["diagnosis"] == diagnose_cases(live.cases, bad_op, plugin_ws.resolve())
    assert "not confirmed by targeted cases" in by_op["bad"]["diagnosis"]
    assert live.diagnosis.startswith("fails") and "confirmation case(s) agree" in live.diagnosis


def test_plugin_quick_isolated_and_an_uncovered_client_op_is_not_run(plugin_ws: Path, clean_env) -> None:
    (plugin_ws / "test_client.py").unlink()
    code, out, outcomes = run_pytest(plugin_ws, clean_env, "--gpuemu", "--gpuemu-quick", "--gpuemu-isolate")
    assert code == 1, out
    assert sorted(k for k in outcomes if k.startswith("gpuemu.toml::")) == [  # quick: float32 and a few float16
        "gpuemu.toml::bad[float16]",
        "gpuemu.toml::bad[float32]",
        "gpuemu.toml::client_op[float32]",
        "gpuemu.toml::good[float16]",
        "gpuemu.toml::good[float32]",
    ], out
    assert outcomes["gpuemu.toml::good[float32]"] == "PASSED"
    assert outcomes["gpuemu.toml::client_op[float32]"] == "FAILED"
    assert "NOT RUN client_op: execution_mode = 'client_side' and no module" in out
    db = plugin_ws / ".gpuemu" / "gpuemu.db"
    (good,) = rows(db, "SELECT * FROM op_results WHERE op = 'good'")
    assert good["cases"] == len(planned(plugin_ws, "good", "quick"))
    assert not rows(db, "SELECT * FROM op_results WHERE op = 'client_op'")  # nothing ran: nothing stored


def test_plugin_config_error_and_no_collection_without_the_flag(plugin_ws: Path, clean_env) -> None:
    code, out, outcomes = run_pytest(plugin_ws, clean_env)
    assert code == 0, out  # the hand-written tests alone (fixtures work without --gpuemu)
    assert not any(k.startswith("gpuemu.toml") for k in outcomes) and outcomes
    (plugin_ws / "gpuemu.toml").write_text(TOML.replace('dtypes = ["float32"]', 'dtypes = ["float31"]'))
    code, out, _ = run_pytest(plugin_ws, clean_env, "--gpuemu", "gpuemu.toml")
    assert code != 0 and "float31" in out and re.search(r"gpuemu\.toml:\d+:\d+: error", out), out
