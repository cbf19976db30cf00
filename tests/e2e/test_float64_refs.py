"""examples/float64_refs through the real CLI: correct kernels judged against references written the way
people write them (everything converted to float64 first) pass, and their buggy twins fail as bugs.

The workspace's references never compute in the dtype they are given: numpy functions that call
``x.astype(np.float64)`` first, torch references (``framework = "pytorch"`` ops) that call ``.double()``,
and protocol scripts that decode every input to float64 whatever the request's dtype says. The oracle's
working-precision evaluation of such a reference is a float64 one, so it cannot tell an overflow every
float32 kernel has from a bug; the tier rule does (a failing case re-run with every ``|x| >= T`` replaced by
+-1). With default settings, for several seeds and in quick mode:

- every correct op is ``passed`` or ``edge`` (a failure past the overflow threshold is an edge finding),
  never ``failed``, ``error`` or ``not_judged``;
- every ``_bug_`` twin is ``failed`` with at least one failure of tier ``bug`` and a diagnosis (in quick
  mode: the twins whose bug can show in float32, per ``expected.toml``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from kit.cli import env, gpuemu
from kit.verdicts import explain, judged_wrongly
from kit.workspace import copy_example

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

ROOT = Path(__file__).resolve().parents[2]
WORKSPACE = ROOT / "examples" / "float64_refs"
SEEDS = (0, 1000, 2000)


def _load(name: str) -> dict[str, Any]:
    with open(WORKSPACE / name, "rb") as f:
        return tomllib.load(f)


CONFIG = _load("gpuemu.toml")
OPS = [op["name"] for op in CONFIG["ops"]]
CORRECT = [n for n in OPS if "_bug_" not in n]
BUGGY = [n for n in OPS if "_bug_" in n]
EXPECTED = _load("expected.toml")


def _run(tmp: Path, *args: str) -> dict[str, dict[str, Any]]:
    """`gpuemu test --format json` on a fresh copy of the workspace; the JSON report's ops by name."""
    ws = copy_example("float64_refs", tmp / "float64_refs")
    environ = env(GPUEMU_USER_CONFIG=str(tmp / "no-user-config.toml"))  # no user defaults leak in
    proc = gpuemu("test", "-j", "2", "--format", "json", *args, cwd=ws, timeout=600, environ=environ)
    # the twins fail, so the run does: exit 1, never a usage or configuration error
    assert proc.returncode == 1, f"exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    doc = json.loads(proc.stdout)
    ops = {e["name"]: e for e in doc["ops"]}
    assert set(ops) == set(OPS), f"ops reported {sorted(ops)} != ops configured {sorted(OPS)}"
    return ops


def _misjudged(ops: dict[str, dict[str, Any]], correct: list[str], buggy: list[str]) -> list[str]:
    """An explanation for each correct op that is not passed/edge and each twin not failed as a diagnosed bug."""
    bad = []
    for op in correct:
        e = ops[op]
        if judged_wrongly(e, buggy=False):
            bad.append("CORRECT KERNEL NOT PASSED - " + explain(e))
        elif any(f.get("tier") == "bug" for f in e.get("failures", [])):
            bad.append("CORRECT KERNEL WITH A BUG-TIER FAILURE - " + explain(e))
    for op in buggy:
        e = ops[op]
        if judged_wrongly(e, buggy=True) or not e.get("diagnosis"):
            bad.append(f"BUG NOT CAUGHT (shows when {EXPECTED[op]['condition']}) - " + explain(e))
    return bad


def test_every_twin_has_a_correct_kernel_and_an_expected_condition() -> None:
    assert CORRECT and BUGGY
    for bug in BUGGY:
        assert bug.split("_bug_")[0] in CORRECT, f"{bug}: no correct op {bug.split('_bug_')[0]!r}"
    assert set(EXPECTED) == set(BUGGY), "expected.toml must list exactly the _bug_ ops of gpuemu.toml"
    for bug, exp in EXPECTED.items():
        assert isinstance(exp.get("condition"), str) and exp["condition"], bug
        assert isinstance(exp.get("float32_visible"), bool), bug


def test_the_references_are_written_the_three_common_ways() -> None:
    """numpy functions converting to float64, torch references of pytorch ops, and float64 scripts: each used
    by several op families, and every one of them converts its inputs to float64 before computing."""
    styles: dict[str, set[str]] = {"numpy": set(), "torch": set(), "script": set()}
    for op in CONFIG["ops"]:
        family = op["name"].split("_bug_")[0]
        ref = op["reference"]
        if ref.endswith(".py"):
            text = (WORKSPACE / ref).read_text(encoding="utf-8")
            assert ".astype(np.float64)" in text, f"{ref}: the script should decode every input to float64"
            styles["script"].add(family)
        else:
            module, function = ref.split(":")
            text = (WORKSPACE / f"{module}.py").read_text(encoding="utf-8")
            body = text.split(f"def {function}(", 1)[1]
            if op.get("framework") == "pytorch":
                assert ".double()" in body, f"{ref}: a torch reference converts with .double()"
                styles["torch"].add(family)
            else:
                assert "np.float64" in body, f"{ref}: a numpy reference converts to np.float64 first"
                styles["numpy"].add(family)
    for style, families in styles.items():
        assert len(families) >= 3, f"{style} references are used by {sorted(families)} only"


@pytest.mark.slow
@pytest.mark.parametrize("seed", SEEDS)
def test_thorough_passes_every_correct_kernel_and_fails_every_twin(tmp_path: Path, seed: int) -> None:
    """Default settings (thorough: every dtype, layout, distribution, shape strategy), one seed per run."""
    ops = _run(tmp_path, "--seed", str(seed))
    bad = _misjudged(ops, CORRECT, BUGGY)
    assert not bad, f"{len(bad)} op(s) misjudged with --seed {seed}:\n\n" + "\n\n".join(bad)


@pytest.mark.slow
@pytest.mark.parametrize("seed", SEEDS)
def test_quick_mode_passes_correct_kernels_and_catches_float32_visible_bugs(tmp_path: Path, seed: int) -> None:
    """What the editor runs on save: every correct kernel passes, every bug that can show in float32 is caught."""
    ops = _run(tmp_path, "--quick", "--seed", str(seed))
    visible = [b for b in BUGGY if EXPECTED[b]["float32_visible"]]
    bad = _misjudged(ops, CORRECT, visible)
    assert not bad, f"{len(bad)} op(s) misjudged in quick mode:\n\n" + "\n\n".join(bad)
