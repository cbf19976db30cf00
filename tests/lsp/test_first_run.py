"""A workspace opened with nothing stored is validated once, in the background, with progress (``runOnOpen``);
what is stored shows at once instead; an untrusted workspace runs nothing. The server's log has a line per run
and per op, ``$/logTrace`` follows the client's trace setting, a cancel for an answered request is no error,
and the store's folder ignores itself in git."""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import pytest
from lspkit import FAST, GpuemuClient
from lsprotocol import types as lsp

OP, TWIN = "softmax_tail_mask", "softmax_tail_mask_ok"


def _logs(client: GpuemuClient) -> list[str]:
    return [m.message for m in client.log_messages if m.type == lsp.MessageType.Info]


@pytest.mark.asyncio
@pytest.mark.parametrize("editor", ["vscode"], indirect=True)
async def test_first_run_on_open_then_stored_results_at_once(editor: Any, buggy_ws: Any) -> None:
    root = buggy_ws([OP, TWIN])
    src = root / "softmax_tail_mask.py"
    client = await editor.start(root, {**FAST, "runOnOpen": "quick"})
    # results appear without opening or saving any file
    diag = await client.wait_op_diagnostic(src, OP, timeout=120)
    assert diag.code == "mismatch"
    assert (await client.wait_state(TWIN, {"passed", "failed", "error"}))["state"] == "passed"
    assert not client.versions, "the test opened a file"
    # with work-done progress for the whole run, counting what it runs
    [token] = client.progress_tokens("gpuemu: first run: 2 ops")
    await client.wait_for(lambda: isinstance(client.progress(token)[-1], lsp.WorkDoneProgressEnd), what="run's end")
    steps = client.progress(token)
    assert steps[0].message == "running 1 of 2 ops"
    assert any(isinstance(s, lsp.WorkDoneProgressReport) and s.message.startswith("running 2 of 2 ops") for s in steps)
    assert re.fullmatch(r"2 ops in [\d.]+ s: 1 failed, 1 passed", steps[-1].message or ""), steps[-1]

    # the log: a line when the run starts, one per op (verdict, cases, seconds), one when it ends
    await client.wait_for(lambda: any("finished" in t for t in _logs(client)), what="the run's last log line")
    logs = _logs(client)
    assert re.search(r"gpuemu: run (\d+) started: 2 ops \(quick, first run\) in ", logs[0]), logs
    run = re.search(r"run (\d+) started", logs[0]).group(1)  # type: ignore[union-attr]
    per_op = [t for t in logs if re.match(rf"gpuemu: run {run}: (PASS|FAIL) op ", t)]
    assert len(per_op) == 2, logs
    failed = rf"gpuemu: run {run}: FAIL op {OP}: \d/6 cases passed, \d not \([\d.]+ s\)"
    assert any(re.fullmatch(failed, t) for t in per_op), per_op
    assert any(re.fullmatch(rf"gpuemu: run {run}: PASS op {TWIN}: 6/6 cases passed \([\d.]+ s\)", t) for t in per_op)
    assert re.fullmatch(rf"gpuemu: run {run} finished: 2 ops in [\d.]+ s: 1 failed, 1 passed", logs[-1]), logs

    # the store's folder was created with its own .gitignore
    assert (root / ".gpuemu" / ".gitignore").read_text() == "*\n"

    # once: a second start on the same workspace shows the stored results at once and runs nothing
    again = await editor.start(root, {**FAST, "runOnOpen": "quick"})
    shown = await again.wait_op_diagnostic(src, OP, timeout=5)
    assert shown.data["seed"] == diag.data["seed"]
    await asyncio.sleep(1.0)
    assert again.op_states == [] and not again.progress_tokens("first run"), again.op_states


