"""Changes the editor did not make (a git checkout): the server's own watcher where the client has no
dynamic file watching (Neovim), the client's didChangeWatchedFiles where it has (VS Code). And workspace
trust: an untrusted workspace runs none of its code."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from lspkit import FAST, TINY_HEADER, GpuemuClient, line_of, tiny_op, uri_of
from lsprotocol import types as lsp

pytestmark = pytest.mark.asyncio

TWIN = "softmax_tail_mask_ok"
#: a default N with a partial last tile, so that a broken twin fails in the few cases of a quick run
PARTIAL_TAIL = {"N = { min = 1, max = 4096, default = 1024 }": "N = { min = 1, max = 4096, default = 1000 }"}
FIXED = "return _softmax_kernel(x, pad_value=-np.inf)"
BROKEN = "return _softmax_kernel(x, pad_value=0.0)  # checked out from a bad branch"


def _checkout_bad_twin(src: Any) -> None:
    text = src.read_text()
    assert text.count(FIXED) == 1
    src.write_text(text.replace(FIXED, BROKEN))  # no LSP message: the editor did not make this change


async def _watching_started(client: GpuemuClient) -> None:
    await client.wait_for(lambda: client.configuration_requests, what="initialized (workspace/configuration)")
    await asyncio.sleep(0.5)


@pytest.mark.parametrize("editor", ["neovim"], indirect=True)
async def test_server_watches_files_itself_without_dynamic_registration(editor: Any, buggy_ws: Any) -> None:
    root = buggy_ws([TWIN], replace=PARTIAL_TAIL)
    src = root / "softmax_tail_mask.py"
    client = await editor.start(root)
    await _watching_started(client)
    assert client.registrations == []  # Neovim offers no dynamic didChangeWatchedFiles: nothing registered
    _checkout_bad_twin(src)
    state = await client.wait_state(TWIN, {"failed", "passed", "error"}, timeout=30)
    assert state["state"] == "failed", state
    diag = await client.wait_op_diagnostic(src, TWIN)
    assert diag.code == "mismatch"
    assert diag.range.start.line == line_of(src.read_text(), f"def {TWIN}(")

    # and back (git checkout -): passes again, diagnostics cleared
    src.write_text(src.read_text().replace(BROKEN, FIXED))
    since = len(client.op_states)
    state = await client.wait_state(TWIN, {"failed", "passed", "error"}, since=since, timeout=30)
    assert state["state"] == "passed"
    await client.wait_diagnostics(src, lambda ds: not ds)


@pytest.mark.parametrize("editor", ["vscode"], indirect=True)
async def test_client_file_watching_is_registered_and_used(editor: Any, buggy_ws: Any) -> None:
    root = buggy_ws([TWIN], replace=PARTIAL_TAIL)
    src = root / "softmax_tail_mask.py"
    client = await editor.start(root)
    await _watching_started(client)
    [reg] = client.registrations
    assert reg.method == lsp.WORKSPACE_DID_CHANGE_WATCHED_FILES
    globs = {w["globPattern"] for w in reg.register_options["watchers"]}
    assert {"**/gpuemu.toml", "**/*.py", "**/*.cu"} <= globs, globs

    # the client watches: the server does not run a watcher of its own next to it
    _checkout_bad_twin(src)
    await asyncio.sleep(1.5)
    assert client.states(TWIN) == [], "the server reacted to a change the client did not report"

    client.workspace_did_change_watched_files(
        lsp.DidChangeWatchedFilesParams(changes=[lsp.FileEvent(uri=uri_of(src), type=lsp.FileChangeType.Changed)])
    )
    state = await client.wait_state(TWIN, {"failed", "passed", "error"}, timeout=30)
    assert state["state"] == "failed", state
    await client.wait_op_diagnostic(src, TWIN)


# --- workspace trust -----------------------------------------------------------------------------------
MARKER_PY = """\
import pathlib

pathlib.Path(__file__).with_name("IMPORTED").write_text("workspace code ran")


def double(x):
    return x * 2


def reference(x):
    return x * 2.0
"""
TRUST_TOML = TINY_HEADER + tiny_op("double", "marker:double", "marker:reference")


@pytest.mark.parametrize("editor", ["vscode"], indirect=True)
async def test_untrusted_workspace_runs_no_code(editor: Any, workspace: Any) -> None:
    root = workspace(TRUST_TOML, {"marker.py": MARKER_PY})
    toml, src, marker = root / "gpuemu.toml", root / "marker.py", root / "IMPORTED"
    ws = str(root.resolve())
    client = await editor.start(root, {**FAST, "trusted": False})

    # why nothing runs, said once on gpuemu.toml (shown once the config is (re)checked: see STARTUP_PUBLISH_BUG)
    client.change(toml, TRUST_TOML + "# edited\n")
    [info] = await client.wait_diagnostics(toml, lambda ds: any(d.code == "untrusted" for d in ds))
    assert info.severity == lsp.DiagnosticSeverity.Information and info.source == "gpuemu"
    assert "not trusted" in info.message

    client.save(src)
    await asyncio.sleep(1.5)
    assert client.op_states == [] and client.progress_log == []
    assert [d.code for d in client.diags(toml)] == ["untrusted"]
    assert client.diags(src) == []

    # configuration problems are still diagnosed (without importing anything)
    client.change(toml, TRUST_TOML.replace('module = "marker:double"', 'module = "marker:double"\ncolour = "red"'))
    diags = await client.wait_diagnostics(toml, lambda ds: any(d.code == "config-error" for d in ds))
    assert [d.range.start.line for d in diags if d.code == "config-error"] == [line_of(client.text(toml), "colour")]
    client.change(toml, TRUST_TOML)
    await client.wait_diagnostics(toml, lambda ds: [d.code for d in ds] == ["untrusted"])

    # commands that run code refuse
    for command, args in (
        ("gpuemu.runOp", {"workspace": ws, "op": "double"}),
        ("gpuemu.runAll", {"workspace": ws}),
        ("gpuemu.reproduce", {"workspace": ws, "op": "double", "seed": 7}),
        ("gpuemu.minimize", {"workspace": ws, "op": "double", "seed": 7}),
        ("gpuemu.calibrate", {"workspace": ws, "op": "double"}),
    ):
        out = await client.execute(command, args)
        assert "error" in out and "trust" in out["error"], (command, out)
    assert any("not trusted" in m for m in client.message_texts())
    out = await client.request("gpuemu/runOps", {})
    assert out["results"] == [] and "trust" in out["error"]
    found = await client.request("gpuemu/discoverOps")
    assert found["workspaces"][0]["trusted"] is False

    hover = await client.hover(toml, line_of(TRUST_TOML, 'name = "double"'), 3)
    assert hover is not None and "no results" in hover.contents.value
    assert client.op_states == [] and client.shown_documents == [] and client.applied_edits == []
    assert not marker.exists(), "workspace code was imported in an untrusted workspace"
    assert not (root / ".gpuemu" / "repro").exists()
