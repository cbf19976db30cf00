"""A work cut must never explain a bug away (issue 16, trust first): each bug class a high-cost kernel has
(strides ignored, a tail tile leaked, an accumulator overwritten across tiles) is caught by the default cut
on every seed tried, in thorough runs in every dtype (the pytest plugin gives a verdict per dtype) and in
quick runs (float32 plus a few half-precision cases) in float32, while its correct twin passes. Runs
through the Python API in this process: numpy stand-ins for Triton kernels, declared ``cost = "high"`` (an
op that imports triton gets the same plan)."""

from __future__ import annotations

from pathlib import Path

import pytest
from kit.workspace import write_ws

from gpuemu_ls.api.client import Client

OPS = """
import numpy as np

TILE = 16


def scale(x):
    return (np.asarray(x, dtype=np.float32) * 2).astype(x.dtype)


def scale_bug_strides(x):
    # reads the buffer as if it were contiguous: right only for a contiguous layout
    flat = np.ravel(x, order="K")
    return (flat.reshape(x.shape).astype(np.float32) * 2).astype(x.dtype)


def scale_bug_tail(x):
    out = np.asarray(x, dtype=np.float32) * 2
    n = out.shape[-1]
    if n % TILE:
        out[..., n - n % TILE :] = 0  # the partial last tile is never written
    return out.astype(x.dtype)


def rowsum(x):
    f = np.asarray(x, dtype=np.float32)
    acc = np.zeros(f.shape[:-1], np.float32)
    for k in range(0, f.shape[-1], TILE):
        acc += f[..., k : k + TILE].sum(-1)
    return acc.astype(x.dtype)


def rowsum_bug_overwrite(x):
    f = np.asarray(x, dtype=np.float32)
    acc = np.zeros(f.shape[:-1], np.float32)
    for k in range(0, f.shape[-1], TILE):
        acc = f[..., k : k + TILE].sum(-1)  # overwritten: right only when N fits one tile
    return acc.astype(x.dtype)


def ref_scale(x):
    return np.asarray(x, dtype=np.float64) * 2


def ref_rowsum(x):
    return np.asarray(x, dtype=np.float64).sum(-1)
"""

OP = """
[[ops]]
name = "{name}"
module = "ops:{name}"
reference = "ops:ref_{ref}"
cost = "high"
[ops.inputs.x]
shape = ["B", "N"]
[ops.dims]
B = {{ min = 1, max = 64, default = 8 }}
N = {{ min = 1, max = 4096, default = 1024 }}
"""

PAIRS = {"scale_bug_strides": "scale", "scale_bug_tail": "scale", "rowsum_bug_overwrite": "rowsum"}


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Client:
    root: Path = tmp_path_factory.mktemp("bugs")
    names = ["scale", "rowsum", *PAIRS]
    toml = '[project]\nname = "bugs"\n[validation]\ndtypes = ["float32", "float16", "bfloat16"]\niterations = 24\n'
    toml += "".join(OP.format(name=n, ref=n.split("_bug")[0]) for n in names)
    write_ws(root, toml, {"ops.py": OPS})
    return Client(root)


@pytest.mark.parametrize("quick", [False, True], ids=["thorough", "quick"])
@pytest.mark.parametrize("seed", [0, 1000, 2000])
@pytest.mark.parametrize("bug", sorted(PAIRS))
def test_the_cut_catches_the_bug_in_every_dtype_and_passes_its_twin(
    client: Client, bug: str, seed: int, quick: bool
) -> None:
    plan = client.test_op(bug, quick=quick, seed=seed)
    ran = {c.spec.dtype for c in plan.cases}
    failed = {c.spec.dtype for c in plan.cases if c.status == "failed"}
    # thorough: in every dtype it ran; quick (float32 plus a few half-precision cases): in float32
    want = ran if not quick else {"float32"}
    assert not plan.ok and want <= failed, (bug, seed, sorted(ran), sorted(failed))
    twin = client.test_op(PAIRS[bug], quick=quick, seed=seed)
    assert twin.ok, twin.message


def test_the_engine_warns_nothing_of_its_own_in_a_users_process(client: Client) -> None:
    """NaN and overflow in half-precision inputs and outputs: whatever numpy says about them inside gpuemu's own
    bookkeeping (a cast to float64 for the reference, the case's facts, the tier case) stays there; a Python API
    user who turns warnings into errors sees the verdict, not an "internal error: invalid value in cast"."""
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings("error", category=RuntimeWarning, module=r"gpuemu_ls\.")
        plan = client.test_op("rowsum_bug_overwrite", quick=False, seed=0)
    assert plan.status == "failed" and not any(c.status == "error" for c in plan.cases), plan.message
