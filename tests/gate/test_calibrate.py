"""Calibrate (issue 3): tolerances proposed from a correct twin pass that twin, still catch its buggy
sibling, and `--write` changes nothing in gpuemu.toml but the op's [ops.tolerances]."""

from __future__ import annotations

import difflib
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import tomlkit
from gatekit import copy_example, env, gpuemu, jdoc, load_toml, op_table, ops_header_line, out

TWINS = ("softmax_tail_mask_ok", "matmul_acc_overwrite_ok", "rmsnorm_fp16_acc_ok")
TOL_LINE = re.compile(
    r"^\s*((float64|float32|float16|bfloat16)\s*=\s*\{[^}]*\}"  # a line of an [ops.tolerances] table
    r"|tolerances\s*=\s*\{.*\})\s*(#.*)?$"  # or the op's inline `tolerances = {...}` key
)


def _changed_lines(before: str, after: str) -> tuple[list[str], list[str]]:
    removed, added = [], []
    sm = difflib.SequenceMatcher(a=before.splitlines(), b=after.splitlines(), autojunk=False)
    for tag, i1, i2, j1, j2 in sm.get_opcodes():
        if tag != "equal":
            removed += before.splitlines()[i1:i2]
            added += after.splitlines()[j1:j2]
    return removed, added


def _without_tolerances(doc: dict, op: str) -> dict:
    for table in doc["ops"]:
        if table["name"] == op:
            table.pop("tolerances", None)
    return doc


def _set_tolerances(ws: Path, op: str, proposals: dict[str, tuple[float, float]]) -> None:
    """Give op the same tolerances (an edit by hand, through tomlkit)."""
    path = ws / "gpuemu.toml"
    doc = tomlkit.parse(path.read_text(encoding="utf-8"))
    table = next(t for t in doc["ops"] if t["name"] == op)
    if "tolerances" not in table:
        table["tolerances"] = tomlkit.table()
    for dtype, (atol, rtol) in proposals.items():
        entry = tomlkit.inline_table()
        entry.update({"atol": atol, "rtol": rtol})
        table["tolerances"][dtype] = entry
    path.write_text(tomlkit.dumps(doc), encoding="utf-8")


@pytest.mark.parametrize("twin", TWINS)
def test_calibrated_tolerances_pass_the_control_and_still_catch_the_bug(twin: str, tmp_path: Path) -> None:
    bug = twin.removesuffix("_ok")
    ws = copy_example("buggy", tmp_path / "buggy")
    before_text = (ws / "gpuemu.toml").read_text(encoding="utf-8")
    before = load_toml(ws)
    dtypes = op_table(ws, twin).get("dtypes") or before["validation"]["dtypes"]

    proc = gpuemu("calibrate", "--op", twin, "--iterations", "60", "--format", "json", "--write", cwd=ws)
    assert proc.returncode == 0, out(proc)
    report = jdoc(proc)
    assert report["op"] == twin and report["written"] is True
    proposals = {p["dtype"]: (p["atol"], p["rtol"]) for p in report["proposals"]}
    assert sorted(proposals) == sorted(dtypes)
    for p in report["proposals"]:
        assert p["cases"] == 60 and p["failing_now"] == 0, p
        assert 0 <= p["atol"] < 1 and 0 < p["rtol"] < 1, p

    # the file: the op's tolerances are the proposal, everything else is untouched, comments included
    after_text = (ws / "gpuemu.toml").read_text(encoding="utf-8")
    after = load_toml(ws)
    assert {d: (v["atol"], v["rtol"]) for d, v in op_table(ws, twin)["tolerances"].items()} == proposals
    assert _without_tolerances(after, twin) == _without_tolerances(before, twin)
    removed, added = _changed_lines(before_text, after_text)
    assert all(TOL_LINE.match(line) for line in removed), removed
    assert all(TOL_LINE.match(line) or line.strip() in ("", "[ops.tolerances]") for line in added), added
    assert [ln for ln in before_text.splitlines() if ln.lstrip().startswith("#")] == [
        ln for ln in after_text.splitlines() if ln.lstrip().startswith("#")
    ]

    # the control passes under the proposal ...
    ctrl = gpuemu("test", "--op", twin, "--format", "json", cwd=ws)
    assert ctrl.returncode == 0, out(ctrl)
    entry = jdoc(ctrl)["ops"][0]
    assert entry["status"] == "passed" and entry["cases"] > 0
    # ... which is what it ran against (the tolerance of a passing op is what its error is measured in)
    assert 0 < entry["stats"]["max_ratio"] <= 1

    # ... and the buggy sibling still fails under the very same tolerances
    _set_tolerances(ws, bug, proposals)
    assert {d: (v["atol"], v["rtol"]) for d, v in op_table(ws, bug)["tolerances"].items()} == proposals
    red = gpuemu("test", "--op", bug, "--format", "json", cwd=ws)
    assert red.returncode == 1, out(red)
    assert jdoc(red)["ops"][0]["status"] == "failed"


def test_calibration_measures_the_rounding_error_of_a_correct_kernel(tmp_path: Path) -> None:
    ws = copy_example("buggy", tmp_path / "buggy")
    proc = gpuemu("calibrate", "--op", "matmul_acc_overwrite_ok", "--iterations", "20", "--format", "json", cwd=ws)
    assert proc.returncode == 0, out(proc)
    for p in jdoc(proc)["proposals"]:
        # a float32 / float16 / bfloat16 tiled matmul rounds: its observed error cannot be exactly zero
        assert p["observed"]["abs_err_small_ref"]["max"] > 0, p
        assert p["atol"] > 0, p


