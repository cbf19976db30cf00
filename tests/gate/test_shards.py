"""Shards (issue 4, CI half): `gpuemu ci --shard K/N` covers every op exactly once, and
`gpuemu report --merge` of the shards gives the unsharded verdict (statuses, counts, diagnoses, exit code)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from gatekit import copy_example, gpuemu, jdoc, load_toml, out, validate_junit

FLAGS = ("--quick", "--iterations", "6")
N = 3


def _build(root: Path) -> None:
    ws = copy_example("buggy", root / "buggy")
    for k in range(1, N + 1):
        proc = gpuemu("ci", "--shard", f"{k}/{N}", *FLAGS, "--format", "json", "--output", f"s{k}.json", cwd=ws)
        (ws / f"s{k}.rc").write_text(str(proc.returncode))
        (ws / f"s{k}.stdout").write_text(proc.stdout)
        assert proc.returncode in (0, 1), out(proc)
    proc = gpuemu("ci", *FLAGS, "--format", "json", "--output", "all.json", cwd=ws)
    assert proc.returncode == 1, out(proc)
    (ws / "all.rc").write_text(str(proc.returncode))


@pytest.fixture(scope="module")
def shards(shared) -> Path:
    return shared("shards-buggy", _build) / "buggy"


def _doc(ws: Path, name: str) -> dict:
    return json.loads((ws / name).read_text(encoding="utf-8"))


def _verdicts(doc: dict) -> dict:
    return {
        e["name"]: (
            e["status"],
            e["cases"],
            e["passed"],
            e["failed"],
            e["errors"],
            e["diagnosis"],
            e["failures_total"],
            [f["seed"] for f in e["failures"]],
        )
        for e in doc["ops"] + doc["kernels"]
    }


def test_shards_cover_every_op_exactly_once(shards: Path) -> None:
    names = [o["name"] for o in load_toml(shards)["ops"]]
    seen: list[str] = []
    for k in range(1, N + 1):
        doc = _doc(shards, f"s{k}.json")
        assert doc["shard"] == f"{k}/{N}"
        assert doc["ops"], f"shard {k} is empty"
        seen += [e["name"] for e in doc["ops"]]
        assert f"[shard {k}/{N}]" in (shards / f"s{k}.stdout").read_text()
        assert int((shards / f"s{k}.rc").read_text()) == doc["exit_code"]
    assert sorted(seen) == sorted(names) and len(seen) == len(set(seen))


def test_merge_gives_the_unsharded_verdict(shards: Path) -> None:
    files = [f"s{k}.json" for k in range(1, N + 1)]
    proc = gpuemu("report", "--merge", *files, "--format", "json", cwd=shards)
    whole = _doc(shards, "all.json")
    assert proc.returncode == int((shards / "all.rc").read_text()) == whole["exit_code"] == 1, out(proc)
    merged = jdoc(proc)
    assert _verdicts(merged) == _verdicts(whole)
    assert [e["name"] for e in merged["ops"]] == sorted(e["name"] for e in whole["ops"])
    assert merged["summary"] == whole["summary"]
    assert (merged["status"], merged["exit_code"]) == (whole["status"], whole["exit_code"])
    assert merged["shard"] is None and sorted(merged["merged_from"]) == [f"{k}/{N}" for k in range(1, N + 1)]
    # each shard's provenance (its machine, checkout and date) is kept; the first shard's is the document's own
    assert merged["shard_provenance"] == [_doc(shards, f)["provenance"] for f in files]
    assert merged["provenance"] == merged["shard_provenance"][0]
    # the order of the shard files does not matter
    again = gpuemu("report", "--merge", *reversed(files), "--format", "json", cwd=shards)
    assert _verdicts(jdoc(again)) == _verdicts(whole)


def test_merged_junit_validates(shards: Path, schemas, tmp_path: Path) -> None:
    out_file = tmp_path / "merged.xml"
    proc = gpuemu(
        "report",
        "--merge",
        *(f"s{k}.json" for k in range(1, N + 1)),
        "--format",
        "junit",
        "--output",
        str(out_file),
        cwd=shards,
    )
    assert proc.returncode == 1, out(proc)
    xml = out_file.read_text(encoding="utf-8")
    validate_junit(xml, schemas.junit())
    assert xml.count('classname="gpuemu.ops"') == len(load_toml(shards)["ops"])


@pytest.mark.parametrize("value", ["0/3", "4/3", "1/0", "3", "x/3", "1/3/3", "/", "a/b"])
def test_bad_shard_values_are_usage_errors(value: str, tmp_path: Path) -> None:
    ws = copy_example("quickstart", tmp_path / "qs")
    proc = gpuemu("ci", f"--shard={value}", "--quick", "--iterations", "1", cwd=ws)
    assert proc.returncode == 2, out(proc)
    assert "--shard" in proc.stderr and not (ws / ".gpuemu" / "gpuemu.db").exists()


def test_empty_shard_value_is_a_usage_error(tmp_path: Path) -> None:
    ws = copy_example("quickstart", tmp_path / "qs")
    proc = gpuemu("ci", "--shard=", "--quick", "--iterations", "1", cwd=ws)
    assert proc.returncode == 2, out(proc)


def test_merge_of_incomplete_shards_is_not_green(tmp_path: Path) -> None:
    ws = copy_example("quickstart", tmp_path / "qs")
    proc = gpuemu(
        "ci", "--shard", "1/2", "--quick", "--iterations", "2", "--format", "json", "--output", "s1.json", cwd=ws
    )
    assert proc.returncode == 0, out(proc)
    merged = gpuemu("report", "--merge", "s1.json", "--format", "json", cwd=ws)
    assert merged.returncode != 0, "a merge missing shard 2/2 must not pass"
