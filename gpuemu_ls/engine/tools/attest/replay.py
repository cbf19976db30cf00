"""``gpuemu verify --replay``: run the recorded seeds of the recorded ops again from a checkout of the recorded
commit (inputs regenerated from (op, seed), that checkout's op code, never the stored snapshots) and say of
each recorded verdict whether it is confirmed, contradicted, or not reproducible here (among the reasons: other
Python or library versions than the recorded ones, see :mod:`.environment`)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...errors import UsageError
from . import AttestFailed
from .environment import Environment, compare

CONFIRMED, CONTRADICTED, NOT_HERE = "confirmed", "contradicted", "not reproducible here"
#: the whole replay (every op's cases in one child process)
REPLAY_TIMEOUT_S = 3600.0
GIT_TIMEOUT_S = 120.0
SHOWN_PER_OP = 10


@dataclass(frozen=True)
class CaseVerdict:
    op: str
    seed: int
    recorded: str
    replayed: str | None
    verdict: str
    why: str = ""


@dataclass
class Replay:
    commit: str
    workspace: str  # the workspace's folder in the repository ("." at its top)
    cases: list[CaseVerdict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    environment: Environment | None = None

    def count(self, verdict: str) -> int:
        return sum(1 for c in self.cases if c.verdict == verdict)

    @property
    def passed(self) -> bool:
        """No verdict contradicted, and at least one confirmed: a replay that ran nothing proves nothing."""
        return not self.count(CONTRADICTED) and bool(self.count(CONFIRMED))


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            ["git", "-C", str(repo), *args],
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT_S,
            check=False,
            env={**os.environ, "LC_ALL": "C"},
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise UsageError(f"git {args[0]} failed in {repo}: {exc}") from None


def repository(workspace: Path) -> tuple[Path, str]:
    """The git repository holding ``workspace`` and the workspace's folder in it."""
    top = _git(workspace, "rev-parse", "--show-toplevel")
    if top.returncode != 0:
        raise UsageError(f"{workspace} is not in a git repository: --replay needs the recorded commit's repository")
    root = Path(top.stdout.strip()).resolve()
    return root, workspace.resolve().relative_to(root).as_posix()


@contextlib.contextmanager
def checkout(repo: Path, commit: str) -> Iterator[Path]:
    """A detached worktree of ``commit`` in a temporary folder, removed afterwards."""
    if _git(repo, "cat-file", "-e", f"{commit}^{{commit}}").returncode != 0:
        raise UsageError(f"commit {commit} is not in {repo} (fetch it, or pass -C a clone that has it)")
    tmp = Path(tempfile.mkdtemp(prefix="gpuemu-replay-"))
    tree = tmp / "checkout"
    try:
        added = _git(repo, "worktree", "add", "--detach", "--quiet", str(tree), commit)
        if added.returncode != 0:
            raise UsageError(f"cannot check out {commit} in {repo}: {added.stderr.strip()[:300]}")
        yield tree
    finally:
        _git(repo, "worktree", "remove", "--force", str(tree))
        shutil.rmtree(tmp, ignore_errors=True)
        _git(repo, "worktree", "prune")


def expand(runs: Any) -> list[int]:
    return [s for first, last in runs for s in range(int(first), int(last) + 1)]


def recorded_cases(doc: dict[str, Any]) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """Per op: its seeds, plan and recorded verdict per seed (None where the report lists too many failures to
    hold them all); and notes on ops with nothing to replay."""
    plans: dict[str, dict[str, Any]] = {}
    notes = []
    for e in doc.get("ops") or []:
        run = e.get("cases_run") or {}
        if "seeds" not in run:
            notes.append(f"op {e.get('name')}: the report does not list its seeds (made before gpuemu recorded them)")
            continue
        seeds = expand(run["seeds"])
        if not seeds:
            notes.append(f"op {e['name']}: no case ran in the recorded run ({e.get('status')}); nothing to replay")
            continue
        failures = {int(f["seed"]): str(f["status"]) for f in e.get("failures") or []}
        complete = len(failures) >= int(e.get("failures_total") or 0)
        verdicts = {s: failures.get(s, "passed" if complete else None) for s in seeds}
        plans[e["name"]] = {"seeds": seeds, "plan": run.get("plan"), "recorded": verdicts}
    return plans, notes


