"""A test run never writes the tracked FIGURES.md: the figures go to the ignored .results/ folder, and the tracked
file is rewritten only on request (``python -m tests.reliability.figures`` or ``GPUEMU_WRITE_FIGURES=1``)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import figures
import pytest


def _records(results: Path, uid: str, categories: tuple[str, ...]) -> None:
    results.mkdir(exist_ok=True)
    lines = [json.dumps({"cat": c, "test": f"t::{c}", "cases": 2}) for c in categories]
    lines.append(json.dumps({"cat": "rows", "test": "t::rows2", "written": 5, "lost": 0}))
    (results / f"records-{uid}-1.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")


@pytest.mark.parametrize("write_tracked", [False, True])
def test_a_complete_run_writes_under_results_and_the_tracked_file_only_on_request(
    tmp_path: Path, write_tracked: bool
) -> None:
    results, tracked = tmp_path / ".results", tmp_path / "FIGURES.md"
    tracked.write_text("old figures\n", encoding="utf-8")
    _records(results, "run1", figures.REQUIRED)
    written = figures.finish_run(results, "run1", figures=tracked, write_tracked=write_tracked)
    assert written == results / "FIGURES.md"
    assert "| Store rows written and counted afterwards | 5 |" in written.read_text(encoding="utf-8")
    assert json.loads((results / "figures.json").read_text(encoding="utf-8"))["complete"] is True
    assert tracked.read_text(encoding="utf-8") == (
        written.read_text(encoding="utf-8") if write_tracked else "old figures\n"
    )


def test_a_partial_run_never_writes_the_tracked_file(tmp_path: Path) -> None:
    results, tracked = tmp_path / ".results", tmp_path / "FIGURES.md"
    tracked.write_text("old figures\n", encoding="utf-8")
    _records(results, "run2", ("config", "ops"))
    written = figures.finish_run(results, "run2", figures=tracked, write_tracked=True)
    assert written.name == "FIGURES-partial.md" and (results / "figures-partial.json").exists()
    assert tracked.read_text(encoding="utf-8") == "old figures\n"


def test_the_explicit_command_renders_the_last_complete_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    results, tracked = tmp_path / ".results", tmp_path / "FIGURES.md"
    monkeypatch.setattr(figures, "RESULTS", results)
    monkeypatch.setattr(figures, "FIGURES", tracked)
    assert figures.main([]) == 1 and not tracked.exists()  # nothing measured yet: says so, writes nothing
    _records(results, "run3", figures.REQUIRED)
    figures.finish_run(results, "run3", figures=tracked)
    assert not tracked.exists()
    assert figures.main([]) == 0
    assert tracked.read_text(encoding="utf-8") == (results / "FIGURES.md").read_text(encoding="utf-8")


def test_results_are_ignored_and_figures_md_is_tracked() -> None:
    here = Path(figures.__file__).parent
    ignored = subprocess.run(["git", "check-ignore", "-q", str(here / ".results" / "figures.json")], cwd=here)
    tracked = subprocess.run(["git", "ls-files", "--error-unmatch", "FIGURES.md"], cwd=here, capture_output=True)
    if ignored.returncode == 128 or tracked.returncode == 128:  # git check-ignore and ls-files: not a checkout
        pytest.skip("not a git checkout")
    assert ignored.returncode == 0 and tracked.returncode == 0
