"""`gpuemu-ls --check PATH` and `gpuemu ci` are one implementation (issue 4, CI half): the same results
document on the same workspace and flags, the same exit codes (0 green, 1 red, 2 configuration error
naming file:line:col); and the gate carries the same diagnosis per op as `gpuemu test`."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from gatekit import VENV_BIN, check, copy_example, env, gpuemu, jdoc, normalized, out, write_files

FLAGS = ("--quick", "--iterations", "8", "-j", "2")


def _build(root: Path) -> None:
    for name, rc in (("quickstart", 0), ("buggy", 1)):
        ws = copy_example(name, root / name)
        elsewhere = root / f"{name}-cwd"
        elsewhere.mkdir()
        runs = {
            "ci": gpuemu("ci", *FLAGS, "--format", "json", cwd=ws),
            "check": check(str(ws), *FLAGS, "--format", "json", cwd=elsewhere),
        }
        if name == "buggy":
            runs["test"] = gpuemu("test", *FLAGS, "--format", "json", cwd=ws)
        for face, proc in runs.items():
            assert proc.returncode == rc, f"{name} {face}: {out(proc)}"
            (root / f"{name}.{face}.json").write_text(proc.stdout, encoding="utf-8")


@pytest.fixture(scope="module")
def runs(shared) -> Path:
    return shared("equivalence", _build)


def _doc(root: Path, name: str, face: str) -> dict:
    return json.loads((root / f"{name}.{face}.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("name", ["quickstart", "buggy"])
def test_check_and_ci_produce_the_same_document(runs: Path, name: str) -> None:
    ci, chk = _doc(runs, name, "ci"), _doc(runs, name, "check")
    assert ci["run_id"] and chk["run_id"] and ci["run_id"] != chk["run_id"]  # two real, stored runs
    assert normalized(ci) == normalized(chk)
    assert ci["exit_code"] == chk["exit_code"] == (0 if name == "quickstart" else 1)
    assert ci["mode"] == "quick" and ci["summary"]["ops"] == len(ci["ops"]) > 0


def test_gate_carries_the_diagnosis_of_gpuemu_test(runs: Path) -> None:
    gate = {e["name"]: e for e in _doc(runs, "buggy", "ci")["ops"]}
    test = {e["name"]: e for e in _doc(runs, "buggy", "test")["ops"]}
    assert gate.keys() == test.keys()
    failing = [n for n, e in test.items() if e["status"] == "failed"]
    assert len(failing) >= 6
    for name, e in test.items():
        assert gate[name]["status"] == e["status"], name
        assert gate[name]["diagnosis"] == e["diagnosis"], name
        assert bool(e["diagnosis"]) == (e["status"] == "failed"), (name, e["diagnosis"])


def test_the_installed_gpuemu_ls_script_is_the_same_gate(runs: Path, tmp_path: Path) -> None:
    ws = copy_example("quickstart", tmp_path / "qs")
    proc = subprocess.run(
        [str(VENV_BIN / "gpuemu-ls"), "--check", str(ws), *FLAGS, "--format", "json"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env=env(),
        cwd=tmp_path,
    )
    assert proc.returncode == 0, out(proc)
    assert normalized(jdoc(proc)) == normalized(_doc(runs, "quickstart", "ci")) | {"workspace": str(ws.resolve())}


BROKEN = """[project]
name = "broken"

[validation]
dtypes = ["float32"]
seed = "zero"
"""


def test_configuration_errors_exit_2_naming_file_line_and_column(tmp_path: Path) -> None:
    ws = write_files(tmp_path / "broken", {"gpuemu.toml": BROKEN})
    faces = {
        "ci": gpuemu("ci", "--quick", cwd=ws),
        "check": check(str(ws), "--quick", cwd=tmp_path),
        "check-cwd": check("--quick", cwd=ws),
    }
    for face, proc in faces.items():
        assert proc.returncode == 2, f"{face}: {out(proc)}"
        assert f"{ws / 'gpuemu.toml'}:6:8: error: validation.seed must be an integer" in proc.stderr, face
        assert not (ws / ".gpuemu" / "gpuemu.db").exists()
    syntax = write_files(tmp_path / "syntax", {"gpuemu.toml": '[project]\nname = "open\n'})
    proc = check(str(syntax), cwd=tmp_path)
    assert proc.returncode == 2 and f"{syntax / 'gpuemu.toml'}:2:" in proc.stderr, out(proc)
    missing = check(str(tmp_path / "nowhere"), cwd=tmp_path)
    assert missing.returncode == 2 and "gpuemu.toml" in missing.stderr, out(missing)
