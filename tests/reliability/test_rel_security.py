"""Security: workspace code runs only when trusted and asked; paths stay in the workspace; no shell; an
owner-only store; reproductions without absolute user paths.

Workspace code here announces itself: importing ``kern.py`` or running the reference script creates a
marker file, so "no code ran" is an observation, not an assumption (each test also makes the code run
once it is allowed, to show the marker works).
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import stat
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
import relkit
from kit.ops import DOUBLE_REF_SCRIPT
from kit.store import db_path
from lsprotocol import types as lsp

PACKAGE = relkit.REPO / "gpuemu_ls"

LOUD_PY = """import os

import numpy as np

open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "MARK-imported"), "a").close()


def double(x):
    return x * 2


def wrong(x):
    return x * 3


def reference(x):
    return np.asarray(x, dtype=np.float64) * 2.0
"""

#: the doubling script reference, marking that it ran
LOUD_REF = DOUBLE_REF_SCRIPT.replace("import json\n", "import json\nimport os\n").replace(
    "req = ",
    'open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "MARK-ref-ran"), "a").close()\nreq = ',
)


def loud_ws(root: Path) -> Path:
    toml = relkit.HEADER.format(name="loud", validation="", quick=2)
    toml += relkit.op_block("double", 'module = "kern:double"\nreference = "kern:reference"')
    toml += relkit.op_block("scripted", 'module = "kern:double"\nreference = "refs/ref.py"')
    return relkit.write_ws(root, toml, {"kern.py": LOUD_PY, "refs/ref.py": LOUD_REF})


def marks(root: Path) -> list[str]:
    return sorted(p.name for p in root.rglob("MARK-*"))


# --- trust ---------------------------------------------------------------------------------------
@pytest.mark.asyncio
async def test_untrusted_workspace_runs_no_code_in_the_server(tmp_path: Path) -> None:
    """trusted=false: opening, editing, saving, run requests and every command leave the workspace's code
    alone (no zygote, no worker, no marker); config diagnostics still work. Trusting it later lets runs
    happen; withdrawing trust stops them again."""
    relkit.record("security", cases=1)
    root = loud_ws(tmp_path / "ws")
    opts = {**relkit.QUIET, "trusted": False, "onOpen": True, "onSave": True, "watch": "server"}
    client = await relkit.start_server(root, opts)
    relkit.record("server", started=1)
    try:
        toml, kern, ref = root / "gpuemu.toml", root / "kern.py", root / "refs" / "ref.py"
        for p in (toml, kern, ref):
            relkit.open_doc(client, p)
            relkit.change_doc(client, p, p.read_text() + "\n", 2)
            p.write_text(p.read_text() + "\n")
            relkit.save_doc(client, p)
        client.workspace_did_change_watched_files(
            lsp.DidChangeWatchedFilesParams([lsp.FileEvent(kern.as_uri(), lsp.FileChangeType.Changed)])
        )
        got = await relkit.request(client, "gpuemu/runOps", {})
        assert got.get("results") == [] and "not trusted" in got.get("error", ""), got
        for cmd, args in (
            ("gpuemu.runAll", {}),
            ("gpuemu.runOp", {"op": "double"}),
            ("gpuemu.runQuick", {}),
            ("gpuemu.runThorough", {}),
            ("gpuemu.reproduce", {"op": "double", "seed": 0}),
            ("gpuemu.minimize", {"op": "double", "seed": 0}),
            ("gpuemu.calibrate", {"op": "double"}),
        ):
            res = await relkit.execute(client, cmd, args)
            assert isinstance(res, dict) and ("error" in res), (cmd, res)
        await client.text_document_hover_async(
            lsp.HoverParams(lsp.TextDocumentIdentifier(toml.as_uri()), lsp.Position(10, 0))
        )
        await client.text_document_code_lens_async(lsp.CodeLensParams(lsp.TextDocumentIdentifier(kern.as_uri())))
        await relkit.wait_for(
            lambda: any(d.code == "untrusted" for d in relkit.diags(client, toml)),
            60,
            "the 'not trusted' information",
            client,
        )
        broken = toml.read_text().replace('name = "double"', 'name = "double"\nbogus = 1', 1)
        relkit.change_doc(client, toml, broken, 3)
        await relkit.wait_for(
            lambda: any(d.code == "config-error" and "bogus" in d.message for d in relkit.diags(client, toml)),
            60,
            "a config diagnostic",
            client,
        )
        relkit.change_doc(client, toml, toml.read_text(), 4)
        await relkit.answers(client, root)
        await __import__("asyncio").sleep(1.5)  # a watcher or poller that would start a run has had its chance
        assert marks(root) == [], "workspace code ran in an untrusted workspace"
        assert relkit.worker_pids(client.server_pid) == [] and relkit.zygote_pids(client.server_pid) == []
        assert not db_path(root).exists(), "an untrusted workspace got a store written into it"
        # trust cannot be raised after initialize (test_trust_is_only_ever_lowered_after_initialize tries more)
        client.workspace_did_change_configuration(lsp.DidChangeConfigurationParams({"gpuemu": {"trusted": True}}))
        got = await relkit.request(client, "gpuemu/runOps", {"ids": ["op:scripted"]})
        assert "not trusted" in got.get("error", ""), got
        assert marks(root) == []
        code = await relkit.stop_server(client)
    finally:
        await relkit.force_close(client)
    relkit.clean_exit(code)
    # trusted from the start: the same request runs the code (so the marker works) ...
    client = await relkit.start_server(root, {**opts, "trusted": True})
    relkit.record("server", started=1)
    try:
        got = await relkit.request(client, "gpuemu/runOps", {"ids": ["op:scripted"]})
        assert [r["status"] for r in got["results"]] == ["passed"], got
        assert marks(root) == ["MARK-imported", "MARK-ref-ran"]
        # ... and untrusted again: nothing runs
        for m in root.rglob("MARK-*"):
            m.unlink()
        client.workspace_did_change_configuration(lsp.DidChangeConfigurationParams({"gpuemu": {"trusted": False}}))
        got = await relkit.request(client, "gpuemu/runOps", {"ids": ["op:double"]})
        assert "not trusted" in got.get("error", ""), got
        assert marks(root) == []
        code = await relkit.stop_server(client)
    finally:
        await relkit.force_close(client)
    relkit.clean_exit(code)


async def _start_with_settings(root: Path, init: dict[str, Any], settings: Any) -> Any:
    """A server started with ``init`` as initializationOptions by a client that answers
    ``workspace/configuration`` (section gpuemu) with ``settings``, as Neovim with neoconf would from a
    project-local file."""
    import asyncio

    client = relkit.make_client()
    client.set_configuration(settings, section="gpuemu")
    await client.start_io(*relkit.SERVER_CMD, env=relkit.child_env(), cwd=str(root))
    client.server_pid = client._server.pid
    caps = relkit.CAPS
    caps = lsp.ClientCapabilities(
        window=caps.window,
        text_document=caps.text_document,
        workspace=lsp.WorkspaceClientCapabilities(workspace_folders=True, configuration=True),
    )
    uri = root.resolve().as_uri()
    client.init_result = await asyncio.wait_for(
        client.initialize_session(
            lsp.InitializeParams(
                capabilities=caps,
                root_uri=uri,
                workspace_folders=[lsp.WorkspaceFolder(uri=uri, name=root.name)],
                initialization_options=init,
            )
        ),
        relkit.LONG,
    )
    return client


async def _still_untrusted(client: Any, root: Path, how: str, *, zygote: bool = False) -> None:
    got = await relkit.request(client, "gpuemu/runOps", {"ids": ["op:scripted"]})
    assert "not trusted" in got.get("error", ""), (how, got)
    found = await relkit.request(client, "gpuemu/discoverOps", {})
    assert [w["trusted"] for w in found["workspaces"]] == [False], (how, found)
    res = await relkit.execute(client, "gpuemu.reproduce", {"op": "double", "seed": 0})
    assert "trust" in str(res.get("error", "")), (how, res)
    assert marks(root) == [], f"workspace code ran after trust was raised by {how}"
    assert zygote or relkit.zygote_pids(client.server_pid) == [], f"a zygote started after {how}"


@pytest.mark.asyncio
async def test_trust_is_only_ever_lowered_after_initialize(tmp_path: Path) -> None:
    """``initialize(trusted=false)``: nothing after it raises trust: not a second ``initialize`` (refused, and
    its options, capabilities and folders changed nothing), not a ``workspace/configuration`` answer, not
    ``didChangeConfiguration`` in any form (nested, top level, string, pulled). Each attempt is reported, and
    ``trusted: false`` still lowers trust in a trusted server, for good."""
    import asyncio

    from pygls.exceptions import JsonRpcException

    root = loud_ws(tmp_path / "ws")
    init = {**relkit.QUIET, "trusted": False}
    # 1. the client's configuration answer says trusted (a project-local settings file)
    client = await _start_with_settings(root, init, {"trusted": True, "mode": "thorough"})
    relkit.record("server", started=1)
    try:
        await relkit.wait_for(
            lambda: any("trust" in m.message for m in client.messages), 30, "a message about trust", client
        )
        await _still_untrusted(client, root, "a workspace/configuration answer")
        relkit.record("security", cases=1)
        # 2. a second initialize asking for trust (and other options, capabilities and folders)
        other = tmp_path / "other"
        relkit.good_ws(other)
        again = lsp.InitializeParams(
            capabilities=lsp.ClientCapabilities(),
            root_uri=other.resolve().as_uri(),
            workspace_folders=[lsp.WorkspaceFolder(uri=other.resolve().as_uri(), name="other")],
            initialization_options={"trusted": True, "hover": False, "mode": "thorough"},
        )
        with pytest.raises(JsonRpcException) as refused:
            await asyncio.wait_for(client.initialize_async(again), 30)
        assert refused.value.code == -32600 and "already" in str(refused.value), refused.value
        await _still_untrusted(client, root, "a second initialize")
        found = await relkit.request(client, "gpuemu/discoverOps", {})
        assert [w["root"] for w in found["workspaces"]] == [str(root.resolve())], "the second initialize added"
        hover = await client.text_document_hover_async(
            lsp.HoverParams(lsp.TextDocumentIdentifier((root / "gpuemu.toml").resolve().as_uri()), lsp.Position(9, 0))
        )
        assert hover is not None, "the refused initialize's hover: false took effect"
        relkit.record("security", cases=1)
        # 3. didChangeConfiguration, in every form a client may send it
        for settings in (
            {"gpuemu": {"trusted": True}},
            {"gpuemu": {"trusted": True, "onSave": True}},
            {"gpuemu": {"trusted": "true"}},
            {"gpuemu": {"trusted": 1}},
            None,  # no settings: the server pulls workspace/configuration, whose answer says trusted
        ):
            client.workspace_did_change_configuration(lsp.DidChangeConfigurationParams(settings))
            await _still_untrusted(client, root, f"didChangeConfiguration {settings!r}")
            relkit.record("security", cases=1)
        raised = [m.message for m in client.messages if "trust can only be lowered" in m.message]
        assert len(raised) >= 4, [m.message for m in client.messages]
        code = await relkit.stop_server(client)
    finally:
        await relkit.force_close(client)
    relkit.clean_exit(code)
    # 4. trusted at start: lowering works at once and for good; raising again is refused
    client = await _start_with_settings(root, {**relkit.QUIET, "trusted": True}, {})
    relkit.record("server", started=1)
    try:
        client.workspace_did_change_configuration(lsp.DidChangeConfigurationParams({"gpuemu": {"trusted": False}}))
        found = await relkit.request(client, "gpuemu/discoverOps", {})
        assert [w["trusted"] for w in found["workspaces"]] == [False]
        client.workspace_did_change_configuration(lsp.DidChangeConfigurationParams({"gpuemu": {"trusted": True}}))
        await _still_untrusted(client, root, "raising trust again after lowering it", zygote=True)
        relkit.record("security", cases=2)
        code = await relkit.stop_server(client)
    finally:
        await relkit.force_close(client)
    relkit.clean_exit(code)


#: initializationOptions that must leave a workspace untrusted, each with the key its message names (None: no
#: message, the options are well formed and say false). Every one of them ran workspace code before trust failed
#: closed: a nested object replaced the top-level keys, and a malformed value fell back to the default.
MALFORMED_TRUST: list[tuple[Any, str | None]] = [
    ({"trusted": False, "gpuemu": {"mode": "quick"}}, None),
    ({"gpuemu": {"mode": "quick"}, "trusted": False, "runOnOpen": "quick"}, None),
    ({"trusted": "false"}, "'trusted'"),
    ({"trusted": 0}, "'trusted'"),
    ({"trusted": None}, "'trusted'"),
    ({"trusted": [False]}, "'trusted'"),
    ({"gpuemu": None}, "'gpuemu'"),
    ({"gpuemu": {"trusted": "no"}}, "'trusted'"),
    ({"Trusted": False}, "'Trusted'"),
    ({"gpuemu": {"TRUSTED": True}}, "gpuemu.TRUSTED"),
    ({"gpuemu": {"gpuemu": {"trusted": True}}}, "gpuemu.gpuemu.trusted"),
    ({"is_trusted": False}, "is_trusted"),
    ({"trusted": True, "gpuemu": {"trusted": False}}, None),
    ([{"trusted": False}], "must be an object"),
]


@pytest.mark.asyncio
@pytest.mark.parametrize("init, named", MALFORMED_TRUST, ids=[repr(i) for i, _ in MALFORMED_TRUST])
async def test_malformed_trust_fails_closed(tmp_path: Path, init: Any, named: str | None) -> None:
    """A ``trusted`` that is present but not a JSON boolean, a case or nesting variant of the key, a
    ``gpuemu`` that is not an object, or options that are not an object: untrusted, with a message naming the
    bad key, on a workspace that a trusted server would run at once (runOnOpen, no stored result)."""
    root = loud_ws(tmp_path / "ws")
    run_now = {"runOnOpen": "quick", "onOpen": True}
    if isinstance(init, dict):
        init = {**relkit.QUIET, **run_now, **init}
    client = await relkit.start_server(root, init)
    relkit.record("server", started=1)
    try:
        await _still_untrusted(client, root, f"initializationOptions {init!r}")
        await __import__("asyncio").sleep(1.0)  # the first run (runOnOpen) has had its chance
        assert marks(root) == [] and not db_path(root).exists(), f"workspace code ran with {init!r}"
        if named is not None:
            texts = [m.message for m in client.messages]
            assert any(named in t and "untrusted" in t for t in texts), texts
        relkit.record("security", cases=1)
        code = await relkit.stop_server(client)
    finally:
        await relkit.force_close(client)
    relkit.clean_exit(code)


@pytest.mark.asyncio
async def test_well_formed_trust_in_either_layer_runs(tmp_path: Path) -> None:
    """The control for the test above: ``trusted: true`` under ``gpuemu`` (with other nested options) is
    honoured, so the untrusted verdicts there are the options' doing, not the workspace's."""
    root = loud_ws(tmp_path / "ws")
    client = await relkit.start_server(root, {**relkit.QUIET, "gpuemu": {"trusted": True, "mode": "quick"}})
    try:
        got = await relkit.request(client, "gpuemu/runOps", {"ids": ["op:scripted"]})
        assert [r["status"] for r in got["results"]] == ["passed"], got
        assert marks(root) == ["MARK-imported", "MARK-ref-ran"]
        code = await relkit.stop_server(client)
    finally:
        await relkit.force_close(client)
    relkit.clean_exit(code)


@pytest.mark.asyncio
async def test_malformed_trust_in_later_settings_lowers_it(tmp_path: Path) -> None:
    """After initialize, a malformed ``trusted`` (in a workspace/configuration answer or a
    didChangeConfiguration) lowers trust rather than being ignored: what cannot be read is not trusted."""
    root = loud_ws(tmp_path / "ws")
    client = await _start_with_settings(root, {**relkit.QUIET, "trusted": True}, {"trusted": "false"})
    try:
        await relkit.wait_for(
            lambda: any("'trusted'" in m.message for m in client.messages), 30, "a message naming 'trusted'", client
        )
        await _still_untrusted(client, root, "a configuration answer with trusted = 'false'", zygote=True)
        code = await relkit.stop_server(client)
    finally:
        await relkit.force_close(client)
    relkit.clean_exit(code)
    for settings in ({"gpuemu": {"Trusted": False}}, {"gpuemu": {"trusted": None}}, {"gpuemu": []}):
        client = await _start_with_settings(root, {**relkit.QUIET, "trusted": True}, {})
        try:
            client.workspace_did_change_configuration(lsp.DidChangeConfigurationParams(settings))
            await _still_untrusted(client, root, f"didChangeConfiguration {settings!r}", zygote=True)
            code = await relkit.stop_server(client)
        finally:
            await relkit.force_close(client)
        relkit.clean_exit(code)
        relkit.record("security", cases=1)


#: Text an op, a reference or any process writing the store controls, as markdown that would act if rendered:
#: command links (one with a gpuemu-looking name), remote images, raw HTML, autolinks, reference links, table
#: and heading breakers, backticks that close the server's code spans, and newlines.
HOSTILE = (
    "[run me](command:workbench.action.terminal.new) [also](command:gpuemu.reproduce?%5B%5D)"
    " ![px](https://evil.example/p.png) <img src=https://evil.example/q.png> <https://evil.example/r>"
    " [ref][x] | col | ` `` **bold** ~~s~~ &lt;script&gt;\n# heading\n\n[x]: command:evil.ref"
)
HOSTILE_PY = "def evil(x):\n    raise ValueError(" + repr(HOSTILE) + ")\n\n\ndef reference(x):\n    return x * 2.0\n"
_CODE_SPAN = re.compile(r"(`+)[\s\S]*?(?<!`)\1(?!`)")


def live_markup(markdown: str) -> str:
    """What of ``markdown`` a renderer would read as syntax: code spans and fences dropped (verbatim), and every
    backslash-escaped character dropped (literal)."""
    return re.sub(r"\\.", "", _CODE_SPAN.sub("", markdown))


def literal_text(markdown: str) -> str:
    return " ".join(re.sub(r"\\(.)", r"\1", markdown).split())


@pytest.mark.asyncio
async def test_hover_shows_stored_text_as_text_never_as_markup(tmp_path: Path) -> None:
    """An op's exception text and a kernel's lint text (written to the store by the CLI and by another
    process) reach the hover of an untrusted workspace as literal text: no link, command link, image, HTML
    or autolink of theirs is live, the table and the code spans stay intact, and the words are all there."""
    root = relkit.write_ws(
        tmp_path / "ws",
        relkit.HEADER.format(name="md", validation="", quick=2)
        + relkit.op_block("evil", 'module = "hostile:evil"\nreference = "hostile:reference"')
        + '\n[[kernels]]\nname = "k"\nsource = "k.cu"\n',
        {"hostile.py": HOSTILE_PY, "k.cu": "__global__ void k(float *x) { x[0] = 1; }\n"},
    )
    proc = relkit.run_cli(root, "test", "--quick", "--op", "evil", "--no-progress")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    from gpuemu_ls.engine.store.db import Store

    store = Store(db_path(root))
    try:
        run = store.begin_run(
            source="api", mode="lint", seed=None, iterations=None, workspace=root, config_hash="", command=""
        )
        detail = {
            "summary": HOSTILE,
            "resources": {"registers": HOSTILE, "spills": 0},
            "findings": [{"severity": HOSTILE, "code": "x`y` ``z", "message": HOSTILE}],
        }
        store.add_op_result(run, "k", "kernel", "failed", message=HOSTILE, diagnosis=HOSTILE, detail=detail)
        store.finish_run(run, "failed")
    finally:
        store.close()
    client = await relkit.start_server(root, {**relkit.QUIET, "trusted": False})
    relkit.record("server", started=1)
    toml = root / "gpuemu.toml"
    try:
        hovers = {}
        for what, needle in (("op", 'name = "evil"'), ("kernel", 'name = "k"')):
            got = await client.text_document_hover_async(
                lsp.HoverParams(
                    lsp.TextDocumentIdentifier(toml.resolve().as_uri()),
                    lsp.Position(relkit.line_of(toml, needle) - 1, 0),  # line_of is 1-based
                )
            )
            assert got is not None and got.contents.kind == lsp.MarkupKind.Markdown, what
            hovers[what] = got.contents.value
        code = await relkit.stop_server(client)
    finally:
        await relkit.force_close(client)
    relkit.clean_exit(code)
    for what, text in hovers.items():
        live = live_markup(text)
        for syntax in ("](", "![", "]:", "\n#", "~~", "&lt;", "**b"):
            assert syntax not in live, f"{what} hover: {syntax!r} is live markup in\n{text}"
        assert not re.search(r"<[A-Za-z/!?]", live), f"{what} hover: a live tag or autolink in\n{text}"
        words = literal_text(text)
        pieces = ("command:workbench.action.terminal.new", "https://evil.example/p.png", "<img src=", "| col |")
        # the op hover quotes the error as its diagnosis does: the message's first line, shortened
        for piece in pieces[:3] if what == "op" else pieces:
            assert piece in words, f"{what} hover lost {piece!r}:\n{text}"
        relkit.record("security", cases=1)
    # the kernel's table keeps its two columns: a stored "|" does not add cells
    rows = [line for line in hovers["kernel"].splitlines() if line.startswith("| registers")]
    assert len(rows) == 1 and len(re.findall(r"(?<!\\)\|", rows[0])) == 3, rows


def test_cli_runs_workspace_code_only_when_asked(tmp_path: Path) -> None:
    """Listing, reporting, help and lint-without-kernels never import the workspace; test and --check do."""
    relkit.record("security", cases=1)
    root = loud_ws(tmp_path / "ws")
    for args in (
        ("ops",),
        ("ops", "--format", "json"),
        ("failures",),
        ("failures", "--all"),
        ("report",),
        ("report", "--format", "sarif"),
        ("--help",),
        ("test", "--help"),
        ("ci", "--help"),
        ("lint",),
        ("baseline", "show", "nope"),
    ):
        proc = relkit.run_cli(root, *args)
        assert proc.returncode in (0, 1, 2) and relkit.no_traceback(proc.stdout + proc.stderr), (args, proc.stderr)
        assert marks(root) == [], f"`gpuemu {' '.join(args)}` ran workspace code"
    helped = subprocess.run(
        [*relkit.CHECK, "--help"], capture_output=True, text=True, cwd=str(root), env=relkit.child_env(), timeout=120
    )
    assert helped.returncode == 0 and marks(root) == []
    gate = relkit.run_check(root, "--quick", "--no-progress")
    assert gate.returncode == 0, gate.stdout + gate.stderr
    assert marks(root) == ["MARK-imported", "MARK-ref-ran"]


# --- paths ---------------------------------------------------------------------------------------
OUTSIDE_REF = LOUD_REF.replace("MARK-ref-ran", "MARK-outside-ran")


def _outside_cases(tmp: Path) -> dict[str, tuple[str, str]]:
    """name -> (replacement of the reference line, what the config must say)."""
    outside = tmp / "elsewhere"
    return {
        "parent_relative": ('reference = "../elsewhere/ref.py"', "resolves outside the workspace"),
        "absolute": (f'reference = "{outside / "ref.py"}"', "resolves outside the workspace"),
        "dotdot_inside_then_out": ('reference = "refs/../../elsewhere/ref.py"', "resolves outside the workspace"),
        "symlink_escape": ('reference = "refs/link.py"', "resolves outside the workspace"),
        "op_script_outside": ('op_script = "../elsewhere/ref.py"', "resolves outside the workspace"),
        "kernel_source_outside": ('source = "../elsewhere/k.cu"', "resolves outside the workspace"),
    }


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def path_server(module_tmp: Path) -> Any:
    home = module_tmp / "server-home"
    home.mkdir(exist_ok=True)
    client = await relkit.start_server(home)
    relkit.record("server", started=1)
    yield client
    code = await relkit.stop_server(client)
    relkit.clean_exit(code)


@pytest.mark.asyncio(loop_scope="module")
@pytest.mark.parametrize(
    "case",
    [
        "parent_relative",
        "absolute",
        "dotdot_inside_then_out",
        "symlink_escape",
        "op_script_outside",
        "kernel_source_outside",
    ],
)
async def test_paths_must_resolve_inside_the_workspace(module_tmp: Path, path_server: Any, case: str) -> None:
    relkit.record("security", cases=1)
    tmp = module_tmp / case
    root = loud_ws(tmp / "ws")
    relkit.write_ws(tmp / "elsewhere", "", {"ref.py": OUTSIDE_REF, "k.cu": "__global__ void k(float* x) {}\n"})
    (tmp / "elsewhere" / "gpuemu.toml").unlink()
    (root / "refs" / "link.py").symlink_to(tmp / "elsewhere" / "ref.py")
    line_text, says = _outside_cases(tmp)[case]
    toml = root / "gpuemu.toml"
    old = (
        'reference = "refs/ref.py"'
        if case != "op_script_outside"
        else 'module = "kern:double"\nreference = "refs/ref.py"'
    )
    new = line_text if case != "op_script_outside" else f'{line_text}\nreference = "kern:reference"'
    text = toml.read_text()
    assert old in text
    text = (
        text.replace(old, new, 1) if case != "kernel_source_outside" else text + f'\n[[kernels]]\nname = "k"\n{new}\n'
    )
    toml.write_text(text)
    line = relkit.line_of(toml, line_text)
    for proc in (relkit.run_cli(root, "test", "--quick", "--no-progress"), relkit.run_check(root, "--quick")):
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert f"{toml}:{line}:" in proc.stderr and says in proc.stderr, proc.stderr
        assert "allow_external_paths" in proc.stderr
    relkit.open_doc(path_server, toml)
    await relkit.wait_for(
        lambda: [
            d
            for d in relkit.diags(path_server, toml)
            if d.code == "config-error" and d.range.start.line + 1 == line and says in d.message
        ],
        60,
        "the outside-path diagnostic",
        path_server,
    )
    got = await relkit.request(path_server, "gpuemu/runOps", {"workspace": str(root)})
    assert got["results"] == [], got
    assert marks(tmp) == [], "code outside the workspace ran"
    # explicitly allowed: it runs
    toml.write_text(toml.read_text().replace("[project]\n", "[project]\nallow_external_paths = true\n", 1))
    proc = relkit.run_cli(root, "test", "--quick", "--no-progress")
    assert proc.returncode in (0, 1) and relkit.no_traceback(proc.stdout + proc.stderr), proc.stdout + proc.stderr
    assert "error: " not in proc.stderr, proc.stderr
    if case != "kernel_source_outside":  # `gpuemu test` runs ops; the kernel is only linted
        assert "MARK-outside-ran" in marks(tmp)


def test_no_shell_anywhere_in_the_package() -> None:
    """No shell=True, os.system, os.popen, create_subprocess_shell; subprocess commands are argument lists."""
    relkit.record("security", cases=1)
    calls: list[str] = []
    problems = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            where = f"{path.relative_to(relkit.REPO)}:{node.lineno}"
            name = ast.unparse(node.func)
            if name in (
                "os.system",
                "os.popen",
                "asyncio.create_subprocess_shell",
                "subprocess.getoutput",
                "subprocess.getstatusoutput",
            ) or name.endswith(("commands.getoutput",)):
                problems.append(f"{where}: {name}")
            for kw in node.keywords:
                if kw.arg == "shell" and not (isinstance(kw.value, ast.Constant) and kw.value.value is False):
                    problems.append(f"{where}: shell={ast.unparse(kw.value)}")
            if name.startswith("subprocess.") and name.split(".")[1] in (
                "run",
                "Popen",
                "call",
                "check_call",
                "check_output",
            ):
                calls.append(where)
                first = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "args"), None)
                if isinstance(first, (ast.Constant, ast.JoinedStr, ast.BinOp)):
                    problems.append(f"{where}: a command string, not an argument list")
    # the scan sees the package: it found the calls every run makes (a worker interpreter's start, the CUDA tools)
    found = {site.rsplit(":", 1)[0] for site in calls}
    known = {"gpuemu_ls/engine/run/zygote.py", "gpuemu_ls/engine/cuda/compile.py"}
    assert known <= found, f"the scan found subprocess calls only in {sorted(found)}: it is not looking at the package"
    assert problems == []


OP_SCRIPT = """import base64
import json
import sys

