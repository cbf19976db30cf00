"""``gpuemu attest`` and ``gpuemu verify`` through the real CLI, and ``verify --replay`` against a real git
repository: a passing and a failing run confirmed, and a kernel changed at the recorded commit contradicted."""

from __future__ import annotations

import json
import os
import platform
import subprocess
from collections.abc import Callable
from pathlib import Path

import numpy
import pytest
from kit.attest import sign, stored_report, write_keypair
from kit.cli import gpuemu, out
from kit.ops import op_toml
from kit.workspace import write_files

HEADER = '[project]\nname = "replayed"\n\n[validation]\ndtypes = ["float32"]\niterations = 3\n'
DIMS = {"B": (1, 4, 2), "N": (1, 16, 8)}
OPS_PY = (
    "import numpy as np\n\n\ndef good(x):\n    return np.array(x, copy=True)\n\n\n"
    "def bad(x):\n    return (x * 3).astype(x.dtype)\n\n\ndef ref(x):\n    return x\n"
)
#: the same file with good's kernel broken: what the recorded commit is rewritten to hold
OPS_BROKEN = OPS_PY.replace("return np.array(x, copy=True)", "return (x + 1).astype(x.dtype)")


def _git(repo: Path, *args: str, stdin: str | None = None, index: Path | None = None) -> str:
    """``git ARGS`` in ``repo`` (its output), with its own ``index`` file when given."""
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t"}
    env["GIT_COMMITTER_EMAIL"] = "t@t"
    if index is not None:
        env["GIT_INDEX_FILE"] = str(index)
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, input=stdin, env=env)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.fixture(scope="module")
def signed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A git repository with a passing workspace (op good) and a mixed one (good and bad), committed, run once
    each, their reports signed outside the repository with a key outside it."""
    base = tmp_path_factory.mktemp("replay")
    repo = base / "repo"
    mixed = op_toml("good", module="ops:good", reference="ops:ref", dims=DIMS) + op_toml(
        "bad", module="ops:bad", reference="ops:ref", dims=DIMS
    )
    write_files(
        repo,
        {
            ".gitignore": ".gpuemu/\n__pycache__/\n",
            "pass/gpuemu.toml": HEADER + op_toml("good", module="ops:good", reference="ops:ref", dims=DIMS),
            "pass/ops.py": OPS_PY,
            "mixed/gpuemu.toml": HEADER + mixed,
            "mixed/ops.py": OPS_PY,
        },
    )
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "commit", "-qm", "ops")
    private, public = write_keypair(base / "keys")
    paths = {"repo": repo, "key": private, "pub": public}
    for name, code in (("pass", 0), ("mixed", 1)):
        done = gpuemu("test", "--no-progress", cwd=repo / name)
        assert done.returncode == code, out(done)
        # the passing run's page is the real HTML report (the same renderer as `gpuemu report --format html`)
        paths[name] = sign(stored_report(repo / name, base / f"out-{name}", html=name == "pass"), private)
    return paths


def test_verify_round_trip_names_signer_commit_and_config(signed: dict[str, Path]) -> None:
    """The passing run's real HTML page and JSON, signed, verified by `gpuemu verify`."""
    html = (signed["pass"].parent / "R.html").read_text(encoding="utf-8")
    assert html.lstrip().lower().startswith("<!doctype html>") and "stand-in" not in html
    done = gpuemu("verify", str(signed["pass"]), "--key", str(signed["pub"]), cwd=signed["repo"] / "pass")
    assert done.returncode == 0, out(done)
    commit = _git(signed["repo"], "rev-parse", "HEAD")
    assert done.stdout.startswith("VERIFIED"), out(done)
    assert f"commit: {commit} (clean tree)" in done.stdout
    assert "config: matches" in done.stdout and "signer's claim" in done.stdout


