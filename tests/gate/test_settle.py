"""The gate's memory stays flat in the number of cases (issue 31): each op's document entry is made as the op
finishes and its cases go, and the document, JSON and --output file are the same as when every case was held
to the end."""

from __future__ import annotations

import copy
import json
from pathlib import Path

from kit.ops import op_toml, project_toml
from kit.workspace import write_files

from gpuemu_ls.args import emit
from gpuemu_ls.engine.config.load import load_config
from gpuemu_ls.engine.oracle.outcome import OpOutcome
from gpuemu_ls.engine.report.results import build_document, dumps, op_entry_dict, sanitize
from gpuemu_ls.engine.run.validate import RunOptions, run_validation
from gpuemu_ls.engine.tools.settle import settle_ops

OPS = """
import numpy as np


def scale(x):
    return (2 * np.asarray(x, dtype=np.float32)).astype(x.dtype)


def wrong(x):
    return (2.02 * np.asarray(x, dtype=np.float32)).astype(x.dtype)


def ref(x):
    return 2.0 * x
"""


def test_each_op_lets_its_cases_go_and_the_document_is_unchanged(tmp_path: Path) -> None:
    dims = {"B": (1, 4, 2), "N": (1, 32, 8)}
    toml = project_toml(validation={"dtypes": ["float32"]})
    toml += op_toml("good", module="ops:scale", reference="ops:ref", dims=dims)
    toml += op_toml("bad", module="ops:wrong", reference="ops:ref", dims=dims)
    ws = write_files(tmp_path / "ws", {"gpuemu.toml": toml, "ops.py": OPS})
    config = load_config(ws)
    held: dict[str, dict] = {}

    def hold(o: OpOutcome) -> None:  # what the document made of the op with every case still there
        held[o.op] = copy.deepcopy(op_entry_dict(config, o))

    options = RunOptions(mode="thorough", iterations=6, store=False, on_op=hold)
    settled = settle_ops(config, options)
    run = run_validation(config, options)
    assert [(o.op, o.status, o.cases) for o in run.outcomes] == [("good", "passed", []), ("bad", "failed", [])]
    assert dict(settled) == held and held["bad"]["failures_total"] == 6
    good, bad = settled["good"], settled["bad"]  # one copy of each key and short string among all entries
    assert next(k for k in good if k == "status") is next(k for k in bad if k == "status")
    dtypes = [f["dtype"] for f in bad["failures"]]
    assert len(dtypes) == 6 and all(d is dtypes[0] for d in dtypes), dtypes
    doc = build_document(config, run, entries=settled)
    assert doc["ops"] == [held["good"], held["bad"]] and doc["summary"]["failed"] == 1


def test_json_is_written_chunk_by_chunk_as_it_was_whole(tmp_path: Path) -> None:
    """Non-finite figures read as before ("nan", "inf"); the --output file ends in one newline."""
    doc = {"a": [1.5, float("nan"), float("inf"), -float("inf"), (1, 2)], "b": {"c": "é"}, "d": []}
    assert dumps(doc) == json.dumps(sanitize(doc), indent=2, default=str, allow_nan=False)
    whole, parts = tmp_path / "whole.json", tmp_path / "parts.json"
    emit(dumps(doc), str(whole))
    emit(iter(dumps(doc).splitlines(keepends=True)), str(parts))
    assert parts.read_bytes() == whole.read_bytes() and whole.read_bytes().endswith(b"}\n")
