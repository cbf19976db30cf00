"""Plan versions (issue 25 item 4): a seed keeps the meaning it was recorded with when the default set of
distributions grows (plan 2 adds ``peaked``) or the default dtypes do (plan 3, the default: the three float
dtypes where neither the op nor [validation] lists dtypes; issue 29 item 2). Plan 1 must still draw for every op of the
examples the very cases the release before plan versions drew (hashes in data/plan1_cases.json, computed
with that release's code); stored cases, pins, baselines and replay commands keep their plan."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tomllib
from kit.ops import identity_py, op_toml, project_toml
from kit.workspace import load_op, write_ws

from gpuemu_ls.engine.cases.generate import generate_inputs
from gpuemu_ls.engine.cases.plan import CaseSpec, derive_case, iter_seeds
from gpuemu_ls.engine.config.edits import pin_seed
from gpuemu_ls.engine.config.keys import DISTRIBUTIONS, PLAN, PLAN_DISTRIBUTIONS, PLAN_DTYPES
from gpuemu_ls.engine.config.load import load_config
from gpuemu_ls.engine.errors import ConfigError
from gpuemu_ls.engine.report.lines import replay_command
from gpuemu_ls.engine.report.results import hash_seeds

ROOT = Path(__file__).resolve().parents[2]
PLAN1 = json.loads((Path(__file__).parent / "data" / "plan1_cases.json").read_text())


def _cases_hash(op, plan: int) -> str:
    d = [derive_case(op, s, plan=plan).to_dict() for s in range(400)]
    for x in d:
        x.pop("plan")
    return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()


@pytest.mark.parametrize("ws", ["examples/quickstart", "examples/buggy", "examples/families"])
def test_plan_1_draws_what_the_previous_release_drew(ws: str) -> None:
    cfg = load_config(ROOT / ws)
    for op in cfg.ops:
        assert _cases_hash(op, 1) == PLAN1[f"{ws}:{op.name}"], op.name


def test_plan_2_adds_peaked_to_the_default_set_and_plan_3_the_half_precision_dtypes() -> None:
    assert PLAN == 3 and "peaked" in DISTRIBUTIONS and "peaked" not in PLAN_DISTRIBUTIONS[1]
    assert PLAN_DISTRIBUTIONS[3] == PLAN_DISTRIBUTIONS[2] == DISTRIBUTIONS == (*PLAN_DISTRIBUTIONS[1], "peaked")
    assert PLAN_DTYPES[1] == PLAN_DTYPES[2] == ("float32",)
    assert PLAN_DTYPES[3] == ("float32", "float16", "bfloat16")


def _op(tmp_path: Path, validation: dict | None = None, **keys: object):
    toml = project_toml(validation={"dtypes": ["float32"]} if validation is None else validation) + op_toml(
        "o",
        module="ops:op",
        reference="ops:ref",
        inputs={"x": ["B", "N"]},
        dims={"B": (1, 8, 4), "N": (1, 64, 16)},
        **keys,
    )
    return load_op(tmp_path, toml, "o", {"ops.py": identity_py("x")})


def two_of(op, seed: int) -> CaseSpec:
    return derive_case(op, seed, plan=2)


def test_a_default_set_op_draws_peaked_under_plan_2_and_an_op_with_its_own_list_is_the_same_under_every_plan(
    tmp_path,
) -> None:
    op = _op(tmp_path)
    two = [derive_case(op, s, plan=2) for s in range(len(DISTRIBUTIONS))]
    assert sorted(c.distribution for c in two) == sorted(DISTRIBUTIONS)  # one window: each once, peaked too
    assert {c.plan for c in two} == {2}
    assert all(derive_case(op, s, plan=1).distribution != "peaked" for s in range(200))
    assert all(derive_case(op, s, plan=1).plan == 1 for s in range(60))
    # plan 3 changes only the dtypes of ops that list none: this op's cases are plan 2's
    assert all(_without_plan(derive_case(op, s)) == _without_plan(two_of(op, s)) for s in range(60))
    listed = _op(tmp_path / "listed", distributions=["normal", "peaked", "boundary"])
    for s in range(60):
        a, b = derive_case(listed, s, plan=1), derive_case(listed, s)
        assert a == b and a.plan == 0


def _without_plan(spec: CaseSpec) -> dict:
    d = spec.to_dict()
    d.pop("plan")
    return d


def test_an_op_that_lists_no_dtypes_draws_the_three_float_dtypes_under_plan_3_only(tmp_path) -> None:
    default = _op(tmp_path / "default", validation={})
    listed = _op(tmp_path / "listed")  # [validation] dtypes = ["float32"]
    own = _op(tmp_path / "own", validation={}, dtypes=["float32", "float16"])
    assert default.dtypes == PLAN_DTYPES[3] and default.default_dtypes and default.plan_bound
    assert not listed.default_dtypes and not own.default_dtypes
    three = [derive_case(default, s) for s in range(90)]
    assert {c.dtype for c in three} == set(PLAN_DTYPES[3]) and {c.plan for c in three} == {3}
    for s in range(90):
        # earlier plans: float32 only, the very case a float32 op drew then (stored seeds keep their meaning)
        for plan in (1, 2):
            old = derive_case(default, s, plan=plan)
            assert old.plan == plan and old == derive_case(listed, s, plan=plan), (s, plan)
        # only the dtype window changed: everything but the dtype is what plan 2 drew
        new, old = _without_plan(three[s]), _without_plan(derive_case(default, s, plan=2))
        assert {k: v for k, v in new.items() if k != "dtype"} == {k: v for k, v in old.items() if k != "dtype"}
    assert {derive_case(own, s).dtype for s in range(40)} == {"float32", "float16"}
    # its own dtypes (and the default distributions, equal under plans 2 and 3): the same case
    assert all(_without_plan(derive_case(own, s, plan=2)) == _without_plan(derive_case(own, s)) for s in range(40))


def test_pins_keep_their_plan_and_tables_pin_a_later_one(tmp_path) -> None:
    op = _op(tmp_path, seeds=[5, {"seed": 6, "plan": 2}])
    pinned = list(iter_seeds(op, 100, 0))
    assert [(c.seed, c.plan) for c in pinned] == [(5, 1), (6, 2)]
    assert pinned[0] == derive_case(op, 5, plan=1) and pinned[1] == derive_case(op, 6, plan=2)


@pytest.mark.parametrize(
    ("pin", "says"),
    [
        ({"seed": 6, "plan": 4}, "must be one of [1, 2, 3]"),
        ({"plan": 2}, "needs a seed"),
        ({"seed": 6, "plans": 2}, "unknown key 'plans'"),
        ({"seed": -1}, "must be in 0.."),
        ({"seed": 6, "plan": "2"}, "must be an integer"),
    ],
)
def test_a_malformed_pin_is_a_config_error(tmp_path, pin: dict, says: str) -> None:
    with pytest.raises(ConfigError) as err:
        _op(tmp_path, seeds=[pin])
    assert says in str(err.value), str(err.value)


def test_the_pin_edit_writes_a_table_for_a_later_plan_and_a_bare_integer_otherwise(tmp_path) -> None:
    text = project_toml() + op_toml("o", module="ops:op", reference="ops:ref")
    once = pin_seed(text, 0, "o", 17)
    twice = pin_seed(once, 0, "o", 18, 2)
    assert "seeds = [17, {seed = 18, plan = 2}]" in twice.replace(" }", "}").replace("{ ", "{"), twice
    assert pin_seed(twice, 0, "o", 18, 2) == twice  # already pinned
    first = pin_seed(text, 0, "o", 19, 2)  # the op's first pin a table (tomlkit.array() parses strings only)
    assert tomllib.loads(first)["ops"][0]["seeds"] == [{"seed": 19, "plan": 2}], first


def test_replay_commands_say_the_plan_only_when_it_is_not_what_a_bare_seed_means() -> None:
    assert replay_command("o", 7, plan=PLAN) == "gpuemu reproduce --op o --seed 7"
    assert replay_command("o", 7, plan=0) == "gpuemu reproduce --op o --seed 7"
    assert replay_command("o", 7, plan=1) == "gpuemu reproduce --op o --seed 7 --plan 1"


def test_seed_hashes_of_plan_1_keep_their_value_and_plan_2_differs() -> None:
    old = hashlib.sha256(b"1,2,3").hexdigest()[:16]  # the formula baselines were written with
    assert hash_seeds([3, 1, 2]) == old == hash_seeds([1, 2, 3], 1)
    assert hash_seeds([1, 2, 3], 2) != old


def test_a_case_stored_before_plan_versions_reads_as_plan_1() -> None:
    d = {"op": "o", "seed": 1, "strategy": "default", "dtype": "float32", "layout": "contiguous"}
    d |= {"distribution": "normal", "dims": {"N": 2}, "shapes": {"x": [2]}}
    assert CaseSpec.from_dict(d).plan == 1


def test_peaked_rows_have_one_dominant_value(tmp_path) -> None:
    op = _op(tmp_path, distributions=["peaked"])
    relative: set[float] = set()  # where in its row the dominant value sits
    for seed in range(20):
        spec = derive_case(op, seed)
        x = np.asarray(generate_inputs(op, spec).logical["x"], dtype=np.float64)
        rows = x.reshape(-1, x.shape[-1])
        if rows.shape[-1] < 2:
            continue
        z = np.exp(rows - rows.max(axis=1, keepdims=True))
        p = z / z.sum(axis=1, keepdims=True)
        assert np.all(p.max(axis=1) > 1 - 1e-4), (seed, p.max(axis=1).min())
        relative |= {round(i / (rows.shape[-1] - 1), 2) for i in np.argmax(rows, axis=1).tolist()}
    # a random position: not always the first or the last element (tail_max covers the last)
    assert len(relative) >= 5 and relative - {0.0, 1.0}, sorted(relative)


OPS_BUG = """
import numpy as np


