"""The CI guide works as written (issue 4, CI half): the GitHub Actions and GitLab CI setups of
docs/ci.md are parsed, their jobs emulated step by step (fresh checkout per job, matrix / parallel
variables substituted, artifacts passed between jobs, `pip install` steps skipped: the package is
installed), and their gpuemu commands run unchanged on a copy of examples/quickstart (green) and of
examples/buggy (red), each with a baseline committed the way the guide says."""

from __future__ import annotations

import fnmatch
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from gatekit import ROOT, copy_example, load_toml, out, shell, swap_module

yaml = pytest.importorskip("yaml", reason="PyYAML is needed to read the CI guide's YAML (pip install pyyaml)")

GUIDE = ROOT / "docs" / "ci.md"
#: bounded thorough and quick runs for the test; the commands themselves stay exactly as documented
CI_LIMITS = "\n[ci]\nfuzz_iterations = 4\n\n[ci.quick]\niterations = 4\n"


def _guide() -> dict[str, Any]:
    text = GUIDE.read_text(encoding="utf-8")
    blocks = [yaml.safe_load(b) for b in re.findall(r"```yaml\n(.*?)```", text, re.S)]
    github = next(b for b in blocks if "jobs" in b)
    gitlab = next(b for b in blocks if "stages" in b)
    baseline = re.search(r"`(gpuemu ci [^`]*gpuemu\s+baseline\s+store\s[^`]*)`", text)
    assert baseline, "the guide no longer says how to create the baseline"
    return {"github": github, "gitlab": gitlab, "baseline": " ".join(baseline.group(1).split())}


def _make_repo(root: Path, name: str) -> None:
    """The repository a CI job checks out: the workspace, a CI limit, and the committed baseline."""
    repo = copy_example(name, root / "repo")
    with (repo / "gpuemu.toml").open("a", encoding="utf-8") as fh:
        fh.write(CI_LIMITS)
    git = subprocess.run(["git", "init", "-q"], cwd=repo, capture_output=True, text=True, check=False)
    assert git.returncode == 0, git.stderr
    original = (repo / "gpuemu.toml").read_text(encoding="utf-8")
    if name == "buggy":  # the baseline comes from a green run: the fixed twins, before the bugs came back
        for op in [o["name"] for o in load_toml(repo)["ops"] if not o["name"].endswith("_ok")]:
            swap_module(repo, op, next(o["module"] for o in load_toml(repo)["ops"] if o["name"] == f"{op}_ok"))
    proc = shell(_guide()["baseline"], repo)
    assert proc.returncode == 0, out(proc)
    assert (repo / "gpuemu-baselines" / "nightly.json").is_file()
    status = subprocess.run(["git", "status", "--porcelain"], cwd=repo, capture_output=True, text=True, check=False)
    assert "A  gpuemu-baselines/nightly.json" in status.stdout, status.stdout
    (repo / "gpuemu.toml").write_text(original, encoding="utf-8")
    for junk in (".gpuemu", "results.json"):
        p = repo / junk
        shutil.rmtree(p) if p.is_dir() else p.unlink()


@pytest.fixture(scope="module")
def repos(shared) -> dict[str, Path]:
    return {n: shared(f"ci-guide-{n}", lambda root, n=n: _make_repo(root, n)) / "repo" for n in ("quickstart", "buggy")}


class Runner:
    """Runs jobs in fresh checkouts of a repository and keeps what they upload."""

    def __init__(self, repo: Path, tmp: Path) -> None:
        self.repo, self.tmp, self.n = repo, tmp, 0
        self.artifacts: dict[str, Path] = {}
        self.log: list[str] = []

    def checkout(self) -> Path:
        self.n += 1
        dest = self.tmp / f"job{self.n}"
        shutil.copytree(self.repo, dest, ignore=shutil.ignore_patterns(".git"))
        return dest

    def run(self, script: str, ws: Path, **environ: str) -> int:
        proc = shell(script, ws, **environ)
        self.log.append(f"$ {script.strip()}\n{out(proc)}")
        return proc.returncode


def _subst(text: str, ctx: dict[str, str]) -> str:
    return re.sub(r"\$\{\{\s*([^}]+?)\s*\}\}", lambda m: str(ctx[m.group(1)]), text)


def _is_install(cmd: str) -> bool:
    return cmd.strip().startswith("pip install")


def _github_job(r: Runner, job: dict[str, Any], ctx: dict[str, str]) -> tuple[bool, Path]:
    """One GitHub job: True when it succeeded. Steps run while the job is green, or with `if: always()`; the
    job's and the step's `env:` (expressions substituted) reach its commands."""
    ws, failed = r.checkout(), False
    job_env = {k: _subst(str(v), ctx) for k, v in (job.get("env") or {}).items()}
    for step in job["steps"]:
        cond = step.get("if")
        assert cond in (None, "always()"), f"a step condition this emulation does not know: {cond}"
        if failed and cond != "always()":
            continue
        if "run" in step:
            cmd = _subst(step["run"], ctx)
            if _is_install(cmd):
                continue
            environ = {**job_env, **{k: _subst(str(v), ctx) for k, v in (step.get("env") or {}).items()}}
            failed |= r.run(cmd, ws, **environ) != 0
            continue
        uses, with_ = step["uses"].split("@")[0], step.get("with", {})
        if uses == "actions/upload-artifact":
            path = ws / _subst(with_["path"], ctx)
            assert path.is_file(), f"step uploads {path.name}, which the job did not produce\n" + "\n".join(r.log)
            r.artifacts[_subst(with_["name"], ctx)] = path
        elif uses == "github/codeql-action/upload-sarif":
            assert (ws / with_["sarif_file"]).is_file(), "no SARIF to upload\n" + "\n".join(r.log)
        elif uses == "actions/download-artifact":
            for name, path in r.artifacts.items():
                if fnmatch.fnmatch(name, with_["pattern"]):
                    (ws / with_["path"] / name).mkdir(parents=True)
                    shutil.copy(path, ws / with_["path"] / name / path.name)
        else:
            assert uses in ("actions/checkout", "actions/setup-python"), uses
    return not failed, ws


