"""The bundled workspaces, through the real CLI: every bug caught with default settings, every twin passes,
and each failing op's diagnosis names its bug class."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from kit.cli import check, gpuemu
from kit.workspace import copy_example

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"

#: op -> words its diagnosis line must contain (the bug class, stated from evidence)
BUGGY = {
    "softmax_tail_mask": ["N % 128 != 0", "last block is partial", "tail mask"],
    "matmul_acc_overwrite": ["K > 32", "accumulator overwritten"],
    "softmax_online_rescale": ["N > ", "not rescaled"],
    "attention_missing_scale": ["S > 1"],
    "rowscale_strides": ["layout != contiguous", "strides ignored"],
    "softmax_no_max": ["large", "no max-subtraction"],
    # long rows or large same-sign values: a disjunction, which no single condition states; what the cases
    # support is said instead (nothing simple, or a necessary size bound that short rows never fail)
    "rmsnorm_fp16_acc": [("no simple condition found", "fails only if N > ")],
    "masked_softmax_nan": ["fails iff distribution == masked_rows", "entirely -inf"],
    "variance_empty_split": ["fails iff N == 1", "empty partition"],
}
#: every condition above is confirmed by targeted cases, never guessed from the run alone
CONFIRMED = "confirmation case(s) agree"
#: op -> what its quick diagnosis must state (any one of them): the true condition, which 16 cases may only
#: show as necessary ("fails only if ...: the bug hides on some inputs"), never a condition that is not it
QUICK = {
    "softmax_tail_mask": ("N % 128 != 0",),
    "matmul_acc_overwrite": ("K > 32",),
    # the running max is lost from the second block of 64 on, but only a later block that raises the max shows
    # it (rarely just past 64): a necessary bound up to the next block's size is what 16 cases can support
    "softmax_online_rescale": tuple(f"{w} N > {t}" for w in ("only if", "iff") for t in (64, 65, 96, 127, 128)),
    "attention_missing_scale": ("S > 1",),
    "rowscale_strides": ("layout != contiguous",),
    "softmax_no_max": ("large", "max |input| >="),
    # long rows or large values: a necessary bound on either, or nothing simple (never a wrong sufficient one)
    "rmsnorm_fp16_acc": ("fails only if N > ", "fails only if max |input| >= ", "no simple condition found"),
    "masked_softmax_nan": ("iff an input row is wholly -inf", "iff distribution == masked_rows"),
    "variance_empty_split": ("N == 1",),
}


@pytest.fixture(scope="module")
def buggy(tmp_path_factory: pytest.TempPathFactory) -> dict:
    ws = tmp_path_factory.mktemp("buggy") / "buggy"
    copy_example("buggy", ws)
    proc = gpuemu("test", "-j", "2", "--format", "json", cwd=ws)
    assert proc.returncode == 1, proc.stderr
    doc = json.loads(proc.stdout)
    return {"ws": ws, "doc": doc, "ops": {e["name"]: e for e in doc["ops"]}}


def test_every_bug_class_has_a_buggy_op_and_a_twin(buggy: dict) -> None:
    names = set(buggy["ops"])
    for op in BUGGY:
        assert op in names and f"{op}_ok" in names


@pytest.mark.parametrize("op", sorted(BUGGY))
def test_bug_is_caught_and_twin_passes(buggy: dict, op: str) -> None:
    bad, twin = buggy["ops"][op], buggy["ops"][f"{op}_ok"]
    assert bad["status"] == "failed", bad["message"]
    assert bad["failed"] > 0 and bad["errors"] == 0
    assert any(f["tier"] == "bug" for f in bad["failures"]), bad["failures"][:2]  # a bug, not only edge findings
    # a correct twin passes: edge findings (overflow at the dtype's top, which every kernel has) never fail it
    assert twin["status"] in ("passed", "edge") and twin["failed"] == 0, (twin["message"], twin["failures"][:2])
    assert twin["cases"] == bad["cases"] > 0


@pytest.mark.parametrize("seed", [1000, 9000])
def test_quick_mode_catches_every_bug_too(tmp_path: Path, seed: int) -> None:
    """What the editor runs on save and a pull request's gate: 16 float32 cases of default and boundary
    shapes still catch every bug (size-1 and largest dims included) and pass every twin, whatever the seed,
    and each diagnosis states the true condition (or a necessary part of it), confirmed."""
    ws = tmp_path / "buggy"
    copy_example("buggy", ws)
    proc = gpuemu("test", "--quick", "--seed", str(seed), "--format", "json", cwd=ws)
    assert proc.returncode == 1, proc.stderr
    ops = {e["name"]: e for e in json.loads(proc.stdout)["ops"]}
    status = {name: e["status"] for name, e in ops.items()}
    assert {op: status[op] for op in BUGGY} == dict.fromkeys(BUGGY, "failed")
    assert {f"{op}_ok" for op in BUGGY if status[f"{op}_ok"] not in ("passed", "edge")} == set()
    wrong = [
        f"{op}: {ops[op]['diagnosis']}"
        for op, stated in QUICK.items()
        if not any(s in ops[op]["diagnosis"] for s in stated) or CONFIRMED not in ops[op]["diagnosis"]
    ]
    assert not wrong, "quick diagnoses that miss the true condition:\n" + "\n".join(wrong)


@pytest.mark.parametrize("op", sorted(BUGGY))
def test_diagnosis_names_the_bug_class(buggy: dict, op: str) -> None:
    diagnosis = buggy["ops"][op]["diagnosis"]
    for words in [*BUGGY[op], CONFIRMED]:  # a tuple: any one of them
        assert any(w in diagnosis for w in words) if isinstance(words, tuple) else words in diagnosis, diagnosis


def test_failure_lines_carry_everything_to_act_on(buggy: dict) -> None:
    proc = gpuemu("failures", "--op", "matmul_acc_overwrite", cwd=buggy["ws"])
    assert proc.returncode == 0
    line = proc.stdout.splitlines()[0]
    for part in (
        "FAIL matmul_acc_overwrite",
        "[mismatch",
        "seed=",
        "dtype=",
        "a=[",
        "b=[",
        "layout=",
        "dist=",
        "max abs err",
        "atol=",
    ):
        assert part in line, line
    assert "replay: gpuemu reproduce --op matmul_acc_overwrite --seed" in proc.stdout


def test_replay_reproduces_and_standalone_repro_runs_without_gpuemu(buggy: dict) -> None:
    failure = buggy["ops"]["softmax_tail_mask"]["failures"][0]
    proc = gpuemu(*failure["replay"].split()[1:], cwd=buggy["ws"])
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "stored snapshot" in proc.stdout and "FAILED" in proc.stdout
    repro = buggy["ws"] / ".gpuemu" / "repro" / f"softmax_tail_mask_{failure['seed']}.py"
    assert repro.is_file()
    assert str(buggy["ws"]) not in repro.read_text()  # no absolute user paths
    # run it with python -I (isolated: no site-packages path tricks, no gpuemu on sys.path)
    out = subprocess.run([sys.executable, "-I", str(repro)], capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 1 and "FAILED: " in out.stdout, out.stdout + out.stderr


def test_quickstart_passes_through_the_gate(tmp_path: Path) -> None:
    ws = tmp_path / "quickstart"
    copy_example("quickstart", ws)
    proc = check(str(ws), "--format", "json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    doc = json.loads(proc.stdout)
    assert doc["status"] in ("passed", "edge") and doc["summary"]["ops"] >= 4
    assert doc["summary"]["failed"] == doc["summary"]["error"] == doc["summary"]["not_judged"] == 0
    styles = {(e["source"] or {}).get("file", "").endswith(".py") for e in doc["ops"]}
    assert styles == {True}


def test_the_shared_reference_script_is_the_same_in_every_workspace() -> None:
    """Each example workspace stands alone (a user copies one folder), so the softmax reference script is in
    two of them: one script, kept identical, so a fix to one is never missing from the other."""
    copies = sorted(EXAMPLES.glob("*/refs/softmax_ref.py"))
    assert len(copies) >= 2, copies
    texts = {p.relative_to(EXAMPLES).as_posix(): p.read_text(encoding="utf-8") for p in copies}
    assert len(set(texts.values())) == 1, f"the copies differ: {sorted(texts)}"