def op(x):
    return (np.asarray(x, dtype=np.float64) * 2 + 1).astype(x.dtype)


def ref(x):
    return np.asarray(x, dtype=np.float64) * 2
"""


def test_a_stored_case_replays_under_its_own_plan_from_the_cli(tmp_path) -> None:
    """A case stored under another plan than the current one (here plan 1, as the release before plan 2
    stored it) replays as the case it stored, with and without its snapshot, and --plan regenerates either."""
    toml = project_toml(validation={"dtypes": ["float32"], "iterations": 19}) + op_toml(
        "o", module="ops:op", reference="ops:ref", inputs={"x": ["B", "N"]}, dims={"B": (1, 8, 4), "N": (1, 64, 16)}
    )
    root = write_ws(tmp_path, toml, {"ops.py": OPS_BUG})
    cli = [sys.executable, "-m", "gpuemu_ls.cli", "-C", str(root)]
    subprocess.run([*cli, "test"], capture_output=True, text=True, timeout=300)
    op = load_config(root).op("o")
    # a seed whose plan-1 and plan-2 cases differ in distribution
    seed = next(s for s in range(19) if derive_case(op, s, plan=1).distribution != derive_case(op, s).distribution)
    old = derive_case(op, seed, plan=1)
    db = sqlite3.connect(root / ".gpuemu" / "gpuemu.db")
    rows = db.execute("SELECT id, detail FROM cases WHERE op = 'o' AND seed = ?", (seed,)).fetchall()
    assert rows, "the failing case is stored"
    for rid, detail in rows:  # stored under plan 1, without its snapshot
        d = json.loads(detail)
        d["spec"] = old.to_dict()
        db.execute(
            "UPDATE cases SET detail = ?, snapshot_id = NULL, distribution = ? WHERE id = ?",
            (json.dumps(d), old.distribution, rid),
        )
    db.commit()
    db.close()
    for extra, dist in (
        ([], old.distribution),
        (["--regenerate"], old.distribution),
        (["--plan", "2"], derive_case(op, seed).distribution),
    ):
        out = subprocess.run(
            [*cli, "reproduce", "--op", "o", "--seed", str(seed), "--no-repro", "--format", "json", *extra],
            capture_output=True,
            text=True,
            timeout=300,
        )
        doc = json.loads(out.stdout)
        got = json.dumps(doc)
        assert f'"distribution": "{dist}"' in got, (extra, dist, got[:600])
    # its failure line names the plan it needs
    failures = subprocess.run([*cli, "failures", "--op", "o"], capture_output=True, text=True, timeout=120).stdout
    assert f"--seed {seed} --plan 1" in failures, failures
