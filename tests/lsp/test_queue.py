"""Ops that wait in the server's queue are timed by their own run (issue 31): with a 2 s case timeout and more
ops than run at once, each taking ~0.7 s, the last ones wait longer than the timeout and none may time out,
and the duration an editor shows is the op's own."""

from __future__ import annotations

from typing import Any

import pytest
from kit.ops import project_toml
from lspkit import FAST, SLOW_PY, tiny_op

pytestmark = pytest.mark.asyncio

OPS = [f"slow{i}" for i in range(7)]


@pytest.mark.parametrize("editor", ["neovim"], indirect=True)
async def test_time_in_the_queue_is_not_the_ops_time(editor: Any, workspace: Any) -> None:
    header = project_toml(project={"name": "q", "framework": "numpy"}, validation={"dtypes": ["float32"], "timeout": 2})
    toml = header + "".join(tiny_op(op, "slow:slow_double", "slow:reference") for op in OPS)
    root = workspace(toml, {"slow.py": SLOW_PY.format(delay=0.7)}, name="queue")
    client = await editor.start(root, {**FAST, "iterations": 1, "jobs": 1})
    answer = await client.request("gpuemu/runOps", {"ids": [f"op:{op}" for op in OPS]}, timeout=60)
    assert [r["status"] for r in answer["results"]] == ["passed"] * len(OPS), answer
    finals = {s["name"]: s for s in client.op_states if s.get("state") == "passed"}
    elapsed = [finals[op]["elapsed"] for op in OPS]
    assert all(0.7 <= e < 2 for e in elapsed), elapsed  # the op's own run, not its wait
    queued = {s["name"]: s["_t"] for s in client.op_states if s.get("state") == "queued"}
    started = {s["name"]: s["_t"] for s in client.op_states if s.get("state") == "running"}
    assert max(started[op] - queued[op] for op in OPS) > 2, "no op waited longer than the timeout: proves nothing"