def judge(
    op: str, seed: int, recorded: str | None, got: dict[str, Any] | None, dirty: bool, environment: str | None = None
) -> CaseVerdict:
    """One case's verdict; ``environment`` says how Python, the libraries or the platform differ from the
    recorded ones (None: as recorded, or not recorded), which makes a difference not reproducible here."""
    if recorded is None:
        return CaseVerdict(op, seed, "not listed", None, NOT_HERE, "the report lists only its first failures")
    if got is None:
        return CaseVerdict(op, seed, recorded, None, NOT_HERE, "the replay did not run this case")
    status = str(got["status"])
    if status == recorded:
        return CaseVerdict(op, seed, recorded, status, CONFIRMED)
    why = f"[{got.get('kind')}] {got.get('message')}" if got.get("kind") else str(got.get("message") or "")
    if status == "error":  # a GPU-only op, a missing library: this machine could not run it
        return CaseVerdict(op, seed, recorded, status, NOT_HERE, why)
    if dirty:
        return CaseVerdict(op, seed, recorded, status, NOT_HERE, "the recorded run had uncommitted changes; " + why)
    if environment:
        return CaseVerdict(op, seed, recorded, status, NOT_HERE, f"{environment}; {why}")
    return CaseVerdict(op, seed, recorded, status, CONTRADICTED, why)


def _run_child(workspace: Path, plans: dict[str, dict[str, Any]]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="gpuemu-rerun-") as tmp:
        request, answer = Path(tmp) / "request.json", Path(tmp) / "answer.json"
        ops = {n: {"seeds": p["seeds"], "plan": p["plan"]} for n, p in plans.items()}
        request.write_text(json.dumps({"workspace": str(workspace), "ops": ops}), encoding="utf-8")
        cmd = [sys.executable, "-m", "gpuemu_ls.engine.tools.attest.rerun", str(request), str(answer)]
        try:  # run from the temporary folder: nothing of the checkout shadows gpuemu's own modules
            done = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True, timeout=REPLAY_TIMEOUT_S, check=False)
        except subprocess.TimeoutExpired:
            raise UsageError(f"the replay ran past {REPLAY_TIMEOUT_S:.0f} s and was stopped") from None
        if done.returncode != 0 or not answer.is_file():
            tail = (done.stderr.strip().splitlines() or ["(no output)"])[-1][:300]
            raise UsageError(f"the replay process failed (exit {done.returncode}): {tail}")
        return dict(json.loads(answer.read_text(encoding="utf-8")))


