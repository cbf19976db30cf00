"""Minimize (issue 3): every bug of examples/buggy shrinks to a small case that still fails the same way,
replays as minimized, and ships as a standalone reproduction that needs no gpuemu and passes once the
kernel is fixed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from gatekit import (
    BUGGY_OPS,
    copy_example,
    copy_workspace,
    gpuemu,
    jdoc,
    load_toml,
    numel,
    op_table,
    out,
    standalone,
    swap_module,
    write_files,
)
from kit.ops import op_toml, project_toml

#: ops whose bug needs a long row: the minimized case cannot be much smaller than the original
LONG_ROW_BUGS = {"rmsnorm_fp16_acc"}


def _dims_schema(ws: Path, op: str) -> dict:
    table = op_table(ws, op)
    return {"inputs": {k: v["shape"] for k, v in table["inputs"].items()}, "dims": table["dims"]}


def _in_schema(value: int, spec) -> bool:
    if isinstance(spec, list):
        return value in spec
    if isinstance(spec, int):
        return value == spec
    return spec["min"] <= value <= spec["max"]


@pytest.mark.parametrize("op", BUGGY_OPS)
def test_minimize_every_bug_class(op: str, tmp_path: Path, bare_python: Path) -> None:
    ws = copy_example("buggy", tmp_path / "buggy")
    run = gpuemu("test", "--op", op, "--iterations", "60", "--fail-fast", "--format", "json", cwd=ws)
    assert run.returncode == 1, out(run)
    entry = jdoc(run)["ops"][0]
    assert entry["name"] == op and entry["status"] == "failed" and entry["failures"], entry["message"]
    failure = entry["failures"][0]
    seed = failure["seed"]

    proc = gpuemu("minimize", "--op", op, "--seed", str(seed), "--format", "json", cwd=ws)
    assert proc.returncode == 1, out(proc)  # the minimized case still fails
    info = jdoc(proc)
    orig, mini = info["original"], info["minimized"]
    # the case minimized is the one the run reported, and it shrinks to one failing the same way
    assert orig["shapes"] == failure["shapes"] and orig["kind"] == failure["kind"]
    assert mini["kind"] == orig["kind"], (orig, mini)
    assert set(mini["shapes"]) == set(orig["shapes"])

    # small: no dim grows, far fewer elements, dims within the op's schema and shared dims consistent
    schema = _dims_schema(ws, op)
    for name, shape in mini["shapes"].items():
        assert len(shape) == len(orig["shapes"][name])
        assert all(a <= b for a, b in zip(shape, orig["shapes"][name])), (name, shape, orig["shapes"][name])
        assert shape == [mini["dims"][d] for d in schema["inputs"][name]], (name, shape, mini["dims"])
    for dim, value in mini["dims"].items():
        assert _in_schema(value, schema["dims"][dim]), (dim, value, schema["dims"][dim])
    small, big = numel(mini["shapes"]), numel(orig["shapes"])
    if op in LONG_ROW_BUGS:
        assert small < big, (mini["shapes"], orig["shapes"])
    else:
        assert small * 2 <= big, f"minimized {mini['shapes']} is not much smaller than {orig['shapes']}"

    # the minimized case replays from the store, and still fails
    rep = gpuemu("reproduce", "--op", op, "--seed", str(seed), "--minimized", cwd=ws)
    assert rep.returncode == 1, out(rep)
    assert "minimized snapshot" in rep.stdout and f"FAILED [{orig['kind']}]" in rep.stdout, rep.stdout

    # the standalone reproduction: no gpuemu importable, no absolute path of the workspace inside
    script = ws / ".gpuemu" / "repro" / f"{op}_{seed}_min.py"
    assert Path(info["repro"]).resolve() == script.resolve() and script.is_file()
    text = script.read_text(encoding="utf-8")
    for absolute in {str(ws), str(ws.resolve()), str(tmp_path)}:
        assert absolute not in text
    assert "gpuemu_ls" not in text.replace("written by gpuemu-ls", "")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    alone = standalone(bare_python, script, elsewhere)
    assert alone.returncode == 1 and "FAILED: " in alone.stdout, out(alone)
    assert "ModuleNotFoundError" not in alone.stderr

    # fix the kernel (the buggy function becomes its twin): the same standalone file now passes
    fixed = copy_workspace(ws, tmp_path / "fixed")
    module_file = fixed / (op_table(ws, op)["module"].split(":")[0] + ".py")
    with module_file.open("a", encoding="utf-8") as fh:
        fh.write(f"\n\n{op} = {op}_ok  # fixed\n")
    passed = standalone(bare_python, fixed / ".gpuemu" / "repro" / script.name, elsewhere)
    assert passed.returncode == 0 and "PASSED" in passed.stdout, out(passed)

    # point the op at its twin in gpuemu.toml: the minimized case passes, so does its new reproduction
    twin = copy_workspace(ws, tmp_path / "twin")
    swap_module(twin, op, op_table(ws, f"{op}_ok")["module"])
    rep = gpuemu("reproduce", "--op", op, "--seed", str(seed), "--minimized", cwd=twin)
    assert rep.returncode == 0 and "PASSED" in rep.stdout, out(rep)
    passed = standalone(bare_python, twin / ".gpuemu" / "repro" / script.name, elsewhere)
    assert passed.returncode == 0 and "PASSED" in passed.stdout, out(passed)


THRESHOLD_OP = """import numpy as np


def reference(x):
    return x.astype(np.float64)


def copy_op(x):
    out = np.array(x, copy=True)
    out[..., 100:] += 1  # wrong from column 100 on: fails iff N > 100
    return out
"""

THRESHOLD_TOML = project_toml("threshold", validation={"dtypes": ["float32"], "distributions": ["normal"]}) + op_toml(
    "copy_op",
    module="threshold:copy_op",
    reference="threshold:reference",
    layouts=["contiguous"],
    dims={"B": (1, 4, 2), "N": (1, 4096, 4000)},
)


def test_minimize_reaches_the_smallest_case_of_a_threshold_bug(tmp_path: Path) -> None:
    ws = write_files(tmp_path / "ws", {"gpuemu.toml": THRESHOLD_TOML, "threshold.py": THRESHOLD_OP})
    run = gpuemu("test", "--iterations", "4", "--format", "json", cwd=ws)
    assert run.returncode == 1, out(run)
    failure = next(f for f in jdoc(run)["ops"][0]["failures"] if f["shapes"]["x"][1] > 1000)
    proc = gpuemu("minimize", "--op", "copy_op", "--seed", str(failure["seed"]), "--format", "json", cwd=ws)
    info = json.loads(proc.stdout)
    assert load_toml(ws)["ops"][0]["dims"]["N"]["min"] == 1
    # the smallest failing case is N = 101 (B = 1): the bug's edge, found well within the trial budget
    assert info["minimized"]["dims"] == {"B": 1, "N": 101}, (info["minimized"], info["trials"], info["steps"][-3:])
