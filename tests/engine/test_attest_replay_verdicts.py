"""How `verify --replay` reads a report's recorded cases and judges each replayed one: the rules on their own
(the CLI suite replays real runs from a real git repository)."""

from __future__ import annotations

import platform
from typing import Any

import numpy
import pytest

from gpuemu_ls.engine.report.libraries import library_versions
from gpuemu_ls.engine.tools.attest.environment import compare
from gpuemu_ls.engine.tools.attest.replay import (
    CONFIRMED,
    CONTRADICTED,
    NOT_HERE,
    CaseVerdict,
    Replay,
    judge,
    recorded_cases,
)


def _op(name: str, runs: list[list[int]] | None, failures: list[tuple[int, str]], total: int | None = None) -> dict:
    entry: dict[str, Any] = {
        "name": name,
        "status": "failed" if failures else "passed",
        "failures": [{"seed": s, "status": st} for s, st in failures],
        "failures_total": len(failures) if total is None else total,
        "cases_run": {"count": 4, "plan": 3},
    }
    if runs is not None:
        entry["cases_run"]["seeds"] = runs
    return entry


def test_recorded_verdicts_come_from_the_seed_runs_and_the_failures() -> None:
    doc = {
        "ops": [
            _op("mixed", [[0, 2], [7, 7]], [(1, "failed"), (7, "error")]),
            _op("cut", [[0, 3]], [(2, "failed")], total=3),  # more failures than the report lists
            _op("old", None, []),
            _op("none", [], []),
        ]
    }
    plans, notes = recorded_cases(doc)
    assert plans["mixed"]["recorded"] == {0: "passed", 1: "failed", 2: "passed", 7: "error"}
    assert plans["mixed"]["plan"] == 3
    assert plans["cut"]["recorded"] == {0: None, 1: None, 2: "failed", 3: None}
    assert set(plans) == {"mixed", "cut"}
    assert any("op old: the report does not list its seeds" in n for n in notes)
    assert any("op none: no case ran" in n for n in notes)


@pytest.mark.parametrize(
    ("recorded", "replayed", "dirty", "verdict"),
    [
        ("passed", "passed", False, CONFIRMED),
        ("failed", "failed", False, CONFIRMED),
        ("error", "error", False, CONFIRMED),
        ("passed", "failed", False, CONTRADICTED),
        ("failed", "passed", False, CONTRADICTED),
        ("edge", "failed", False, CONTRADICTED),
        ("passed", "error", False, NOT_HERE),  # could not run here: a GPU-only op, a missing library
        ("passed", "failed", True, NOT_HERE),  # the recorded tree was not its commit
        (None, "failed", False, NOT_HERE),  # the report does not say what this case was
    ],
)
def test_each_replayed_case_is_judged(recorded: str | None, replayed: str, dirty: bool, verdict: str) -> None:
    got = {"seed": 5, "status": replayed, "kind": "wrong_value" if replayed != "passed" else None, "message": "x"}
    assert judge("op", 5, recorded, got, dirty).verdict == verdict


def test_a_replay_passes_only_with_a_confirmed_case_and_no_contradiction() -> None:
    ok, odd = CaseVerdict("op", 0, "passed", "passed", CONFIRMED), CaseVerdict("op", 1, "passed", None, NOT_HERE)
    bad = CaseVerdict("op", 2, "passed", "failed", CONTRADICTED)
    assert Replay("c", ".", [ok, odd]).passed
    assert not Replay("c", ".", [odd]).passed  # nothing could be replayed: nothing is confirmed
    assert not Replay("c", ".", [ok, bad]).passed


def _prov(**libraries: str | None) -> dict[str, Any]:
    """A provenance record made here, with ``libraries`` changed (None: not installed then)."""
    here = library_versions()
    recorded = {k: v for k, v in {**here, **libraries}.items() if v is not None}
    return {"machine": {"python": here["python"], "os": platform.platform(), "arch": platform.machine()},
            "libraries": recorded}  # fmt: skip


def test_a_difference_with_other_library_versions_is_not_reproducible_here() -> None:
    env = compare(_prov(numpy="1.0.0"))
    assert env.why == f"library versions differ: numpy 1.0.0 recorded, {numpy.__version__} here"
    got = {"seed": 5, "status": "failed", "kind": "wrong_value", "message": "x"}
    v = judge("op", 5, "passed", got, False, env.why)
    assert v.verdict == NOT_HERE and v.why.startswith(
        f"library versions differ: numpy 1.0.0 recorded, {numpy.__version__} here"
    )
    assert judge("op", 5, "failed", got, False, env.why).verdict == CONFIRMED  # the same verdict still confirms


def test_the_same_versions_leave_a_contradiction_standing() -> None:
    env = compare(_prov())
    assert env.differences == [] and env.why is None
    assert any(n.startswith("Python, libraries and platform as recorded") for n in env.notes())
    got = {"seed": 5, "status": "failed", "kind": "wrong_value", "message": "x"}
    assert judge("op", 5, "passed", got, False, env.why).verdict == CONTRADICTED


def test_a_library_on_one_side_only_and_another_python_are_differences() -> None:
    env = compare(_prov(python="3.9.0", cupy="13.0.0", numpy=None))
    here = library_versions()
    assert env.differences[0] == f"Python 3.9.0 recorded, {here['python']} here"
    assert "cupy 13.0.0 recorded, not installed here" in env.differences
    assert f"numpy not installed when recorded, {numpy.__version__} here" in env.differences


def test_an_old_record_has_unknown_library_versions_and_says_so() -> None:
    prov = _prov()
    del prov["libraries"]
    env = compare(prov)
    assert not env.libraries_known and env.why is None  # unknown: a difference still reads as contradicted
    assert any("records no library versions" in n for n in env.notes())
    prov["machine"]["python"] = "3.9.0"  # its Python is recorded, though
    assert compare(prov).why == f"library versions differ: Python 3.9.0 recorded, {platform.python_version()} here"


def test_another_platform_is_said_as_such() -> None:
    prov = _prov()
    prov["machine"]["os"], prov["machine"]["arch"] = "Plan9-4", "mips"
    here = f"{platform.platform().split('-')[0]} {platform.machine()}"
    assert compare(prov).why == f"the platform differs: Plan9 mips recorded, {here} here"
