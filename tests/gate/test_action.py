"""The GitHub Action and the release workflow (issue 15, item 1): their YAML validates against the
schemas GitHub documents (SchemaStore's, vendored by check-jsonschema), and the action's script step runs
here as it runs on GitHub: one gate run, JSON + JUnit + SARIF + a Markdown job summary of the failures with
their replay commands, the gate's exit code as the step output (the job fails in the last step)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml
from gatekit import ROOT, VENV_BIN, copy_example, env
from kit.attest import write_keypair

from gpuemu_ls.engine.tools.attest.keys import load_public_key
from gpuemu_ls.engine.tools.attest.verify import verify

ACTION = ROOT / "action.yml"
GATE_SH = ROOT / "ci" / "action" / "gate.sh"


@pytest.mark.parametrize(
    ("path", "schema"),
    [("action.yml", "vendor.github-actions"), (".github/workflows/release.yml", "vendor.github-workflows")],
)
def test_yaml_validates_against_githubs_schema(path: str, schema: str) -> None:
    proc = subprocess.run(
        [str(VENV_BIN / "check-jsonschema"), "--builtin-schema", schema, str(ROOT / path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_action_runs_its_gate_script_and_fails_in_its_last_step() -> None:
    action = yaml.safe_load(ACTION.read_text())
    steps = action["runs"]["steps"]
    assert action["runs"]["using"] == "composite"
    gate = next(s for s in steps if s.get("id") == "gate")
    assert 'ci/action/gate.sh"' in gate["run"]
    assert steps[-1]["run"].strip() == 'exit "${{ steps.gate.outputs.exit-code }}"'
    assert {"path", "mode", "shard", "baseline"} <= set(action["inputs"])
    uploads = [
        s
        for s in steps
        if str(s.get("uses", "")).startswith(("github/codeql-action/upload-sarif", "actions/upload-artifact"))
    ]
    assert len(uploads) == 2 and all("always()" in s["if"] for s in uploads)


def test_the_signed_release_workflow_of_the_docs_validates_and_uses_the_actions_inputs(tmp_path: Path) -> None:
    """docs/ci.md's release workflow: GitHub's workflow schema, and every `with:` key an input of action.yml."""
    text = (ROOT / "docs" / "ci.md").read_text(encoding="utf-8")
    found = re.search(r"```yaml\n(.*?)```", text[text.index("## Signed reports") :], re.S)
    assert found, "no workflow in docs/ci.md's Signed reports section"
    workflow = tmp_path / "release.yml"
    workflow.write_text(found.group(1), encoding="utf-8")
    step = next(s for s in yaml.safe_load(found.group(1))["jobs"]["report"]["steps"] if "gpuemu-ls" in s["uses"])
    assert step["with"]["attest"] is True and "GPUEMU_SIGNING_KEY" in step["env"]
    assert set(step["with"]) <= set(yaml.safe_load(ACTION.read_text())["inputs"])
    proc = subprocess.run(
        [str(VENV_BIN / "check-jsonschema"), "--builtin-schema", "vendor.github-workflows", str(workflow)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _run(
    ws: Path, tmp: Path, secrets: dict[str, str] | None = None, **inputs: str
) -> tuple[subprocess.CompletedProcess, Path, dict[str, str]]:
    out = tmp / "reports"
    summary, outputs = tmp / "summary.md", tmp / "outputs.txt"
    e = env(
        GPUEMU_ACTION_PATH=str(ws),
        GPUEMU_ACTION_OUT=str(out),
        GITHUB_STEP_SUMMARY=str(summary),
        GITHUB_OUTPUT=str(outputs),
        **{f"GPUEMU_ACTION_{k.upper()}": v for k, v in inputs.items()},
        **(secrets or {}),
    )
    proc = subprocess.run(["bash", str(GATE_SH)], cwd=tmp, env=e, capture_output=True, text=True, timeout=900)
    got = dict(line.split("=", 1) for line in outputs.read_text().splitlines()) if outputs.exists() else {}
    return proc, out, got


def test_a_failing_workspace_gives_reports_a_summary_and_exit_code_1(tmp_path: Path) -> None:
    ws = copy_example("buggy", tmp_path / "buggy")
    proc, out, outputs = _run(ws, tmp_path, mode="quick")
    assert proc.returncode == 0, proc.stdout + proc.stderr  # the step itself passes: uploads run next
    assert outputs == {"exit-code": "1"}, (outputs, proc.stdout, proc.stderr)
    doc = json.loads((out / "gpuemu.json").read_text())
    failed = {e["name"] for e in doc["ops"] if e["status"] == "failed"}
    assert "softmax_tail_mask" in failed and "softmax_tail_mask_ok" not in failed
    cases = ET.parse(out / "gpuemu.junit.xml").getroot().iter("testcase")
    assert sum(1 for c in cases if c.find("failure") is not None) == len(failed)
    sarif = json.loads((out / "gpuemu.sarif").read_text())
    assert sarif["version"] == "2.1.0" and sarif["runs"][0]["results"]
    summary = (tmp_path / "summary.md").read_text()
    assert summary.startswith("### gpuemu-ls: FAIL")
    assert "replay: `gpuemu reproduce --op softmax_tail_mask --seed" in summary
    assert "N % 128 \\!= 0" in summary or "N % 128 != 0" in summary, summary  # the diagnosis names the condition


def test_a_passing_workspace_and_a_bad_input(tmp_path: Path) -> None:
    ws = copy_example("quickstart", tmp_path / "qs")
    shutil.rmtree(ws / ".gpuemu", ignore_errors=True)
    private, public = write_keypair(tmp_path / "keys")
    key = {"GPUEMU_SIGNING_KEY": private.read_text(encoding="utf-8")}
    proc, out, outputs = _run(ws, tmp_path, key, mode="quick", shard="1/2", report="html", redact="true", attest="true")
    assert outputs == {"exit-code": "0"}, (outputs, proc.stdout, proc.stderr)
    signed = verify(out / "gpuemu.intoto.jsonl", load_public_key(str(public)))  # `attest: true`: both reports
    assert sorted(name for name, _ in signed.subjects) == ["gpuemu.html", "gpuemu.json"]
    doc = json.loads((out / "gpuemu.json").read_text())
    assert doc["shard"]
    page = (out / "gpuemu.html").read_text(encoding="utf-8")  # `report: html`: the page beside the JSON
    names = re.findall(r'<tr data-name="[^"]*" data-status="passed" data-op="([^"]+)"', page)
    assert names == [e["name"] for e in doc["ops"]] and names
    assert str(ws.resolve()) not in page and "&lt;workspace&gt;" in page  # `redact: true`
    assert (tmp_path / "summary.md").read_text().startswith("### gpuemu-ls: PASS")
    proc, _, outputs = _run(ws, tmp_path / "bad" if (tmp_path / "bad").mkdir() is None else tmp_path, mode="fast")
    assert proc.returncode == 2 and "mode must be quick or thorough" in proc.stderr, proc.stderr
    proc, _, outputs = _run(ws, tmp_path, mode="quick", report="pdf")
    assert proc.returncode == 2 and "report must be html or empty" in proc.stderr, proc.stderr
    proc, _, outputs = _run(ws, tmp_path, mode="quick", attest="yes")
    assert proc.returncode == 2 and "attest must be true or false" in proc.stderr, proc.stderr
    proc, _, outputs = _run(ws, tmp_path, mode="quick", attest="true")
    assert proc.returncode == 2 and "GPUEMU_SIGNING_KEY" in proc.stderr, proc.stderr


INSTALL_SH = ROOT / "ci" / "action" / "install.sh"


@pytest.mark.parametrize("extras", ["", " ", "cuda", " cuda , triton ,", ",cuda"])
def test_the_install_step_takes_any_extras_input_pip_can_install(tmp_path: Path, extras: str) -> None:
    """Issue 29 item 6: `extras: ""` made the requirement "PATH[]", which pip rejects. The real pip resolves the
    requirement the step builds (a dry run: nothing is installed)."""
    e = env(GITHUB_ACTION_PATH=str(ROOT), GPUEMU_ACTION_EXTRAS=extras)
    proc = subprocess.run(
        ["bash", str(INSTALL_SH), "--dry-run", "--no-deps", "--no-build-isolation"],
        cwd=tmp_path,
        env=e,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Invalid requirement" not in proc.stderr


def test_the_install_step_refuses_extras_that_are_not_names(tmp_path: Path) -> None:
    e = env(GITHUB_ACTION_PATH=str(ROOT), GPUEMU_ACTION_EXTRAS="cuda]; rm -rf /")
    proc = subprocess.run(["bash", str(INSTALL_SH)], cwd=tmp_path, env=e, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "extras must be comma-separated names" in proc.stderr, proc.stderr


def test_a_workspace_in_a_subfolder_gives_sarif_paths_of_the_repository(tmp_path: Path) -> None:
    """Code scanning maps a SARIF URI to a file of the repository: a workspace at kernels/buggy of a git
    repository must give kernels/buggy/softmax_tail_mask.py, not softmax_tail_mask.py."""
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True, timeout=60)
    ws = copy_example("buggy", repo / "kernels" / "buggy")
    shutil.rmtree(ws / ".gpuemu", ignore_errors=True)
    proc, out, outputs = _run(Path("kernels/buggy"), repo, mode="quick")
    assert outputs == {"exit-code": "1"}, (outputs, proc.stdout, proc.stderr)
    (run,) = json.loads((out / "gpuemu.sarif").read_text())["runs"]
    assert run["originalUriBaseIds"]["%SRCROOT%"]["uri"] == repo.resolve().as_uri() + "/"
    uris = {
        loc["physicalLocation"]["artifactLocation"]["uri"]
        for r in run["results"]
        for loc in r.get("locations", []) + r.get("relatedLocations", [])
    }
    assert uris and all(u.startswith("kernels/buggy/") and (repo / u).is_file() for u in uris), uris
    assert "kernels/buggy/softmax_tail_mask.py" in uris and "kernels/buggy/gpuemu.toml" in uris