import numpy as np

req = json.load(sys.stdin)
x = req["inputs"]["x"]
a = (np.frombuffer(base64.b64decode(x["data"]), dtype=x["dtype"]).reshape(x["shape"]) * 2).astype(x["dtype"])
print(json.dumps({"outputs": {"result": {"shape": list(a.shape), "dtype": x["dtype"],
                                         "data": base64.b64encode(a.tobytes()).decode()}}}))
"""
SHELLY = "ws $(touch PWNED1) `touch PWNED2`; touch PWNED3 && echo"


def test_shell_metacharacters_in_paths_and_names_are_inert(tmp_path: Path) -> None:
    """A workspace and scripts whose names are shell commands: test, reproduce and the standalone
    reproduction all run, and nothing executes the names."""
    relkit.record("security", cases=1)
    root = tmp_path / SHELLY
    toml = relkit.HEADER.format(name="shelly", validation="", quick=1)
    toml += relkit.op_block("wrong", 'module = "kern:wrong"\nreference = "refs/r $(touch PWNED4);.py"')
    toml += relkit.op_block("scripted", 'op_script = "ops/op `touch PWNED5`.py"\nreference = "kern:reference"')
    relkit.write_ws(
        root,
        toml,
        {
            "kern.py": relkit.GOOD_PY + "\n\ndef wrong(x):\n    return x * 3\n",
            "refs/r $(touch PWNED4);.py": LOUD_REF.replace("MARK-ref-ran", "MARK-r"),
            "ops/op `touch PWNED5`.py": OP_SCRIPT,
        },
    )
    cli = relkit.run_cli(root, "test", "--quick", "--no-progress")
    assert cli.returncode == 1 and relkit.no_traceback(cli.stdout + cli.stderr), cli.stdout + cli.stderr
    assert "FAIL    wrong" in cli.stdout and "PASS    scripted" in cli.stdout, cli.stdout
    seed = re.search(r"reproduce --op wrong --seed (\d+)", cli.stdout)
    assert seed
    rep = relkit.run_cli(root, "reproduce", "--op", "wrong", "--seed", seed.group(1))
    assert rep.returncode == 1 and relkit.no_traceback(rep.stdout + rep.stderr), rep.stderr
    repro = next((root / ".gpuemu" / "repro").glob("wrong_*.py"))
    ran = subprocess.run(
        [relkit.PY, str(repro)], capture_output=True, text=True, cwd=str(root), timeout=120, env=relkit.child_env()
    )
    assert ran.returncode == 1 and "elements off tolerance" in ran.stdout + ran.stderr, ran.stdout + ran.stderr
    pwned = list(tmp_path.rglob("PWNED*")) + list(Path.cwd().glob("PWNED*"))
    assert pwned == [], f"a shell ran a file name: {pwned}"


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc on PATH (pip install nvidia-cuda-nvcc)")
def test_kernel_lint_hands_no_name_to_a_shell(tmp_path: Path) -> None:
    relkit.record("security", cases=1)
    root = tmp_path / SHELLY
    toml = relkit.HEADER.format(name="shelly", validation="", quick=1)
    toml += '\n[[kernels]]\nname = "scale"\nsource = "k $(touch PWNED6);.cu"\n'
    relkit.write_ws(
        root, toml, {"k $(touch PWNED6);.cu": "__global__ void scale(float* x) { x[threadIdx.x] *= 2.0f; }\n"}
    )
    lint = relkit.run_cli(root, "lint", timeout=300)
    assert lint.returncode in (0, 1) and relkit.no_traceback(lint.stdout + lint.stderr), lint.stderr
    pwned = list(tmp_path.rglob("PWNED*")) + list(Path.cwd().glob("PWNED*"))
    assert pwned == [], f"a shell ran a file name: {sorted(p.name for p in pwned)}"


# --- the store's permissions ----------------------------------------------------------------------
def _mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


@pytest.mark.asyncio
async def test_store_is_created_owner_only_even_with_a_permissive_umask(tmp_path: Path) -> None:
    relkit.record("security", cases=1)

    def umask0() -> None:
        os.umask(0)

    root = relkit.good_ws(tmp_path / "ws")
    proc = relkit.run_cli(root, "test", "--quick", "--no-progress", preexec_fn=umask0)
    assert proc.returncode == 0, proc.stderr
    db = db_path(root)
    assert _mode(db.parent) == 0o700, oct(_mode(db.parent))
    assert _mode(db) == 0o600, oct(_mode(db))
    elsewhere = tmp_path / "custom" / "deep" / "store.db"
    proc = relkit.run_cli(
        root,
        "test",
        "--quick",
        "--no-progress",
        preexec_fn=umask0,
        env=relkit.child_env({"GPUEMU_STORE": str(elsewhere)}),
    )
    assert proc.returncode == 0, proc.stderr
    assert _mode(elsewhere) == 0o600 and _mode(elsewhere.parent) == 0o700
    # while a server holds the store open, its WAL and shared-memory files exist: owner-only too
    client = await relkit.start_server(root, preexec_fn=umask0)
    relkit.record("server", started=1)
    try:
        got = await relkit.request(client, "gpuemu/runOps", {"ids": ["op:double"]})
        assert [r["status"] for r in got["results"]] == ["passed"]
        side = [db.parent / (db.name + s) for s in ("-wal", "-shm")]
        assert all(p.exists() for p in side), list(db.parent.iterdir())
        assert {p.name: oct(_mode(p)) for p in side} == {p.name: oct(0o600) for p in side}
        for p in db.parent.rglob("*"):
            assert not (_mode(p) & 0o077) or (p.is_dir() and _mode(db.parent) == 0o700), (p, oct(_mode(p)))
        code = await relkit.stop_server(client)
    finally:
        await relkit.force_close(client)
    assert code == 0


# --- reproductions ----------------------------------------------------------------------------------
def _absolute_paths(text: str, forbidden: list[str]) -> list[str]:
    found = [f for f in forbidden if f and f in text]
    found += re.findall(r"(?<![\w.])/(?:tmp|home|root|Users|work)/[^\s'\"]*", text)
    return found


@pytest.mark.asyncio
async def test_reproductions_hold_no_absolute_user_paths(tmp_path: Path) -> None:
    """The standalone reproduction (CLI and server) names no absolute path, and runs after the workspace moves."""
    relkit.record("security", cases=1)
    root = loud_ws(tmp_path / "home" / "alice" / "kernels")
    toml = root / "gpuemu.toml"
    toml.write_text(
        toml.read_text().replace(
            'module = "kern:double"\nreference = "refs/ref.py"', 'module = "kern:wrong"\nreference = "refs/ref.py"'
        )
    )
    proc = relkit.run_cli(root, "test", "--quick", "--no-progress")
    assert proc.returncode == 1
    seed = re.search(r"reproduce --op scripted --seed (\d+)", proc.stdout)
    assert seed, proc.stdout
    rep = relkit.run_cli(root, "reproduce", "--op", "scripted", "--seed", seed.group(1))
    assert rep.returncode == 1, rep.stdout + rep.stderr
    client = await relkit.start_server(root)
    relkit.record("server", started=1)
    try:
        res = await relkit.execute(
            client, "gpuemu.reproduce", {"workspace": str(root), "op": "scripted", "seed": int(seed.group(1)) + 1000}
        )
        assert isinstance(res, dict) and res.get("repro"), res
        await relkit.stop_server(client)
    finally:
        await relkit.force_close(client)
    forbidden = [str(root), str(tmp_path), str(Path.home()), str(relkit.REPO), os.getcwd()]
    files = sorted((root / ".gpuemu" / "repro").iterdir())
    assert len([f for f in files if f.suffix == ".py"]) == 2, files
    for f in files:
        if f.suffix == ".py":
            text = f.read_text(encoding="utf-8")
        else:
            with zipfile.ZipFile(f) as z:
                text = " ".join(z.namelist()) + " ".join(z.read(n).decode("latin-1") for n in z.namelist())
        assert _absolute_paths(text, forbidden) == [], (f.name, _absolute_paths(text, forbidden))
    moved = tmp_path / "bob's copy" / "kernels"
    shutil.copytree(root, moved)
    shutil.rmtree(root)
    for f in sorted((moved / ".gpuemu" / "repro").glob("*.py")):
        ran = subprocess.run(
            [relkit.PY, str(f)], capture_output=True, text=True, cwd=str(tmp_path), timeout=120, env=relkit.child_env()
        )
        assert ran.returncode == 1 and "elements off tolerance" in ran.stdout + ran.stderr, ran.stdout + ran.stderr


@pytest.mark.parametrize(
    "script",
    [
        'refs/x"""; open("PWNED", "w").close(); """.py',  # closes the docstring, would run code
        "refs/C\\Users\\N\\x.py",  # a Windows-looking name: \U and \N are escapes in a Python string
        "refs/tail\\.py",  # a backslash right before the quote that follows
    ],
    ids=["triple-quote", "backslash-U-N", "trailing-backslash"],
)
def test_a_reproduction_made_from_hostile_names_is_data_not_code(tmp_path: Path, script: str) -> None:
    """Names from the user's world (a reference script's file name) enter the standalone reproduction as data:
    no code runs from them, and the file is valid Python that exits with its verdict (1: the bug is there)."""
    root = loud_ws(tmp_path / "ws")
    (root / script).parent.mkdir(parents=True, exist_ok=True)
    (root / script).write_text((root / "refs" / "ref.py").read_text())
    toml = root / "gpuemu.toml"
    toml.write_text(
        toml.read_text().replace(
            'module = "kern:double"\nreference = "refs/ref.py"', f"module = \"kern:wrong\"\nreference = '{script}'"
        )
    )
    rep = relkit.run_cli(root, "reproduce", "--op", "scripted", "--seed", "3")
    assert rep.returncode == 1, rep.stdout + rep.stderr
    (repro,) = (root / ".gpuemu" / "repro").glob("scripted_3.py")
    ast.parse(repro.read_text(encoding="utf-8"))  # valid Python
    ran = subprocess.run([sys.executable, str(repro)], capture_output=True, text=True, cwd=root, timeout=120)
    assert ran.returncode == 1 and "FAILED" in ran.stdout, ran.stdout + ran.stderr
    assert not list(tmp_path.rglob("PWNED")), "a file name ran as code in the reproduction"
    relkit.record("security", cases=1)
