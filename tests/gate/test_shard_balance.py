"""Shards balanced by measured cost, and `--shard auto` from the CI's matrix variables (issue 16, item 5).

Units: the greedy longest-processing-time partition is deterministic, puts every op in exactly one shard,
and on a skewed cost set beats the old every-N-th-by-name split. End to end (real CLI, real workers): a
skewed workspace is run unsharded, its baseline (which now carries per-op cost) committed, then each
shard runs in a fresh store as on its own CI machine, with `--shard auto` fed by GitHub-style
(`GPUEMU_SHARD`) or GitLab (`CI_NODE_INDEX`/`CI_NODE_TOTAL`) variables; the merged verdict equals the
unsharded one (same ops, verdicts and case counts), and the shards are balanced by cost.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from gatekit import env, gpuemu, jdoc, out, write_files

from gpuemu_ls.engine.errors import UsageError
from gpuemu_ls.engine.tools.shard import by_name, partition, resolve_shard, shard_from_env

# ---------------------------------------------------------------------------------------------- units


def _items(n: int) -> list[tuple[str, str]]:
    return [("op", f"op{i:02d}") for i in range(n)]


def test_partition_is_deterministic_and_covers_every_item_once() -> None:
    rng = random.Random(7)
    items = [*_items(23), ("kernel", "gemm"), ("kernel", "scan")]
    costs = {it: rng.uniform(0.1, 30) for it in items[:20]}  # five without a cost: the median stands in
    for n in (1, 2, 3, 4, 7, 25, 40):
        parts, loads = partition(items, costs, n)
        again, _ = partition(list(reversed(items)), dict(reversed(list(costs.items()))), n)
        assert parts == again  # the order items and costs arrive in does not matter
        flat = [it for p in parts for it in p]
        assert sorted(flat) == sorted(items) and len(flat) == len(set(flat))
        assert len(parts) == n and len(loads) == n


def test_cost_balanced_beats_by_name_on_skewed_costs() -> None:
    items = _items(12)
    # two slow ops that sort next to each other (the Triton ops of a mostly-numpy workspace), the rest cheap
    costs = {it: 1.0 for it in items} | {("op", "op00"): 60.0, ("op", "op03"): 55.0, ("op", "op06"): 50.0}
    n = 3
    parts, loads = partition(items, costs, n)
    old = [sum(costs[it] for it in p) for p in by_name(items, n)]
    assert max(old) == 60 + 55 + 50 + 1  # every 3rd op by name: all three slow ops in one shard
    assert max(loads) <= 60 + 3 and max(loads) < max(old) / 2.5
    assert sorted(len(p) for p in parts) != [4, 4, 4]  # balanced by cost, not by count


def test_shard_auto_reads_github_and_gitlab_variables() -> None:
    assert shard_from_env({"GPUEMU_SHARD": "2/4"})[:2] == (2, 4)
    assert shard_from_env({"CI_NODE_INDEX": "3", "CI_NODE_TOTAL": "5"})[:2] == (3, 5)  # GitLab: 1-based
    assert shard_from_env({"GPUEMU_SHARD": "1/2", "CI_NODE_INDEX": "3", "CI_NODE_TOTAL": "5"})[:2] == (1, 2)
    k, n, origin = shard_from_env({})
    assert (k, n) == (1, 1) and "every op" in origin
    assert resolve_shard("AUTO", {"CI_NODE_INDEX": "1", "CI_NODE_TOTAL": "1"})[:2] == (1, 1)
    assert resolve_shard("2/3", {"GPUEMU_SHARD": "1/9"})[:2] == (2, 3)  # explicit K/N ignores the env
    for bad in (
        {"GPUEMU_SHARD": "0/4"},
        {"GPUEMU_SHARD": "4"},
        {"CI_NODE_INDEX": "0", "CI_NODE_TOTAL": "3"},
        {"CI_NODE_INDEX": "4", "CI_NODE_TOTAL": "3"},
        {"CI_NODE_INDEX": "2"},
    ):
        with pytest.raises(UsageError, match="--shard auto"):
            shard_from_env(bad)


# ------------------------------------------------------------------------------------- end to end

KERNELS = """
import time

import numpy as np

def scale(x):
    return (x * 2).astype(x.dtype)

def scale_bug(x):
    y = (x * 2).astype(x.dtype)
    y[..., -1:] = 0  # BUG: the last column is lost
    return y

def slow_scale(x):
    time.sleep(0.3)  # an expensive op: what the Triton interpreter is to numpy
    return (x * 2).astype(x.dtype)

def ref(x):
    return x * 2
"""


def _op(name: str, fn: str, n_max: int, iterations: int) -> str:
    return f"""
[[ops]]
name = "{name}"
module = "k:{fn}"
reference = "k:ref"
iterations = {iterations}
dtypes = ["float32"]

[ops.inputs.x]
shape = ["B", "N"]

