"""Sentinel values of integer inputs (issue 26 item 4): ``sentinels = { value = -100, share = 0.25 }`` puts an
ignore_index into about a quarter of a cross-entropy's targets. A loss that averages over every row instead
of the rows not ignored is caught only with the sentinels (the same op passes without them, which is how the
library's own tests missed it); its correct twin passes; the share holds; wrong declarations are config
errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from kit.cli import gpuemu, jdoc, out
from kit.ops import op_toml, project_toml
from kit.workspace import load_op, write_ws

from gpuemu_ls.engine.cases.generate import generate_inputs
from gpuemu_ls.engine.cases.plan import derive_case

OPS = """
import numpy as np

IGNORE = -100


def _nll(logits, target):
    z = np.asarray(logits, dtype=np.float64)
    z = z - z.max(axis=-1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(axis=-1, keepdims=True))
    keep = target != IGNORE
    picked = np.where(keep, logp[np.arange(len(target)), np.where(keep, target, 0)], 0.0)
    return -picked, keep


def xent(logits, target):
    nll, keep = _nll(logits, target)
    return np.asarray(nll.sum() / max(int(keep.sum()), 1), dtype=logits.dtype)


def xent_bug(logits, target):
    nll, _ = _nll(logits, target)
    return np.asarray(nll.sum() / len(target), dtype=logits.dtype)  # the bug: ignored rows counted


def xent_ref(logits, target):
    nll, keep = _nll(logits, target)
    return nll.sum() / max(int(keep.sum()), 1)
"""

DIMS = {"N": (1, 32, 8), "V": (2, 64, 8)}
SENTINEL = {"value": -100, "share": 0.25}


def _inputs(sentinels: object | None) -> dict:
    target: dict = {"shape": ["N"], "dtype": "int64", "range": [0, "V"]}
    if sentinels is not None:
        target["sentinels"] = sentinels
    return {"logits": {"shape": ["N", "V"], "distributions": ["normal", "uniform", "wide"]}, "target": target}


def _toml(sentinels: object | None = SENTINEL) -> str:
    toml = project_toml(validation={"dtypes": ["float32"], "iterations": 16})
    for name, fn in (("xent", "xent"), ("xent_bug", "xent_bug")):
        toml += op_toml(name, module=f"ops:{fn}", reference="ops:xent_ref", inputs=_inputs(sentinels), dims=DIMS)
    return toml


def test_an_ignore_index_bug_is_caught_only_with_sentinels(tmp_path: Path) -> None:
    with_them = write_ws(tmp_path / "with", _toml(), {"ops.py": OPS})
    ops = {o["name"]: o for o in jdoc(gpuemu("test", "--format", "json", cwd=with_them))["ops"]}
    assert ops["xent"]["status"] == "passed", ops["xent"]["failures"][:1]
    assert ops["xent_bug"]["status"] == "failed", ops["xent_bug"]
    without = write_ws(tmp_path / "without", _toml(None), {"ops.py": OPS})
    proc = gpuemu("test", "--format", "json", cwd=without)
    assert {o["name"]: o["status"] for o in jdoc(proc)["ops"]} == {"xent": "passed", "xent_bug": "passed"}, out(proc)


def test_sentinels_take_their_share_and_appear_in_every_case_of_two_or_more(tmp_path: Path) -> None:
    op = load_op(tmp_path, _toml(), "xent", {"ops.py": OPS})
    hits = total = 0
    for seed in range(100):
        spec = derive_case(op, seed)
        target = generate_inputs(op, spec).logical["target"]
        if target.size >= 2:
            assert (target == -100).any(), (seed, target)
        assert ((target == -100) | ((target >= 0) & (target < spec.dims["V"]))).all()
        hits += int((target == -100).sum())
        total += target.size
    assert 0.2 < hits / total < 0.35, hits / total
    again = generate_inputs(op, derive_case(op, 7)).logical["target"]
    assert np.array_equal(again, generate_inputs(op, derive_case(op, 7)).logical["target"])  # replays


@pytest.mark.parametrize(
    ("sentinels", "dtype", "says"),
    [
        ({"value": -100}, "int64", "must have exactly value and share"),
        ({"value": -100, "share": 1.5}, "int64", "a share is in (0, 1]"),
        ({"value": 300, "share": 0.1}, "int8", "does not fit int8"),
        ([{"value": 1, "share": 0.6}, {"value": 2, "share": 0.6}], "int64", "add up to 1.2"),
        ({"value": -100, "share": 0.25}, None, "sentinels need an integer input"),
    ],
)
def test_wrong_sentinels_are_config_errors(tmp_path: Path, sentinels: object, dtype: str | None, says: str) -> None:
    inputs = _inputs(sentinels)
    if dtype is None:
        inputs["target"].pop("dtype")
        inputs["target"].pop("range")
    else:
        inputs["target"]["dtype"] = dtype
    toml = project_toml() + op_toml("o", module="ops:xent", reference="ops:xent_ref", inputs=inputs, dims=DIMS)
    root = write_ws(tmp_path, toml, {"ops.py": OPS})
    proc = gpuemu("ops", cwd=root)
    assert proc.returncode == 2 and says in proc.stdout + proc.stderr, out(proc)
