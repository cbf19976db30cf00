"""Initialization: what the server advertises, how it treats its options, and the TCP transport."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from lspkit import FAST, TINY_HEADER, tiny_op

pytestmark = pytest.mark.asyncio

OPS_PY = "def double(x):\n    return x * 2\n\n\ndef reference(x):\n    return x * 2.0\n"
TOML = TINY_HEADER + tiny_op("double", "ops:double", "ops:reference")
COMMANDS = {
    "gpuemu.reproduce",
    "gpuemu.minimize",
    "gpuemu.calibrate",
    "gpuemu.runOp",
    "gpuemu.runAll",
    "gpuemu.runQuick",
    "gpuemu.runThorough",
}


async def test_capabilities_advertise_test_explorer_and_enabled_features(editor: Any, workspace: Any) -> None:
    root = workspace(TOML, {"ops.py": OPS_PY})
    client = await editor.start(root)
    caps = client.init_result.capabilities
    assert caps.experimental == {"gpuemu": {"discoverOps": True, "runOps": True, "opState": True, "protocolVersion": 1}}
    assert caps.hover_provider and caps.code_lens_provider is not None and caps.code_action_provider
    assert set(caps.execute_command_provider.commands) == COMMANDS
    assert client.init_result.server_info.name == "gpuemu-ls"
    assert client.messages == []  # nothing to complain about


@pytest.mark.parametrize("editor", ["vscode"], indirect=True)
async def test_disabled_features_are_not_registered(editor: Any, workspace: Any) -> None:
    root = workspace(TOML, {"ops.py": OPS_PY})
    client = await editor.start(root, {"gpuemu": {**FAST, "hover": False, "codeLens": False}})  # nested form
    caps = client.init_result.capabilities
    assert caps.hover_provider is None
    assert caps.code_lens_provider is None
    assert caps.code_action_provider  # still on
    assert caps.experimental["gpuemu"]["discoverOps"] is True


@pytest.mark.parametrize("editor", ["neovim"], indirect=True)
async def test_bad_options_are_reported_and_the_server_still_works(editor: Any, workspace: Any) -> None:
    root = workspace(TOML, {"ops.py": OPS_PY})
    client = await editor.start(
        root, {"mode": "quick", "colour": "red", "iterations": "many", "onOpen": False, "runOnOpen": "off"}
    )
    await client.wait_for(lambda: len(client.messages) >= 2, timeout=15, what="two showMessage")
    texts = client.message_texts()
    unknown = [t for t in texts if "'colour'" in t]
    wrong = [t for t in texts if "'iterations'" in t]
    assert unknown and "unknown" in unknown[0], texts
    assert wrong and "many" in wrong[0] and "positive integer" in wrong[0], texts
    assert all(m.type.value <= 2 for m in client.messages)  # error or warning, not a log line

    found = await client.request("gpuemu/discoverOps")
    assert [i["name"] for i in found["workspaces"][0]["items"]] == ["double"]
    client.save(root / "ops.py")
    state = await client.wait_state("double", {"passed", "failed", "error"})
    assert state["state"] == "passed"
    assert state["total"] != "many" and state["total"] > 0  # the bad value was not used


@pytest.mark.parametrize("editor", ["neovim"], indirect=True)
async def test_tcp_transport(editor: Any, buggy_ws: Any) -> None:
    root = buggy_ws(["softmax_tail_mask"])
    client = await editor.start(root, tcp=True)
    assert client.init_result.capabilities.experimental["gpuemu"]["runOps"] is True
    src = root / "softmax_tail_mask.py"
    client.save(src)
    diag = await client.wait_op_diagnostic(src, "softmax_tail_mask")
    assert diag.code == "mismatch" and diag.source == "gpuemu"
    await asyncio.sleep(0)