@pytest.mark.parametrize("name", ["pass", "mixed"])
def test_replay_confirms_a_passing_and_a_failing_run(name: str, signed: dict[str, Path]) -> None:
    done = gpuemu("verify", str(signed[name]), "--key", str(signed["pub"]), "--replay", "--yes",
                  cwd=signed["repo"] / name)  # fmt: skip
    assert done.returncode == 0, out(done)
    assert "op good: 3 confirmed, 0 contradicted, 0 not reproducible here" in done.stdout, out(done)
    assert "note: the commit was recorded when the report was built from the store" in done.stdout
    if name == "mixed":
        assert "op bad: 3 confirmed, 0 contradicted" in done.stdout, out(done)
    assert _git(signed["repo"], "worktree", "list").count("\n") == 0  # the checkout is gone


def test_replay_asks_before_running_code(signed: dict[str, Path]) -> None:
    done = gpuemu("verify", str(signed["pass"]), "--key", str(signed["pub"]), "--replay", cwd=signed["repo"] / "pass")
    assert done.returncode == 2, out(done)
    assert "pass --yes" in done.stderr and "confirmed" not in done.stdout


def _amended(signed: dict[str, Path], folder: Path, edit: Callable[[dict], None] = lambda prov: None) -> str:
    """The passing run's report in ``folder``, re-signed naming a commit whose op good is broken (the recorded
    commit amended: same parents and message, another ops.py) and with its provenance changed by ``edit``."""
    repo = signed["repo"]
    blob = _git(repo, "hash-object", "-w", "--stdin", stdin=OPS_BROKEN)
    index = folder.parent / "index"  # the commit is built beside the checkout: the repository's files stay as they are
    _git(repo, "read-tree", "HEAD", index=index)
    _git(repo, "update-index", "--cacheinfo", f"100644,{blob},pass/ops.py", index=index)
    amended = _git(repo, "commit-tree", _git(repo, "write-tree", index=index), "-m", "ops")
    assert amended != _git(repo, "rev-parse", "HEAD")
    folder.mkdir()
    source = signed["pass"].parent
    for name in ("R.html", "R.json"):
        (folder / name).write_bytes((source / name).read_bytes())
    doc = json.loads((folder / "R.json").read_text(encoding="utf-8"))
    doc["provenance"]["git"]["commit"] = amended
    edit(doc["provenance"])
    (folder / "R.json").write_text(json.dumps(doc), encoding="utf-8")
    sign([folder / "R.html", folder / "R.json"], signed["key"])
    return amended


def _replay(signed: dict[str, Path], folder: Path) -> subprocess.CompletedProcess[str]:
    return gpuemu("verify", str(folder / "R.json"), "--key", str(signed["pub"]), "--replay", "--yes",
                  cwd=signed["repo"] / "pass")  # fmt: skip


def test_a_kernel_changed_at_the_recorded_commit_is_contradicted(signed: dict[str, Path], tmp_path: Path) -> None:
    """Replayed with the recorded Python and library versions, that commit's broken op good contradicts every
    verdict of good."""
    amended = _amended(signed, tmp_path / "report")
    done = _replay(signed, tmp_path / "report")
    assert done.returncode == 1, out(done)
    assert f"replay: commit {amended}" in done.stdout
    assert "op good: 0 confirmed, 3 contradicted" in done.stdout, out(done)
    assert "CONTRADICTED seed 0: recorded passed, replayed failed" in done.stdout, out(done)
    assert f"note: Python, libraries and platform as recorded: Python {platform.python_version()}, " in done.stdout


def test_other_library_versions_make_a_difference_not_reproducible_here(
    signed: dict[str, Path], tmp_path: Path
) -> None:
    """The same broken commit, recorded with another numpy: the difference may be numpy's, not the kernel's."""

    def older_numpy(prov: dict) -> None:
        prov["libraries"]["numpy"] = "1.0.0"

    _amended(signed, tmp_path / "report", older_numpy)
    done = _replay(signed, tmp_path / "report")
    assert done.returncode == 1, out(done)  # nothing confirmed: the replay proves nothing here
    differ = f"library versions differ: numpy 1.0.0 recorded, {numpy.__version__} here"
    assert "op good: 0 confirmed, 0 contradicted, 3 not reproducible here" in done.stdout, out(done)
    assert f"NOT REPRODUCIBLE HERE seed 0: recorded passed, replayed failed: {differ}; " in done.stdout, out(done)
