"""How `verify --replay` reads a report's recorded cases and judges each replayed one: the rules on their own
(the CLI suite replays real runs from a real git repository)."""

from __future__ import annotations

from typing import Any

import pytest

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