def _gitlab_job(
    r: Runner, config: dict[str, Any], name: str, index: int = 0, total: int = 0, inputs: list[Path] = ()
) -> tuple[bool, Path]:
    job = dict(config[name])
    for parent in [job.pop("extends")] if "extends" in job else []:
        job = {**config[parent], **job}
    ws = r.checkout()
    for f in inputs:  # artifacts of earlier stages land in the job's folder
        shutil.copy(f, ws / f.name)
    assert all(_is_install(c) for c in job.get("before_script", []))
    environ = {"CI_NODE_INDEX": str(index), "CI_NODE_TOTAL": str(total)} if index else {}
    ok = all(r.run(cmd, ws, **environ) == 0 for cmd in job["script"])  # stops at the first failing line
    artifacts = job.get("artifacts", {})
    for report in artifacts.get("reports", {}).values():
        assert (ws / report).is_file(), f"{name}: no {report}\n" + "\n".join(r.log)
    for pattern in artifacts.get("paths", []):
        assert list(ws.glob(pattern)), f"{name}: nothing matches {pattern}\n" + "\n".join(r.log)
    return ok, ws


EXPECT_GREEN = {"quickstart": True, "buggy": False}


def _check_regressions(name: str, shard_files: list[Path]) -> None:
    """Against the committed baseline: none for the unchanged quickstart, the returned bugs for buggy."""
    regs = [r for f in shard_files for r in json.loads(f.read_text(encoding="utf-8"))["regressions"]]
    if name == "quickstart":
        assert regs == [], regs
    else:
        names = {r["name"] for r in regs if "passed in baseline 'nightly'" in r["reason"]}
        assert names and all(not n.endswith("_ok") for n in names), regs


@pytest.mark.parametrize("name", ["quickstart", "buggy"])
def test_github_actions_workflow(name: str, repos: dict[str, Path], tmp_path: Path) -> None:
    wf = _guide()["github"]
    r = Runner(repos[name], tmp_path)
    green = EXPECT_GREEN[name]

    ok, ws = _github_job(r, wf["jobs"]["quick"], {})
    assert ok is green, "\n".join(r.log)
    assert (ws / "gpuemu-junit.xml").is_file() and (ws / "gpuemu.sarif").is_file()
    if not green:  # the SARIF step ran after the red gate and carries the failures
        assert '"ruleId": "gpuemu/' in (ws / "gpuemu.sarif").read_text()

    thorough = wf["jobs"]["thorough"]
    shards = thorough["strategy"]["matrix"]["shard"]
    results = []
    for i, shard in enumerate(shards):
        ctx = {"matrix.shard": shard, "strategy.job-index": str(i), "strategy.job-total": str(len(shards))}
        ok, ws = _github_job(r, thorough, ctx)
        results.append(ok)
        doc = json.loads((ws / "shard.json").read_text(encoding="utf-8"))
        assert doc["shard"] == f"{i + 1}/{len(shards)}", "--shard auto did not read the matrix variables"
        assert doc["shard_plan"]["costs"] == "baseline 'nightly'", doc["shard_plan"]  # balanced by cost
    assert sorted(a for a in r.artifacts if a.startswith("shard-")) == [f"shard-{i}" for i in range(len(shards))]
    assert all(results) if green else not all(results), "\n".join(r.log)
    _check_regressions(name, [p for a, p in r.artifacts.items() if a.startswith("shard-")])

    ok, ws = _github_job(r, wf["jobs"]["merge"], {})
    assert ok is green, "\n".join(r.log)
    assert (ws / "gpuemu-junit.xml").is_file() and (ws / "gpuemu.sarif").is_file()  # one of each, merged
    junit = (ws / "gpuemu-junit.xml").read_text()
    assert junit.count('classname="gpuemu.ops"') == len(load_toml(ws)["ops"])


@pytest.mark.parametrize("name", ["quickstart", "buggy"])
def test_gitlab_ci_pipeline(name: str, repos: dict[str, Path], tmp_path: Path) -> None:
    config = _guide()["gitlab"]
    r = Runner(repos[name], tmp_path)
    green = EXPECT_GREEN[name]

    ok, ws = _gitlab_job(r, config, "gpuemu-quick")
    assert ok is green, "\n".join(r.log)

    total = int(config["gpuemu-thorough"]["parallel"])
    files, results = [], []
    for index in range(1, total + 1):
        ok, ws = _gitlab_job(r, config, "gpuemu-thorough", index, total)
        results.append(ok)
        files += sorted(ws.glob("shard-*.json"))
        assert json.loads(files[-1].read_text(encoding="utf-8"))["shard"] == f"{index}/{total}"
    assert [f.name for f in files] == [f"shard-{i}.json" for i in range(1, total + 1)]
    assert all(results) if green else not all(results), "\n".join(r.log)
    _check_regressions(name, files)

    ok, ws = _gitlab_job(r, config, "gpuemu-merge", inputs=files)
    assert ok is green, "\n".join(r.log)
    junit = (ws / "gpuemu-junit.xml").read_text()
    assert junit.count('classname="gpuemu.ops"') == len(load_toml(ws)["ops"])