def test_written_tolerances_stay_above_the_next_ops_comments(tmp_path: Path) -> None:
    ws = copy_example("buggy", tmp_path / "buggy")
    lines = (ws / "gpuemu.toml").read_text(encoding="utf-8").splitlines()
    header = ops_header_line(ws, "matmul_acc_overwrite")
    start = header - 1
    while start > 0 and lines[start - 1].startswith("#"):
        start -= 1
    comments = lines[start : header - 1]  # the comment block right above the next op
    assert len(comments) >= 3

    proc = gpuemu(
        "calibrate", "--op", "softmax_tail_mask_ok", "--dtype", "float32", "--iterations", "5", "--write", cwd=ws
    )
    assert proc.returncode == 0, out(proc)
    new = (ws / "gpuemu.toml").read_text(encoding="utf-8").splitlines()
    header = ops_header_line(ws, "matmul_acc_overwrite")
    assert new[header - 1 - len(comments) : header - 1] == comments, "\n".join(new[header - 12 : header])
    assert "tolerances" in op_table(ws, "softmax_tail_mask_ok")


@pytest.mark.parametrize("bug", ["softmax_tail_mask", "masked_softmax_nan", "rowscale_strides"])
def test_calibration_refuses_to_widen_a_tolerance_over_a_bug(bug: str, tmp_path: Path) -> None:
    """A tolerance that hides a bug is refused (exit 1, nothing written), whatever the bug class: a confirmed
    condition (a tile, a layout), NaN where the reference is finite, or errors far beyond rounding."""
    ws = copy_example("buggy", tmp_path / "buggy")
    before = (ws / "gpuemu.toml").read_text(encoding="utf-8")
    proc = gpuemu("calibrate", "--op", bug, "--iterations", "40", "--write", cwd=ws)
    assert proc.returncode == 1, out(proc)
    assert f"refusing to calibrate {bug!r}" in proc.stderr and "--force" in proc.stderr, out(proc)
    # one reason a line, each readable on a terminal (issue 29 item 7: it was one 717-character line)
    lines = proc.stderr.strip().splitlines()
    assert lines[0].startswith(f"gpuemu: refusing to calibrate {bug!r}") and lines[-1].startswith("Fix the kernel")
    assert len(lines) >= 3 and all(ln.startswith("  ") for ln in lines[1:-1]), out(proc)
    assert max(len(ln) for ln in lines) <= 400, out(proc)
    assert (ws / "gpuemu.toml").read_text(encoding="utf-8") == before
    proc = gpuemu("calibrate", "--op", bug, "--iterations", "40", "--format", "json", cwd=ws)
    assert proc.returncode == 1 and json.loads(proc.stdout)["refused"], out(proc)


def test_force_overrides_the_refusal_with_a_warning(tmp_path: Path) -> None:
    ws = copy_example("buggy", tmp_path / "buggy")
    proc = gpuemu(
        "calibrate", "--op", "softmax_tail_mask", "--dtype", "float32", "--iterations", "24", "--force", cwd=ws
    )
    assert proc.returncode == 0, out(proc)
    assert "warning: --force" in proc.stderr and "proposed atol=" in proc.stdout


@pytest.mark.parametrize("factor", ["nan", "inf", "-inf", "0", "-1", "1e400"])
def test_non_finite_or_non_positive_factors_are_usage_errors(factor: str, tmp_path: Path) -> None:
    ws = copy_example("buggy", tmp_path / "buggy")
    before = (ws / "gpuemu.toml").read_text(encoding="utf-8")
    proc = gpuemu("calibrate", "--op", "softmax_tail_mask_ok", "--factor", factor, "--write", cwd=ws)
    assert proc.returncode == 2 and "--factor" in proc.stderr, out(proc)
    assert (ws / "gpuemu.toml").read_text(encoding="utf-8") == before
    assert gpuemu("ops", cwd=ws).returncode == 0  # the config still loads


def test_calibration_shows_its_progress_on_a_terminal(tmp_path: Path) -> None:
    """It runs for a minute and more: on a terminal (a real pty here) it counts its cases on one line, and
    clears the line before it prints; into a pipe it prints nothing of the kind."""
    import os
    import pty

    ws = copy_example("buggy", tmp_path / "buggy")
    try:
        master, slave = pty.openpty()
    except OSError as exc:  # a sandbox without /dev/ptmx
        pytest.skip(f"no pseudo-terminal here: {exc}")
    argv = [sys.executable, "-m", "gpuemu_ls", "calibrate", "--op", "softmax_tail_mask_ok", "--dtype", "float32"]
    proc = subprocess.Popen([*argv, "--iterations", "8"], cwd=ws, env=env(), stdout=subprocess.PIPE, stderr=slave)
    os.close(slave)
    seen = b""
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        seen += chunk
    stdout = proc.communicate(timeout=300)[0].decode()
    os.close(master)
    text = seen.decode(errors="replace")
    assert proc.returncode == 0, text + stdout
    assert "calibrating softmax_tail_mask_ok: float32 8/8 cases" in text, text
    assert "proposed atol=" in stdout and "calibrating" not in stdout
    piped = gpuemu(*argv[3:], "--iterations", "4", cwd=ws)
    assert piped.returncode == 0 and "calibrating" not in piped.stderr, out(piped)