@pytest.mark.asyncio
@pytest.mark.parametrize("editor", ["neovim"], indirect=True)
async def test_first_run_never_in_an_untrusted_workspace_nor_when_off(editor: Any, buggy_ws: Any) -> None:
    root = buggy_ws([OP])
    untrusted = await editor.start(root, {**FAST, "runOnOpen": "quick", "trusted": False})
    off = await editor.start(root, {**FAST, "runOnOpen": "off"})
    older = await editor.start(root, {**FAST, "runOnOpen": "quick", "onOpen": False})  # the older name: off
    for client in (off, older):  # runOnOpen is the one switch: opening files, gpuemu.toml included, runs nothing
        client.open(root / "gpuemu.toml")
        client.open(root / "softmax_tail_mask.py")
    bogus = await editor.start(buggy_ws([OP], name="other"), {**FAST, "runOnOpen": "always"})
    await bogus.wait_for(lambda: any("runOnOpen" in t for t in bogus.message_texts()), what="the option problem")
    assert "quick, off" in next(t for t in bogus.message_texts() if "runOnOpen" in t)
    await asyncio.sleep(3.0)  # longer than the quick run of one op takes here
    for client in (untrusted, off, older):
        assert client.op_states == [] and not _logs(client), (client.op_states, _logs(client))
    assert not (root / ".gpuemu").exists(), "something ran or wrote the store"
    # a bad value keeps the default (quick): that server ran it
    await bogus.wait_state(OP, {"failed"}, timeout=120)


@pytest.mark.asyncio
@pytest.mark.parametrize("editor", ["neovim"], indirect=True)
async def test_trace_setting_and_log_level_and_cancel_of_an_answered_request(editor: Any, buggy_ws: Any) -> None:
    root = buggy_ws([TWIN])
    src = root / "softmax_tail_mask.py"
    quiet = await editor.start(root, {**FAST, "logLevel": "error"})
    quiet.save(src)
    await quiet.wait_state(TWIN, {"passed"})
    await asyncio.sleep(0.3)
    assert not quiet.log_messages and not quiet.traces  # logLevel error; trace off by default

    client = await editor.start(root)
    client.protocol.notify(lsp.SET_TRACE, lsp.SetTraceParams(lsp.TraceValue.Verbose))
    # a cancel for a request that was answered already: routine, never a warning or an error
    await client.request("gpuemu/discoverOps")
    client.protocol.notify(lsp.CANCEL_REQUEST, lsp.CancelParams(id=987654))
    since = len(client.op_states)
    client.save(src)
    await client.wait_state(TWIN, {"passed"}, since=since)
    await client.wait_for(lambda: any("finished" in t.message for t in client.traces), what="trace of the run")
    per_op = [t for t in client.traces if f"PASS op {TWIN}" in t.message]
    assert per_op and per_op[0].verbose and "6/6 passed" in per_op[0].verbose, client.traces
    assert any(f"PASS op {TWIN}" in t for t in _logs(client))
    assert not [m for m in client.log_messages + client.messages if m.type.value <= 2], "an error or warning shown"
    assert client.log_file is not None
    assert "Cancel notification" not in client.log_file.read_text(errors="replace")


def test_heatmap_only_when_it_carries_information() -> None:
    """Errors everywhere make an all-``@`` block: left out, the axes said in words; errors in some columns make a
    block of several shades: shown, with the columns counted exactly."""
    from gpuemu_ls.diagnostics.hover import _where

    def row(grid: list[list[float]], col_runs: list[list[int]]) -> dict[str, Any]:
        feats = {"rows": 8, "bad_rows": 8, "bad_row_runs": [[0, 8]], "cols": 1000, "bad_col_runs": col_runs}
        return {"seed": 3, "detail": json.dumps({"features": {"outputs": {"result": {**feats, "heatmap": grid}}}})}

    everywhere = _where(row([[1.0] * 32 for _ in range(8)], [[0, 1000]]))
    assert not any("```" in line for line in everywhere), everywhere
    assert any(line.endswith("every row; every column") for line in everywhere), everywhere
    tail = _where(row([[0.0] * 31 + [1.0] for _ in range(8)], [[963, 1000]]))
    assert "```text" in tail, tail
    assert any(line.endswith("every row; the last 37 of 1000 columns") for line in tail), tail