[ops.dims]
B = {{ min = 1, max = 8, default = 4 }}
N = {{ min = 1, max = {n_max}, default = 64 }}
"""


def _workspace(root: Path) -> Path:
    ops = [
        _op("a_slow", "slow_scale", 64, 12),
        _op("b_slow", "slow_scale", 64, 12),
        _op("c_scale", "scale", 64, 4),
        _op("d_scale_bug", "scale_bug", 64, 4),
        _op("e_scale", "scale", 64, 4),
        _op("f_scale", "scale", 64, 4),
    ]
    # few cases per op: well inside any time budget, so that every run covers the same cases
    head = '[project]\nname = "shards"\nframework = "numpy"\n\n[validation]\nseed = 3\n\n[ci]\nfuzz_iterations = 12\n'
    toml = head + "".join(ops)
    return write_files(root, {"gpuemu.toml": toml, "k.py": KERNELS})


def _verdicts(doc: dict) -> dict:
    return {
        e["name"]: (e["status"], e["cases"], e["passed"], e["failed"], e["errors"], e["cases_run"]["seeds_hash"])
        for e in doc["ops"] + doc["kernels"]
    }


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = tmp_path_factory.mktemp("shard-balance")
    ws = _workspace(root / "ws")
    whole = gpuemu("ci", "-j", "1", "--format", "json", "--output", "all.json", "--no-progress", cwd=ws)
    assert whole.returncode == 1, out(whole)
    stored = gpuemu("baseline", "store", "nightly", "--from", "all.json", cwd=ws)
    assert stored.returncode == 0, out(stored)
    n = 3
    docs: dict[str, list[dict]] = {}
    for ci, variables in (
        ("github", lambda k: {"GPUEMU_SHARD": f"{k}/{n}"}),
        ("gitlab", lambda k: {"CI_NODE_INDEX": str(k), "CI_NODE_TOTAL": str(n)}),
    ):
        docs[ci] = []
        for k in range(1, n + 1):  # each shard on its own machine: a fresh store, the committed baseline
            environ = env(GPUEMU_STORE=str(root / f"{ci}-{k}.db"), **variables(k))
            argv = ["ci", "--shard", "auto", "--baseline", "nightly", "-j", "1", "--format", "json", "--no-progress"]
            proc = gpuemu(*argv, "--output", f"{ci}-{k}.json", cwd=ws, environ=environ)
            assert proc.returncode in (0, 1), out(proc)
            assert f"shard {k}/{n}" in proc.stderr, out(proc)
            docs[ci].append(json.loads((ws / f"{ci}-{k}.json").read_text(encoding="utf-8")))
    return {"ws": ws, "whole": json.loads((ws / "all.json").read_text(encoding="utf-8")), "docs": docs, "n": n}


@pytest.mark.parametrize("ci", ["github", "gitlab"])
def test_merged_shards_equal_the_unsharded_run(runs: dict, ci: str) -> None:
    ws, whole, docs, n = runs["ws"], runs["whole"], runs["docs"][ci], runs["n"]
    assert [d["shard"] for d in docs] == [f"{k}/{n}" for k in range(1, n + 1)]
    names = [e["name"] for d in docs for e in d["ops"]]
    assert sorted(names) == sorted(e["name"] for e in whole["ops"]) and len(names) == len(set(names))
    plans = [d["shard_plan"] for d in docs]
    assert {p["digest"] for p in plans} == {plans[0]["digest"]}
    assert all(p["costs"] == "baseline 'nightly'" for p in plans)
    files = [f"{ci}-{k}.json" for k in range(1, n + 1)]
    merged = gpuemu("report", "--merge", *files, "--format", "json", cwd=ws)
    assert merged.returncode == whole["exit_code"] == 1, out(merged)
    doc = jdoc(merged)
    assert _verdicts(doc) == _verdicts(whole)
    assert doc["summary"] == whole["summary"] and doc["status"] == whole["status"] == "failed"


def test_shards_are_balanced_by_the_baselines_costs(runs: dict) -> None:
    """The two slow ops sort first by name; every-N-th-by-name put them in shards 1 and 2 with cheap ops too,
    cost balancing gives each slow op a shard of its own and the cheap ones the third."""
    whole = {e["name"]: e["elapsed"] for e in runs["whole"]["ops"]}
    assert min(whole["a_slow"], whole["b_slow"]) > 2 * max(v for k, v in whole.items() if "slow" not in k)
    by_shard = [sorted(e["name"] for e in d["ops"]) for d in runs["docs"]["github"]]
    slow_shards = [i for i, ops in enumerate(by_shard) if any("slow" in o for o in ops)]
    assert len(slow_shards) == 2 and all(len(by_shard[i]) == 1 for i in slow_shards), by_shard
    baseline = json.loads((runs["ws"] / "gpuemu-baselines" / "nightly.json").read_text(encoding="utf-8"))
    assert all(isinstance(v.get("elapsed"), float) for v in baseline["ops"].values())


def test_merge_refuses_shards_planned_from_different_costs(runs: dict, tmp_path: Path) -> None:
    ws, n = runs["ws"], runs["n"]
    docs = [json.loads((ws / f"github-{k}.json").read_text(encoding="utf-8")) for k in range(1, n + 1)]
    docs[1]["shard_plan"]["digest"] = "0123456789abcdef"  # as if shard 2 had read other costs
    files = []
    for k, d in enumerate(docs, 1):
        files.append(str(tmp_path / f"s{k}.json"))
        Path(files[-1]).write_text(json.dumps(d), encoding="utf-8")
    proc = gpuemu("report", "--merge", *files, cwd=ws)
    assert proc.returncode == 2 and "different op costs" in proc.stderr, out(proc)


def test_shard_auto_without_ci_variables_runs_every_op(runs: dict, tmp_path: Path) -> None:
    environ = env(GPUEMU_STORE=str(tmp_path / "s.db"))
    for var in ("GPUEMU_SHARD", "CI_NODE_INDEX", "CI_NODE_TOTAL"):
        environ.pop(var, None)
    proc = gpuemu(
        "ci", "--shard", "auto", "--quick", "--iterations", "1", "--format", "json", cwd=runs["ws"], environ=environ
    )
    assert proc.returncode == 1, out(proc)
    doc = jdoc(proc)
    assert doc["shard"] == "1/1" and len(doc["ops"]) == 6