def replay(doc: dict[str, Any], repo: Path, folder: str) -> Replay:
    """Replay ``doc``'s recorded cases from its recorded commit of ``repo`` (the workspace at ``folder``)."""
    prov = doc.get("provenance") if isinstance(doc.get("provenance"), dict) else {}
    git = prov.get("git") if isinstance(prov.get("git"), dict) else {}
    commit = git.get("commit")
    if not commit:
        raise UsageError("the report records no git commit: there is nothing to check out and replay")
    plans, notes = recorded_cases(doc)
    env = compare(prov)
    out = Replay(str(commit), folder, notes=notes, environment=env)
    dirty = bool(git.get("dirty"))
    if dirty:
        out.notes.append("the recorded run's tree had uncommitted changes: the commit is not exactly what ran")
    out.notes += env.notes()
    if prov.get("of") == "report":  # gpuemu report read the store later: the commit checked out then
        out.notes.append(
            "the commit was recorded when the report was built from the store, not when its runs ran (and so were "
            "the library versions); sign the run's own JSON (gpuemu ci --format json) or report right after the "
            "run so that they are the same"
        )
    with checkout(repo, str(commit)) as tree:
        ws = tree / folder
        toml = ws / "gpuemu.toml"
        if not toml.is_file():
            raise UsageError(f"commit {commit} has no {folder}/gpuemu.toml: pass -C the workspace the report is from")
        recorded_toml = prov.get("toml_sha256")
        here = hashlib.sha256(toml.read_bytes()).hexdigest()
        if recorded_toml and recorded_toml != here:
            raise AttestFailed(
                f"the report is from another config: commit {commit[:12]}'s gpuemu.toml has sha256 {here[:16]}..., "
                f"the report records {recorded_toml[:16]}..."
            )
        answer = _run_child(ws, plans) if plans else {"error": None, "ops": {}}
    if answer.get("error"):
        raise UsageError(str(answer["error"]))
    for name, p in plans.items():
        got_op = answer["ops"].get(name) or {"error": "not run", "cases": []}
        by_seed = {int(c["seed"]): c for c in got_op["cases"]}
        for seed in p["seeds"]:
            v = judge(name, seed, p["recorded"][seed], by_seed.get(seed), dirty, env.why)
            if seed not in by_seed and got_op.get("error"):
                v = CaseVerdict(name, seed, v.recorded, None, NOT_HERE, str(got_op["error"]))
            out.cases.append(v)
    return out


def describe(rep: Replay, tool_version: str, recorded_version: str | None) -> list[str]:
    """The replay, op by op, with the cases that did not confirm (at most SHOWN_PER_OP each)."""
    lines = [f"replay: commit {rep.commit} ({rep.workspace}), inputs regenerated from (op, seed), nothing stored"]
    if recorded_version and recorded_version != tool_version:
        lines.append(f"  note: recorded by gpuemu-ls {recorded_version}, replayed by {tool_version}")
    lines += [f"  note: {n}" for n in rep.notes]
    by_op: dict[str, list[CaseVerdict]] = {}
    for c in rep.cases:
        by_op.setdefault(c.op, []).append(c)
    for op, cases in by_op.items():
        n = Counter(c.verdict for c in cases)
        lines.append(
            f"  op {op}: {n[CONFIRMED]} confirmed, {n[CONTRADICTED]} contradicted, {n[NOT_HERE]} not reproducible here"
        )
        odd = [c for c in cases if c.verdict != CONFIRMED]
        for c in odd[:SHOWN_PER_OP]:
            lines.append(
                f"    {c.verdict.upper()} seed {c.seed}: recorded {c.recorded}, replayed {c.replayed or '-'}"
                + (f": {c.why}" if c.why else "")
            )
        if len(odd) > SHOWN_PER_OP:
            lines.append(f"    ... and {len(odd) - SHOWN_PER_OP} more")
    total = Counter(c.verdict for c in rep.cases)
    lines.append(
        f"replay: {total[CONFIRMED]} confirmed, {total[CONTRADICTED]} contradicted, "
        f"{total[NOT_HERE]} not reproducible here"
    )
    return lines


def to_dict(rep: Replay) -> dict[str, Any]:
    return {
        "commit": rep.commit,
        "workspace": rep.workspace,
        "notes": rep.notes,
        "environment": {
            "differences": rep.environment.differences,
            "libraries_recorded": rep.environment.libraries_known,
            "here": rep.environment.here,
        }
        if rep.environment
        else None,
        "confirmed": rep.count(CONFIRMED),
        "contradicted": rep.count(CONTRADICTED),
        "not_reproducible": rep.count(NOT_HERE),
        "cases": [c.__dict__ for c in rep.cases],
    }


__all__ = ["CONFIRMED", "CONTRADICTED", "NOT_HERE", "Replay", "describe", "replay", "repository", "to_dict"]
