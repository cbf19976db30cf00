"""Baselines and regressions (issue 4, CI half): `gpuemu baseline store` writes reviewable JSON, and
`gpuemu ci --baseline TAG` reports real regressions (a broken op, a kernel that starts to spill, error
growth inside tolerance) but not noise, failing the gate only with `--fail-on-regression` or
`[policies] fail_on_regression = true`."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from gatekit import (
    CUDA_DATA,
    EXAMPLES,
    copy_example,
    copy_workspace,
    gpuemu,
    have_nvcc,
    jdoc,
    out,
    swap_module,
    write_files,
)
from kit.ops import op_toml, project_toml

needs_nvcc = pytest.mark.skipif(
    not have_nvcc(), reason="nvcc not found (pip install './gpuemu-ls[cuda]' from a checkout)"
)


def _ci(ws: Path, *args: str):
    """`gpuemu ci ARGS --format json --output r.json`: the document, plus the text that goes to stdout."""
    proc = gpuemu("ci", *args, "--format", "json", "--output", "r.json", cwd=ws)
    assert proc.returncode in (0, 1), out(proc)
    return proc, json.loads((ws / "r.json").read_text(encoding="utf-8"))


# --- quickstart: the realistic baseline --------------------------------------------------------


#: thorough (every dtype, layout, shape strategy and distribution), 30 cases per op
QS_FLAGS = ("--iterations", "30")


def _build_quickstart(root: Path) -> None:
    ws = copy_example("quickstart", root / "quickstart")
    proc = gpuemu("ci", *QS_FLAGS, "--format", "json", "--output", "results.json", cwd=ws)
    assert proc.returncode == 0, out(proc)
    stored = gpuemu("baseline", "store", "nightly", cwd=ws)
    assert stored.returncode == 0, out(stored)
    from_file = gpuemu("baseline", "store", "fromjson", "--from", "results.json", cwd=ws)
    assert from_file.returncode == 0, out(from_file)


@pytest.fixture(scope="module")
def quickstart(shared) -> dict:
    """quickstart after a green thorough gate run, with baselines `nightly` (from the store) and `fromjson`."""
    ws = shared("baseline-quickstart", _build_quickstart) / "quickstart"
    return {"ws": ws, "results": json.loads((ws / "results.json").read_text(encoding="utf-8"))}


def test_baseline_is_reviewable_json(quickstart: dict) -> None:
    ws, results = quickstart["ws"], quickstart["results"]
    path = ws / "gpuemu-baselines" / "nightly.json"
    assert path.is_file()
    text = path.read_text(encoding="utf-8")
    data = json.loads(text)
    # one key per line, two-space indent, ends with a newline: diffs review line by line
    assert text == json.dumps(data, indent=2) + "\n"
    assert str(ws) not in text and str(ws.resolve()) not in text
    assert data["schema"] == 1 and data["tag"] == "nightly" and data["tolerance_rule"] == "scaled-1"
    assert list(data["ops"]) == sorted(e["name"] for e in results["ops"])
    for e in results["ops"]:
        base = data["ops"][e["name"]]
        assert base["status"] == e["status"] in ("passed", "edge")
        assert base["cases"] == e["cases"]
        for k in ("max_abs", "max_rel", "max_ratio"):
            assert base[k] == pytest.approx(e["stats"][k], rel=1e-12, abs=0)
    # `baseline show` prints it; a baseline stored from the results file holds the same verdicts
    shown = gpuemu("baseline", "show", "nightly", cwd=ws)
    assert shown.returncode == 0 and json.loads(shown.stdout) == data, out(shown)
    other = json.loads((ws / "gpuemu-baselines" / "fromjson.json").read_text(encoding="utf-8"))
    assert other["ops"] == data["ops"]


def test_unchanged_workspace_has_no_regression_against_its_own_baseline(quickstart: dict, tmp_path: Path) -> None:
    ws = copy_workspace(quickstart["ws"], tmp_path / "ws")
    proc, doc = _ci(ws, *QS_FLAGS, "--baseline", "nightly", "--fail-on-regression")
    assert proc.returncode == 0, out(proc)
    assert doc["regressions"] == [] and doc["baseline"] == "nightly"
    assert "REGRESSION" not in proc.stdout


ROWSUM_PY = '''import numpy as np


def reference(x):
    return x.sum(axis=-1, keepdims=True)


def rowsum(x):
    """One thread per row, a float32 accumulator, left to right: correct, with the usual rounding."""
    acc = np.add.accumulate(x.astype(np.float32), axis=-1, dtype=np.float32)
    return acc[..., -1:].astype(x.dtype)
'''

ROWSUM_TOML = project_toml("noise", validation={"dtypes": ["float32"]}, ci={"fuzz_iterations": 16}) + op_toml(
    "rowsum",
    module="rowsum:rowsum",
    reference="rowsum:reference",
    distributions=["normal", "uniform"],
    dims={"B": (1, 64, 8), "N": (1, 4096, 1024)},
    tables={"tolerances": {"float32": {"atol": 3e-5, "rtol": 3e-5}}},
)


def test_other_seeds_of_the_unchanged_workspace_are_noise_not_regressions(quickstart: dict, tmp_path: Path) -> None:
    # a correct float32 row sum (one thread per row): its rounding error depends on the rows drawn
    ws = write_files(tmp_path / "rowsum", {"gpuemu.toml": ROWSUM_TOML, "rowsum.py": ROWSUM_PY})
    _baseline(ws, "base")
    for seed in ("1000", "2000", "5000"):
        proc, doc = _ci(ws, "--baseline", "base", "--seed", seed, "--fail-on-regression")
        assert doc["status"] == "passed", (seed, [o["message"] for o in doc["ops"]])
        assert doc["regressions"] == [], (seed, [r["reason"] for r in doc["regressions"]])
        assert proc.returncode == 0
    # the quickstart kernels, on seeds that share no case with the baseline's
    qs = copy_workspace(quickstart["ws"], tmp_path / "qs")
    proc, doc = _ci(qs, *QS_FLAGS, "--baseline", "nightly", "--seed", "5000", "--fail-on-regression")
    assert doc["status"] in ("passed", "edge"), [o["message"] for o in doc["ops"]]  # edge findings pass the gate
    assert doc["regressions"] == [], [r["reason"] for r in doc["regressions"]]
    assert proc.returncode == 0, out(proc)


def test_a_broken_op_is_a_regression(quickstart: dict, tmp_path: Path) -> None:
    ws = copy_workspace(quickstart["ws"], tmp_path / "ws")
    shutil.copy(EXAMPLES / "buggy" / "softmax_tail_mask.py", ws / "softmax_tail_mask.py")
    swap_module(ws, "softmax", "softmax_tail_mask:softmax_tail_mask")
    proc, doc = _ci(ws, *QS_FLAGS, "--baseline", "nightly", "--op", "softmax")
    assert proc.returncode == 1, out(proc)
    (reg,) = doc["regressions"]
    assert reg["kind"] == "op" and reg["name"] == "softmax"
    assert "passed in baseline 'nightly', now failed" in reg["reason"]
    assert reg["location"]["file"] == "softmax_tail_mask.py"
    assert "REGRESSION op softmax: passed in baseline" in proc.stdout


# --- an op whose error we control, and a kernel we can make spill --------------------------------

SCALED_PY = '''"""x -> 2x with a deliberate absolute error of ERROR_SCALE * atol on every element."""

import numpy as np

ERROR_SCALE = {scale}


def reference(x):
    return 2.0 * x


def scaled(x):
    return (2.0 * x.astype(np.float64) + ERROR_SCALE * 1e-5).astype(x.dtype)
'''

REGRESS_TOML = project_toml(
    "regress",
    validation={"dtypes": ["float32"]},
    validation_tolerances={"float32": {"atol": 1e-5, "rtol": 1e-5}},
    ci={"fuzz_iterations": 16, "regression_threshold": 0.1},
) + op_toml(
    "scaled",
    module="scaled:scaled",
    reference="scaled:reference",
    distributions=["normal", "uniform"],
    dims={"B": (1, 16, 4), "N": (1, 512, 64)},
)

KERNEL_TOML = """
[[kernels]]
name = "register_heavy"
source = "register_heavy.cu"
"""


def _scaled_ws(root: Path, scale: float, kernel: bool = False) -> Path:
    ws = write_files(
        root,
        {"gpuemu.toml": REGRESS_TOML + (KERNEL_TOML if kernel else ""), "scaled.py": SCALED_PY.format(scale=scale)},
    )
    if kernel:
        shutil.copy(CUDA_DATA / "register_heavy.cu", ws / "register_heavy.cu")
    return ws


def _set_scale(ws: Path, scale: float) -> None:
    (ws / "scaled.py").write_text(SCALED_PY.format(scale=scale), encoding="utf-8")


def _baseline(ws: Path, tag: str) -> dict:
    proc, doc = _ci(ws)
    assert proc.returncode == 0, out(proc)
    stored = gpuemu("baseline", "store", tag, cwd=ws)
    assert stored.returncode == 0, out(stored)
    return doc


def test_error_growth_within_tolerance_is_a_regression(tmp_path: Path) -> None:
    ws = _scaled_ws(tmp_path / "ws", 0.3)
    base = _baseline(ws, "base")["ops"][0]["stats"]

    same, doc = _ci(ws, "--baseline", "base", "--fail-on-regression")  # unchanged: nothing to report
    assert same.returncode == 0 and doc["regressions"] == [], out(same)

    _set_scale(ws, 0.6)
    proc, doc = _ci(ws, "--baseline", "base")
    op = doc["ops"][0]
    assert op["status"] == "passed" and op["stats"]["max_ratio"] < 1  # still within tolerance
    assert op["stats"]["max_abs"] > base["max_abs"] * 1.1
    (reg,) = doc["regressions"]
    assert reg["kind"] == "op" and reg["name"] == "scaled" and "max error grew" in reg["reason"]
    assert "REGRESSION op scaled: max error grew" in proc.stdout
    assert proc.returncode == 0, out(proc)  # reported as a warning only

    flagged = gpuemu("ci", "--baseline", "base", "--fail-on-regression", cwd=ws)
    assert flagged.returncode == 1, out(flagged)
    assert "REGRESSION op scaled" in flagged.stdout

    with (ws / "gpuemu.toml").open("a", encoding="utf-8") as fh:
        fh.write("\n[policies]\nfail_on_regression = true\n")
    policy, doc = _ci(ws, "--baseline", "base")
    assert policy.returncode == 1 and doc["fail_on_regression"] is True, out(policy)
    junit = gpuemu("ci", "--baseline", "base", "--format", "junit", cwd=ws)
    assert junit.returncode == 1
    assert 'classname="gpuemu.regressions" name="op:scaled"' in junit.stdout and "<failure" in junit.stdout


def test_error_growth_under_the_noise_floor_is_not_reported(tmp_path: Path) -> None:
    ws = _scaled_ws(tmp_path / "ws", 0.02)
    base = _baseline(ws, "tiny")["ops"][0]["stats"]
    _set_scale(ws, 0.06)
    proc, doc = _ci(ws, "--baseline", "tiny", "--fail-on-regression")
    stats = doc["ops"][0]["stats"]
    # the error did grow beyond the threshold, but it stays under 10% of the tolerance
    assert stats["max_abs"] > base["max_abs"] * 1.1, (base, stats)
    assert stats["max_ratio"] < 0.1, stats
    assert doc["regressions"] == [], doc["regressions"]
    assert proc.returncode == 0, out(proc)


@needs_nvcc
def test_a_kernel_that_starts_to_spill_is_a_regression(tmp_path: Path) -> None:
    ws = _scaled_ws(tmp_path / "ws", 0.3, kernel=True)
    doc = _baseline(ws, "kern")
    (kernel,) = doc["kernels"]
    assert kernel["status"] == "passed" and kernel["resources"]["spill_bytes"] == 0
    saved = json.loads((ws / "gpuemu-baselines" / "kern.json").read_text(encoding="utf-8"))
    assert saved["kernels"]["register_heavy"]["resources"]["registers"] == kernel["resources"]["registers"]

    same, doc = _ci(ws, "--baseline", "kern", "--fail-on-regression")
    assert same.returncode == 0 and doc["regressions"] == [], out(same)

    toml = ws / "gpuemu.toml"
    toml.write_text(
        toml.read_text(encoding="utf-8").replace(
            'source = "register_heavy.cu"\n', 'source = "register_heavy.cu"\nflags = ["-maxrregcount=32"]\n'
        ),
        encoding="utf-8",
    )
    proc, doc = _ci(ws, "--baseline", "kern")
    (kernel,) = doc["kernels"]
    assert kernel["status"] == "passed" and kernel["resources"]["spill_bytes"] > 0  # no limit: lint passes
    reasons = [r["reason"] for r in doc["regressions"] if r["kind"] == "kernel" and r["name"] == "register_heavy"]
    assert any(r.startswith("spill bytes: 0 -> ") for r in reasons), doc["regressions"]
    assert doc["regressions"][0]["location"]["file"] == "register_heavy.cu"
    assert "REGRESSION kernel register_heavy: spill bytes" in proc.stdout
    assert proc.returncode == 0, out(proc)

    flagged = gpuemu("ci", "--baseline", "kern", "--fail-on-regression", cwd=ws)
    assert flagged.returncode == 1, out(flagged)
    diff = gpuemu("baseline", "diff", "kern", "--fail-on-regression", cwd=ws)
    assert diff.returncode == 1 and "REGRESSION kernel register_heavy" in diff.stdout, out(diff)

    with toml.open("a", encoding="utf-8") as fh:
        fh.write("\n[policies]\nfail_on_regression = true\n")
    policy = gpuemu("ci", "--baseline", "kern", cwd=ws)
    assert policy.returncode == 1, out(policy)


def test_unknown_baseline_is_a_usage_error(tmp_path: Path) -> None:
    ws = _scaled_ws(tmp_path / "ws", 0.3)
    proc = gpuemu("ci", "--baseline", "nope", cwd=ws)
    assert proc.returncode == 2 and "no baseline" in proc.stderr and "nope.json" in proc.stderr, out(proc)


def test_unknown_baseline_is_reported_before_anything_runs(tmp_path: Path) -> None:
    ws = _scaled_ws(tmp_path / "ws", 0.3)
    proc = gpuemu("ci", "--baseline", "nope", cwd=ws)
    assert proc.returncode == 2, out(proc)
    report = gpuemu("report", "--format", "json", cwd=ws)
    assert jdoc(report)["ops"] == [], "the ops ran (and were stored) before the baseline was looked up"
