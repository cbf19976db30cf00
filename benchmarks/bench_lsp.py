"""Benchmarks 4-5: the language server through a real LSP client (pytest-lsp's, over stdio)."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from common import PYTHON, ROOT, median, pct, result, write_workspace
from lsprotocol import types as lsp
from pytest_lsp import client_capabilities, make_test_lsp_client

SLOW_TOML = """
[validation]
dtypes = ["float32"]
distributions = ["normal"]
timeout = 60
[[ops]]
name = "slow"
module = "slow:op"
reference = "slow:ref"
iterations = 150
[ops.inputs.x]
shape = ["N"]
[ops.dims]
N = 64
"""

SLOW_PY = """
import time
import numpy as np


def op(x):
    time.sleep(0.2)  # a kernel that takes a while: 150 cases are a 30 s validation
    return np.array(x, copy=True)


def ref(x):
    return x
"""


async def _client(root: Path, options: dict[str, Any]) -> Any:
    client = make_test_lsp_client()
    states: list[tuple[float, dict[str, Any]]] = []

    @client.feature("gpuemu/opState")
    def on_state(params: Any) -> None:
        states.append((time.perf_counter(), params))

    @client.feature(lsp.CLIENT_REGISTER_CAPABILITY)
    def register(params: Any) -> None:
        return None

    @client.feature(lsp.WORKSPACE_CODE_LENS_REFRESH)
    def refresh_lenses(params: Any) -> None:  # VS Code's capabilities declare it; answer as VS Code does
        return None

    await client.start_io(PYTHON, "-m", "gpuemu_ls.server")
    await client.initialize_session(
        lsp.InitializeParams(
            capabilities=client_capabilities("visual-studio-code"),
            root_uri=root.as_uri(),
            workspace_folders=[lsp.WorkspaceFolder(root.as_uri(), root.name)],
            initialization_options=options,
        )
    )
    client.states = states  # type: ignore[attr-defined]
    return client


def _state(s: Any, key: str) -> Any:
    return s.get(key) if isinstance(s, dict) else getattr(s, key, None)


async def _save_to_diagnostics(quick: bool) -> dict[str, Any]:
    saves = 4 if quick else 12
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "quickstart"
        shutil.copytree(ROOT / "examples" / "quickstart", root, ignore=shutil.ignore_patterns(".gpuemu"))
        client = await _client(root, {"mode": "quick", "onOpen": False})
        src = root / "softmax.py"
        toml = (root / "gpuemu.toml").as_uri()
        client.text_document_did_open(
            lsp.DidOpenTextDocumentParams(lsp.TextDocumentItem(src.as_uri(), "python", 1, src.read_text()))
        )
        latencies = []
        for i in range(saves):
            published: list[float] = []
            client.diagnostics.pop(toml, None)
            start = time.perf_counter()
            n_states = len(client.states)
            client.text_document_did_save(lsp.DidSaveTextDocumentParams(lsp.TextDocumentIdentifier(src.as_uri())))
            deadline = start + 30
            while time.perf_counter() < deadline:
                await asyncio.sleep(0.005)
                finals = [t for t, s in client.states[n_states:] if _state(s, "state") in ("passed", "failed", "error")]
                if finals and toml in client.diagnostics:
                    published.append(time.perf_counter())
                    break
            assert published, f"save {i}: no diagnostics within 30 s"
            latencies.append(published[0] - start)
            await asyncio.sleep(0.3)
        await client.shutdown_session()
    p50 = median(latencies)
    return result(
        4,
        "language server: save to published diagnostics, examples/quickstart quick mode (softmax, "
        "16 cases), real LSP client",
        p50,
        "s (p50)",
        "p50 < 1.0 s",
        p50 < 1.0,
        p90=round(pct(latencies, 90), 3),
        runs=len(latencies),
        all=[round(x, 3) for x in latencies],
    )


async def _latency_while_validating(quick: bool) -> dict[str, Any]:
    requests = 40 if quick else 200
    with tempfile.TemporaryDirectory() as tmp:
        root = write_workspace(Path(tmp) / "slow", SLOW_TOML, {"slow.py": SLOW_PY})
        client = await _client(root, {"mode": "thorough", "onOpen": False})
        toml = root / "gpuemu.toml"
        text = toml.read_text()
        client.text_document_did_open(
            lsp.DidOpenTextDocumentParams(lsp.TextDocumentItem(toml.as_uri(), "toml", 1, text))
        )
        run = asyncio.ensure_future(
            client.protocol.send_request_async("gpuemu/runOps", {"ids": ["op:slow"], "mode": "thorough"})
        )
        await asyncio.sleep(1.0)  # the validation is under way
        hover, action = [], []
        line = next(i for i, s in enumerate(text.splitlines()) if s.startswith("name"))
        for _ in range(requests):
            t0 = time.perf_counter()
            await client.text_document_hover_async(
                lsp.HoverParams(lsp.TextDocumentIdentifier(toml.as_uri()), lsp.Position(line, 2))
            )
            hover.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            await client.text_document_code_action_async(
                lsp.CodeActionParams(
                    lsp.TextDocumentIdentifier(toml.as_uri()),
                    lsp.Range(lsp.Position(line, 0), lsp.Position(line, 1)),
                    lsp.CodeActionContext(diagnostics=[]),
                )
            )
            action.append(time.perf_counter() - t0)
            await asyncio.sleep(0.02)
        running = not run.done()
        run.cancel()
        await client.shutdown_session()
    p99 = max(pct(hover, 99), pct(action, 99))
    return result(
        5,
        "language server: hover and code-action latency while a 30 s validation runs",
        p99 * 1e3,
        "ms (p99)",
        "p99 < 50 ms",
        p99 < 0.05 and running,
        hover_p50_ms=round(median(hover) * 1e3, 2),
        hover_p99_ms=round(pct(hover, 99) * 1e3, 2),
        action_p50_ms=round(median(action) * 1e3, 2),
        action_p99_ms=round(pct(action, 99) * 1e3, 2),
        requests=requests,
        validation_still_running=running,
    )


def save_to_diagnostics(quick: bool) -> dict[str, Any]:
    return asyncio.run(_save_to_diagnostics(quick))


def latency_while_validating(quick: bool) -> dict[str, Any]:
    return asyncio.run(_latency_while_validating(quick))


BENCHMARKS = {4: save_to_diagnostics, 5: latency_while_validating}
