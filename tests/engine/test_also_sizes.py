"""Sizes every run reaches (issue 26 item 4): ``B = { min = 1, max = 64, also = [4096] }`` plans B = 4096 at least
once per run in each dtype the run covers, beyond the range the other cases draw from, so a code path a library
takes only for large batches is always tested. A bug on that path passes without ``also`` (no case gets
there) and fails with it, in thorough and quick runs; the size is never halved to fit the element cap; a
wrong ``also`` is a config error."""

from __future__ import annotations

from pathlib import Path

import pytest
from kit.cli import gpuemu, jdoc, out
from kit.ops import op_toml, project_toml
from kit.workspace import load_op, write_ws

from gpuemu_ls.engine.cases.plan import plan_quick, plan_thorough

OPS = """
import numpy as np

CHUNK = 1024


def rowsum(x):
    if x.shape[0] >= 4096:  # the large-batch path, in chunks of rows
        out = np.empty(x.shape[0], dtype=np.float32)
        for start in range(0, x.shape[0], CHUNK):
            rows = x[start : start + CHUNK].astype(np.float32)
            out[start : start + CHUNK] = rows[:, :-1].sum(axis=1)  # the bug: the chunked path drops a column
        return out.astype(x.dtype)
    return x.astype(np.float32).sum(axis=1).astype(x.dtype)


def ref(x):
    return x.sum(axis=1)
"""


def _toml(also: object | None = (4096,)) -> str:
    b: dict = {"min": 1, "max": 64, "default": 8}
    if also is not None:
        b["also"] = list(also) if isinstance(also, tuple) else also
    toml = project_toml(validation={"dtypes": ["float32", "float16"], "iterations": 16})
    return toml + op_toml("rowsum", module="ops:rowsum", reference="ops:ref", dims={"B": b, "N": (2, 16, 8)})


def test_every_run_reaches_the_size_in_each_dtype(tmp_path: Path) -> None:
    op = load_op(tmp_path, _toml(), "rowsum", {"ops.py": OPS})
    for base in (0, 1000, 5000):
        thorough = plan_thorough(op, base, 16)
        assert {s.dtype for s in thorough if s.dims["B"] == 4096} == {"float32", "float16"}, base
        quick = plan_quick(op, base, 16)
        assert {s.dtype for s in quick if s.dims["B"] == 4096} == {"float32", "float16"}, base
        assert all(s.dims["B"] <= 64 or s.dims["B"] == 4096 for s in thorough + quick)
    big = plan_thorough(op, 0, 16, max_elements=1024)  # 4096 x N is over the cap: other dims give way, not B
    assert any(s.dims["B"] == 4096 for s in big)


def test_a_bug_on_the_large_path_is_caught_only_with_also(tmp_path: Path) -> None:
    root = write_ws(tmp_path / "also", _toml(), {"ops.py": OPS})
    for mode in ("--thorough", "--quick"):
        proc = gpuemu("test", mode, "--format", "json", cwd=root)
        (op,) = jdoc(proc)["ops"]
        assert op["status"] == "failed" and {f["dims"]["B"] for f in op["failures"]} == {4096}, (mode, op)
    plain = write_ws(tmp_path / "plain", _toml(None), {"ops.py": OPS})
    proc = gpuemu("test", "--format", "json", cwd=plain)
    assert jdoc(proc)["ops"][0]["status"] == "passed", out(proc)


@pytest.mark.parametrize(("also", "says"), [([], "also is empty"), ([-1], "must be"), ("4096", "must be an array")])
def test_a_wrong_also_is_a_config_error(tmp_path: Path, also: object, says: str) -> None:
    root = write_ws(tmp_path, _toml(also), {"ops.py": OPS})
    proc = gpuemu("ops", cwd=root)
    assert proc.returncode == 2 and says in proc.stdout + proc.stderr, out(proc)
