"""Names and paths: what a workspace names can never make the tool write outside its folders, nor run
code from outside the workspace (issue 14, items 3 and 5).

Op names, kernel names and baseline tags become file names, so the checker admits one safe character set
and refuses names equal but for case. Every file the tool writes for itself is created without following
symlinks: a link planted at the file is replaced (its target untouched), a linked folder is refused.
Module references resolve every file and package on their import path inside the workspace.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import relkit

WRONG_PY = """import numpy as np


def wrong(x):
    return x * 3


def reference(x):
    return np.asarray(x, dtype=np.float64) * 2.0
"""

MARKING_PY = """import os

import numpy as np

open(os.path.join(os.path.dirname(os.path.realpath(__file__)), "MARK-outside-ran"), "a").close()


def double(x):
    return x * 2


def reference(x):
    return np.asarray(x, dtype=np.float64) * 2.0
"""


def _ws(root: Path, name: str, *, body: str = 'module = "kern:wrong"\nreference = "kern:reference"') -> Path:
    toml = relkit.HEADER.format(name="names", validation="", quick=2) + relkit.op_block(name, body)
    return relkit.write_ws(root, toml, {"kern.py": WRONG_PY})


def _out(proc: object) -> str:
    return proc.stdout + proc.stderr  # type: ignore[attr-defined]


# --- names --------------------------------------------------------------------------------------------
BAD_NAMES = {
    "parent": "../../../../x",
    "absolute": "/tmp/gpuemu-owned",
    "slash": "ops/x",
    "backslash": "a\\\\b",
    "newline": "a\\nb",
    "tab": "a\\tb",
    "hidden": ".bashrc",
    "dash_first": "-rf",
    "too_long": "x" * 300,
    "empty": "",
    "space": "my op",
    "non_ascii": "opé",
}


def test_unsafe_op_names_are_configuration_errors(tmp_path: Path) -> None:
    """Every member of the class is refused at its line by the checker (`gpuemu ops` loads the config)."""
    for case, name in sorted(BAD_NAMES.items()):
        relkit.record("security", cases=1)
        root = _ws(tmp_path / case, name)
        toml = root / "gpuemu.toml"
        line = [i for i, t in enumerate(toml.read_text().splitlines(), 1) if t.startswith("name = ")][-1]
        proc = relkit.run_cli(root, "ops")
        assert proc.returncode == 2, (case, _out(proc))
        assert f"{toml}:{line}:" in proc.stderr and "op name" in proc.stderr, (case, proc.stderr)
        assert relkit.no_traceback(_out(proc)), _out(proc)


def test_an_unsafe_op_name_stops_test_and_the_gate_before_anything_runs(tmp_path: Path) -> None:
    root = _ws(tmp_path / "ws", BAD_NAMES["parent"])
    for proc in (relkit.run_cli(root, "test", "--quick", "--no-progress"), relkit.run_check(root, "--quick")):
        assert proc.returncode == 2 and "op name" in proc.stderr, _out(proc)
    assert not (root / ".gpuemu" / "repro").exists()


@pytest.mark.parametrize("names", [("Double", "double"), ("SOFTMAX", "softmax"), ("kern.v2", "KERN.V2")])
def test_names_equal_but_for_case_are_duplicates(tmp_path: Path, names: tuple[str, str]) -> None:
    relkit.record("security", cases=1)
    toml = relkit.HEADER.format(name="dup", validation="", quick=2)
    for n in names:
        toml += relkit.op_block(n, 'module = "kern:wrong"\nreference = "kern:reference"')
    root = relkit.write_ws(tmp_path / "ws", toml, {"kern.py": WRONG_PY})
    proc = relkit.run_cli(root, "ops")
    assert proc.returncode == 2, _out(proc)
    assert f"duplicate op name {names[1]!r}" in proc.stderr and "but for case" in proc.stderr, proc.stderr


def test_unsafe_kernel_names_are_configuration_errors(tmp_path: Path) -> None:
    for bad in ("../k", "k\\nk", "k" * 200):
        root = _ws(tmp_path / f"ws{len(bad)}", "ok")
        (root / "k.cu").write_text("__global__ void k(float* x) { x[0] = 1.0f; }\n")
        toml = root / "gpuemu.toml"
        toml.write_text(toml.read_text() + f'\n[[kernels]]\nname = "{bad}"\nsource = "k.cu"\n')
        proc = relkit.run_cli(root, "ops")
        assert proc.returncode == 2 and "kernel name" in proc.stderr, _out(proc)


def test_unsafe_baseline_tags_are_usage_errors(tmp_path: Path) -> None:
    root = _ws(tmp_path / "ws", "op")
    for tag in ("a b", "x" * 300, "..", ".hidden", "tag;rm", "tag\u00e9", "+x"):
        for sub in ("store", "show", "diff") if tag == ".." else ("store",):
            proc = relkit.run_cli(root, "baseline", sub, tag)
            assert proc.returncode == 2 and "baseline tag" in proc.stderr, (tag, _out(proc))
            assert relkit.no_traceback(_out(proc)), _out(proc)
    assert not (root / "gpuemu-baselines").exists() or not any((root / "gpuemu-baselines").iterdir())


# --- planted symlinks -----------------------------------------------------------------------------
def _failing_seed(root: Path) -> int:
    proc = relkit.run_cli(root, "test", "--quick", "--no-progress", "--format", "json")
    assert proc.returncode == 1, _out(proc)
    doc = json.loads(proc.stdout)
    return int(doc["ops"][0]["failures"][0]["seed"])


def test_a_symlink_at_a_reproduction_file_is_replaced_not_followed(tmp_path: Path) -> None:
    relkit.record("security", cases=1)
    root = _ws(tmp_path / "ws", "op")
    seed = _failing_seed(root)
    repro = root / ".gpuemu" / "repro"
    repro.mkdir(parents=True, exist_ok=True)
    victims = {}
    for suffix in (".py", ".npz", "_min.py", "_min.npz"):
        victim = tmp_path / f"victim{suffix}"
        victim.write_text("precious\n")
        (repro / f"op_{seed}{suffix}").symlink_to(victim)
        victims[suffix] = victim
    proc = relkit.run_cli(root, "reproduce", "--op", "op", "--seed", str(seed))
    assert proc.returncode == 1, _out(proc)
    proc = relkit.run_cli(root, "minimize", "--op", "op", "--seed", str(seed))
    assert proc.returncode == 1, _out(proc)
    for suffix, victim in victims.items():
        assert victim.read_text() == "precious\n", f"{suffix}: the link's target was overwritten"
        written = repro / f"op_{seed}{suffix}"
        assert written.is_file() and not written.is_symlink(), suffix
    assert "agree" in (repro / f"op_{seed}.py").read_text() or (repro / f"op_{seed}.py").stat().st_size > 100


@pytest.mark.parametrize("link", [".gpuemu/repro", ".gpuemu"])
def test_a_symlinked_reproduction_folder_is_refused(tmp_path: Path, link: str) -> None:
    relkit.record("security", cases=1)
    root = _ws(tmp_path / "ws", "op")
    seed = _failing_seed(root)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    target = root / link
    if link == ".gpuemu":  # move the store along so the run's results stay readable through the link
        target.rename(elsewhere / ".gpuemu")
        target.symlink_to(elsewhere / ".gpuemu")
    else:
        if target.exists():
            target.rmdir()
        target.symlink_to(elsewhere)
    proc = relkit.run_cli(root, "reproduce", "--op", "op", "--seed", str(seed))
    assert proc.returncode == 2, _out(proc)
    assert "refusing to write into" in proc.stderr and "symlink" in proc.stderr, proc.stderr
    assert relkit.no_traceback(_out(proc)), _out(proc)
    # nothing of the reproduction landed behind the link (the store's own files may, through the link)
    assert not list(elsewhere.rglob("op_*")) and not (elsewhere / ".gpuemu" / "repro").exists()


def test_baselines_are_written_without_following_symlinks(tmp_path: Path) -> None:
    relkit.record("security", cases=1)
    root = _ws(tmp_path / "ws", "op")
    assert relkit.run_cli(root, "test", "--quick", "--no-progress").returncode == 1
    folder = root / "gpuemu-baselines"
    folder.mkdir()
    victim = tmp_path / "victim.json"
    victim.write_text("precious\n")
    (folder / "main.json").symlink_to(victim)
    proc = relkit.run_cli(root, "baseline", "store", "main")
    assert proc.returncode == 0, _out(proc)
    assert victim.read_text() == "precious\n"
    assert (folder / "main.json").is_file() and not (folder / "main.json").is_symlink()
    assert json.loads((folder / "main.json").read_text())["tag"] == "main"
    # a linked baselines folder is refused
    (folder / "main.json").unlink()
    folder.rmdir()
    (tmp_path / "away").mkdir()
    folder.symlink_to(tmp_path / "away")
    proc = relkit.run_cli(root, "baseline", "store", "main")
    assert proc.returncode == 2 and "refusing to write into" in proc.stderr, _out(proc)
    assert not list((tmp_path / "away").iterdir())


# --- module symlinks ------------------------------------------------------------------------------
MODULE_CASES = {
    # name -> (files under outside/, links inside the workspace: link -> target under outside/, op body)
    "module_file": ({"ext.py": MARKING_PY}, {"ext.py": "ext.py"}, 'module = "ext:double"\nreference = "ext:reference"'),
    "package_folder": (
        {"pkg/__init__.py": "", "pkg/kern.py": MARKING_PY},
        {"pkg": "pkg"},
        'module = "pkg.kern:double"\nreference = "pkg.kern:reference"',
    ),
    "file_in_package": (
        {"kern.py": MARKING_PY},
        {"pkg/kern.py": "kern.py"},
        'module = "pkg.kern:double"\nreference = "kern:reference"',
    ),
    "package_init": (
        {"init.py": MARKING_PY},
        {"pkg/__init__.py": "init.py"},
        'module = "pkg.kern:double"\nreference = "kern:reference"',
    ),
    "reference_module": (
        {"ext.py": MARKING_PY},
        {"ext.py": "ext.py"},
        'module = "kern:double"\nreference = "ext:reference"',
    ),
}


@pytest.mark.parametrize("case", sorted(MODULE_CASES))
def test_symlinked_modules_are_refused_without_allow_external_paths(tmp_path: Path, case: str) -> None:
    relkit.record("security", cases=1)
    outside_files, links, body = MODULE_CASES[case]
    outside = tmp_path / "outside"
    for rel, text in outside_files.items():
        (outside / rel).parent.mkdir(parents=True, exist_ok=True)
        (outside / rel).write_text(text)
    toml = relkit.HEADER.format(name="mods", validation="", quick=2) + relkit.op_block("op", body)
    files = {"kern.py": relkit.GOOD_PY}
    if case in ("file_in_package", "package_init"):
        files["pkg/kern.py" if case == "package_init" else "pkg/__init__.py"] = relkit.GOOD_PY
    root = relkit.write_ws(tmp_path / "ws", toml, files)
    for link, target in links.items():
        (root / link).parent.mkdir(parents=True, exist_ok=True)
        (root / link).symlink_to(outside / target)
    cfg = root / "gpuemu.toml"
    for proc in (relkit.run_cli(root, "test", "--quick", "--no-progress"), relkit.run_check(root, "--quick")):
        assert proc.returncode == 2, _out(proc)
        assert "resolves outside the workspace" in proc.stderr and f"{cfg}:" in proc.stderr, proc.stderr
        assert "allow_external_paths" in proc.stderr
    assert not list(outside.rglob("MARK-*")), "code outside the workspace ran"
    cfg.write_text(cfg.read_text().replace("[project]\n", "[project]\nallow_external_paths = true\n", 1))
    proc = relkit.run_cli(root, "test", "--quick", "--no-progress")
    assert proc.returncode == 0, _out(proc)
    assert list(outside.rglob("MARK-*")), "allowed, the outside module is imported"
