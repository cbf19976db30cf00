"""Diagnostics a user sees after a save: where they sit, what they say, what their data carries;
errors on the raising line; crashing and hanging references; configuration errors while typing."""

from __future__ import annotations

import time
from typing import Any

import pytest
from lspkit import FAST, TINY_HEADER, GpuemuClient, apply_text_edits, line_of, record_latency, tiny_op, uri_of
from lsprotocol import types as lsp

pytestmark = pytest.mark.asyncio

OP, TWIN = "softmax_tail_mask", "softmax_tail_mask_ok"


def toml_entry_lines(text: str, name: str) -> tuple[int, int]:
    """(line of the op's ``[[ops]]`` header, line of its ``name = ...``), 0-based."""
    name_line = line_of(text, f'name = "{name}"')
    header = max(i for i, line in enumerate(text.split("\n")[:name_line]) if line.strip() == "[[ops]]")
    return header, name_line


async def test_save_publishes_one_diagnostic_per_failure_on_the_def_with_its_entry_related(
    editor: Any, buggy_ws: Any, request: Any
) -> None:
    root = buggy_ws([OP, TWIN])
    toml, src = root / "gpuemu.toml", root / "softmax_tail_mask.py"
    client: GpuemuClient = await editor.start(root)
    client.open(src)
    t0 = time.monotonic()
    client.save(src)
    on_def = await client.wait_op_diagnostic(src, OP, code="mismatch")
    record_latency(request, f"save->diagnostics ({editor.kind})", time.monotonic() - t0)
    assert on_def.severity == lsp.DiagnosticSeverity.Error
    assert on_def.source == "gpuemu"

    # related information: the [[ops]] entry, from its header to its name, checked against the file's text
    text = toml.read_text()
    header, name_line = toml_entry_lines(text, OP)
    [related] = on_def.related_information or []
    assert related.location.uri == uri_of(toml)
    assert related.location.range.start == lsp.Position(header, 0)
    assert related.location.range.end.line == name_line
    assert related.location.range.end.character == len(text.split("\n")[name_line].rstrip())
    assert OP in related.message

    data = on_def.data
    assert data["op"] == OP and data["workspace"] == str(root.resolve())
    assert data["failureKind"] == on_def.code
    assert isinstance(data["seed"], int)
    assert data["dtype"] == "float32"  # quick mode: the first dtype only
    assert data["layout"] in ("contiguous", "transposed", "strided")
    assert isinstance(data["distribution"], str) and data["distribution"]
    shape = data["shapes"]["x"]
    assert len(shape) == 2 and shape[1] % 128 != 0, "the tail-mask bug shows only when N % 128 != 0"
    assert data["replay"] == f"gpuemu reproduce --op {OP} --seed {data['seed']}"

    msg = on_def.message
    for part in (
        OP,
        "[mismatch]",
        "max abs err",
        "vs atol=",
        f"seed {data['seed']}",
        "float32",
        f"x={shape}",
        f"layout={data['layout']}",
        f"dist={data['distribution']}",
    ):
        assert part in msg, (part, msg)

    # on the op function: the name in `def softmax_tail_mask(`
    src_text = src.read_text()
    def_line = line_of(src_text, f"def {OP}(")
    col = src_text.split("\n")[def_line].index(OP)
    assert on_def.range == lsp.Range(lsp.Position(def_line, col), lsp.Position(def_line, col + len(OP)))

    # the fixed twin ran too (same file) and passed: no diagnostic of its own anywhere
    twin = await client.wait_state(TWIN, {"passed", "failed", "error"})
    assert twin["state"] == "passed", twin
    await client.wait_state(OP, {"failed"})
    await client.wait_diagnostics(src, lambda ds: any(d.data.get("op") == OP for d in ds))
    assert client.gpuemu_diags(toml, TWIN) == [] and client.gpuemu_diags(src, TWIN) == []
    assert {d.range.start.line for d in client.gpuemu_diags(src)} == {def_line}
    # one problem per failure: gpuemu.toml carries none of the op's (its entry is the related information)
    assert client.gpuemu_diags(toml, OP) == []
    kinds = [d.code for d in client.gpuemu_diags(src, OP)]
    assert len(kinds) == len(set(kinds)), kinds


PICKY_PY = '''\
import numpy as np


def picky(x):
    """Doubles x; refuses odd row lengths."""
    if x.shape[1] % 2 == 1:
        raise ValueError("odd row lengths are not supported")
    return x * np.asarray(2, dtype=x.dtype)


def reference(x):
    return x * 2.0
'''


@pytest.mark.parametrize("editor", ["neovim"], indirect=True)
async def test_exception_lands_on_the_raising_line(editor: Any, workspace: Any) -> None:
    root = workspace(TINY_HEADER + tiny_op("picky", "picky:picky", "picky:reference"), {"picky.py": PICKY_PY})
    src = root / "picky.py"
    client = await editor.start(root)
    client.save(src)
    diag = await client.wait_op_diagnostic(src, "picky")
    raise_line = line_of(PICKY_PY, "raise ValueError")
    assert diag.code == "op_error" and diag.data["failureKind"] == "op_error"
    assert diag.range.start.line == raise_line, diag
    assert diag.range.start.character == PICKY_PY.split("\n")[raise_line].index("raise")
    assert diag.severity == lsp.DiagnosticSeverity.Error
    assert "odd row lengths are not supported" in diag.message
    assert diag.data["shapes"]["x"][1] % 2 == 1
    # once: the toml entry is its related information, not a second problem
    assert diag.related_information and diag.related_information[0].location.uri == uri_of(root / "gpuemu.toml")
    assert client.gpuemu_diags(root / "gpuemu.toml", "picky") == []


CRASH_REF = """\
import ctypes
import json
import sys

request = json.load(sys.stdin)
ctypes.string_at(0)  # reads address 0: SIGSEGV
"""

HANG_REF = """\
import json
import sys

request = json.load(sys.stdin)
while True:
    pass
"""

GOOD_REF = """\
import base64
import json
import sys

import numpy as np

request = json.load(sys.stdin)
x = request["inputs"]["x"]
arr = np.frombuffer(base64.b64decode(x["data"]), dtype=x["dtype"]).reshape(x["shape"]).astype(np.float64)
out = arr * 2.0
print(json.dumps({"shape": list(out.shape), "dtype": "float64",
                  "data": base64.b64encode(out.astype("<f8").tobytes()).decode()}))
"""

DOUBLE_PY = "def double(x):\n    return x * 2\n"


@pytest.mark.parametrize("editor", ["vscode"], indirect=True)
async def test_crashing_and_hanging_references_are_errors_and_the_server_survives(editor: Any, workspace: Any) -> None:
    toml = (
        TINY_HEADER
        + "timeout = 2\n"
        + tiny_op("crashy", "ops:double", "refs/crash_ref.py")
        + tiny_op("hangy", "ops:double", "refs/hang_ref.py")
    )
    root = workspace(toml, {"ops.py": DOUBLE_PY, "refs/crash_ref.py": CRASH_REF, "refs/hang_ref.py": HANG_REF})
    crash, hang = root / "refs/crash_ref.py", root / "refs/hang_ref.py"
    client = await editor.start(root, {**FAST, "iterations": 3, "jobs": 2})
    client.save(crash)
    client.save(hang)

    crashed = await client.wait_op_diagnostic(crash, "crashy")
    assert crashed.code == "reference_crash" and crashed.severity == lsp.DiagnosticSeverity.Error
    assert "SIGSEGV" in crashed.message
    assert crashed.range.start.line in (0, line_of(CRASH_REF, "string_at"))

    # the server answers while the hanging reference is being timed out
    t0 = time.monotonic()
    found = await client.request("gpuemu/discoverOps")
    assert time.monotonic() - t0 < 2
    assert {i["name"] for i in found["workspaces"][0]["items"]} == {"crashy", "hangy"}

    hung = await client.wait_op_diagnostic(hang, "hangy", timeout=90)
    assert hung.code == "reference_timeout" and hung.severity == lsp.DiagnosticSeverity.Error
    assert "2 s" in hung.message
    assert client.gpuemu_diags(root / "gpuemu.toml", "hangy") == []  # on the reference only

    # the server still works: a fixed reference, saved, makes the op pass and clears its diagnostics
    since = len(client.op_states)
    client.save(crash, GOOD_REF)
    state = await client.wait_state("crashy", {"passed", "failed", "error"}, since=since)
    assert state["state"] == "passed", state
    await client.wait_diagnostics(crash, lambda ds: not ds)
    await client.wait_diagnostics(hang, lambda ds: {d.data.get("op") for d in ds} == {"hangy"})


# --- configuration errors -----------------------------------------------------------------------------
GOOD_TOML = TINY_HEADER + tiny_op("double", "ops:double", "ops:reference")
OPS_PY = "def double(x):\n    return x * 2\n\n\ndef reference(x):\n    return x * 2.0\n"

#: (label, broken text, the substring whose line (and column) the diagnostic must point at)
BROKEN = [
    ("unknown key", GOOD_TOML.replace('module = "ops:double"', 'module = "ops:double"\ncolour = "red"'), "colour"),
    ("wrong type", GOOD_TOML.replace("seed = 7", 'seed = "seven"'), '"seven"'),
    ("bad dtype", GOOD_TOML.replace('dtypes = ["float32"]', 'dtypes = ["float32", "float17"]'), '"float17"'),
    ("syntax error", GOOD_TOML.replace('name = "double"', 'name = "double'), 'name = "double'),
]


def _at(text: str, needle: str) -> tuple[int, int]:
    line = line_of(text, needle)
    return line, text.split("\n")[line].index(needle)


def _check_points_at(diags: list[lsp.Diagnostic], text: str, needle: str, label: str) -> None:
    errors = [d for d in diags if d.code == "config-error"]
    assert errors, (label, diags)
    line, col = _at(text, needle)
    hit = [d for d in errors if d.range.start.line == line]
    assert hit, (label, line, [(d.range, d.message) for d in errors])
    d = hit[0]
    assert d.severity == lsp.DiagnosticSeverity.Error and d.source == "gpuemu"
    if label != "syntax error":  # a value or key: the range starts at it (syntax errors point inside the line)
        assert d.range.start.character == col, (label, d.range, col)


@pytest.mark.parametrize("editor", ["neovim"], indirect=True)
async def test_config_errors_while_typing_and_on_save(editor: Any, workspace: Any) -> None:
    root = workspace(GOOD_TOML, {"ops.py": OPS_PY})
    toml = root / "gpuemu.toml"
    client = await editor.start(root, {**FAST, "onSave": False})
    client.open(toml)
    await client.wait_diagnostics(toml, lambda ds: not ds, missing_ok=True)

    # unsaved buffer (didChange only): each error at its position; fixing it clears it
    for label, broken, needle in BROKEN:
        client.change(toml, broken)
        diags = await client.wait_diagnostics(toml, lambda ds: any(d.code == "config-error" for d in ds))
        _check_points_at(diags, broken, needle, label)
        assert toml.read_text() == GOOD_TOML  # nothing was written
        client.change(toml, GOOD_TOML)
        await client.wait_diagnostics(toml, lambda ds: not ds)

    # saved: the file on disk is broken, the diagnostic stays after the save; a fixed save clears it
    label, broken, needle = BROKEN[0]
    client.save(toml, broken)
    await client.wait_diagnostics(toml, lambda ds: any(d.code == "config-error" for d in ds))
    await _settle()
    _check_points_at(client.diags(toml), broken, needle, label)
    found = await client.request("gpuemu/discoverOps")
    assert found["workspaces"] and found["workspaces"][0]["configError"], found
    client.save(toml, GOOD_TOML)
    await client.wait_diagnostics(toml, lambda ds: not ds)
    found = await client.request("gpuemu/discoverOps")
    assert found["workspaces"][0]["configError"] == []
    assert [i["name"] for i in found["workspaces"][0]["items"]] == ["double"]


async def test_did_you_mean_has_a_quick_fix_that_applies_it(editor: Any, workspace: Any) -> None:
    # a misspelt key and a misspelt dtype: each problem's "did you mean" is a preferred quick fix that puts the
    # suggestion in place of the misspelt word (quotes kept); applied, the problems are gone
    root = workspace(GOOD_TOML, {"ops.py": OPS_PY})
    toml = root / "gpuemu.toml"
    client = await editor.start(root, {**FAST, "onSave": False})
    client.open(toml)
    broken = GOOD_TOML.replace('reference = "ops:reference"', 'refrence = "ops:reference"')
    broken = broken.replace('dtypes = ["float32"]', 'dtypes = ["flaot32"]')
    client.save(toml, broken)
    diags = await client.wait_diagnostics(toml, lambda ds: sum("did you mean" in d.message for d in ds) >= 2)
    fixes = {}
    for d in [d for d in diags if "did you mean" in d.message]:
        actions = await client.code_actions(toml, [d])
        fix = [a for a in actions if isinstance(a, lsp.CodeAction) and a.title.startswith("Change ")]
        assert len(fix) == 1 and fix[0].is_preferred, (d.message, actions)
        assert fix[0].kind == lsp.CodeActionKind.QuickFix
        fixes[fix[0].title] = fix[0]
    assert set(fixes) == {"Change 'refrence' to 'reference'", "Change 'flaot32' to 'float32'"}, fixes
    text = broken
    for fix in fixes.values():
        assert fix.edit is not None and fix.edit.changes is not None
        text = apply_text_edits(text, fix.edit.changes[uri_of(toml)])
    assert text == GOOD_TOML, text
    # a toml error reaches the Test Explorer as text naming gpuemu.toml, not the absolute path of the file
    found = await client.request("gpuemu/discoverOps")
    errors = found["workspaces"][0]["configError"]
    assert errors and all(e.startswith("gpuemu.toml:") and str(root) not in e for e in errors), errors
    client.save(toml, text)
    await client.wait_diagnostics(toml, lambda ds: not ds)


async def _settle(seconds: float = 0.5) -> None:
    import asyncio

    await asyncio.sleep(seconds)


STARTUP_PUBLISH_BUG = (
    "BUG: nothing is published when the server starts. initialize() opens each workspace with "
    "add_session(root, publish=False) (server.py:421 at 7ada266) and initialized() calls add_session(root) "
    "again (server.py:450) to publish, but add_session returns early for a known root (server.py:121-122) "
    "without publishing; did_open of gpuemu.toml only rechecks a buffer that differs from the file (server.py:467). "
    "Stored results (a CLI or CI run), configuration errors and the 'not trusted' notice stay invisible until "
    "gpuemu.toml is edited or the store changes. Fix: publish every session at the end of initialized() "
    "(for s in ls.sessions.values(): ls.publish(s)), or let add_session(publish=True) publish a known root."
)


@pytest.mark.parametrize("editor", ["neovim"], indirect=True)
async def test_diagnostics_at_startup(editor: Any, buggy_ws: Any, workspace: Any) -> None:
    from lspkit import start_cli

    # results stored by an earlier CLI run are shown when the editor starts, without a save
    root = buggy_ws([OP])
    proc = await start_cli(root, "test", "--quick", "--iterations", "6")
    assert await proc.wait() == 1
    client = await editor.start(root, {**FAST, "onOpen": False})
    diag = await client.wait_op_diagnostic(root / "softmax_tail_mask.py", OP, timeout=3)
    assert diag.code == "mismatch"

    # a configuration error present at startup
    broken = workspace(BROKEN[0][1], {"ops.py": OPS_PY}, name="broken")
    client = await editor.start(broken)
    diags = await client.wait_diagnostics(broken / "gpuemu.toml", bool, timeout=3)
    assert "config-error" in {d.code for d in diags}

    # the notice of an untrusted workspace
    untrusted = workspace(GOOD_TOML, {"ops.py": OPS_PY}, name="untrusted")
    client = await editor.start(untrusted, {**FAST, "trusted": False})
    diags = await client.wait_diagnostics(untrusted / "gpuemu.toml", bool, timeout=3)
    assert [d.code for d in diags] == ["untrusted"]


#: a correct rmsnorm kernel (float32 sum of squares) and a reference that converts to float64, the common way;
#: boundary values put +-max into each row, where every float32 kernel's sum of squares overflows
EDGE_PY = """\
import numpy as np


def rms(x):
    with np.errstate(all="ignore"):
        xf = np.asarray(x, dtype=np.float32)
        return (xf / np.sqrt((xf * xf).mean(axis=-1, keepdims=True) + np.float32(1e-6))).astype(x.dtype)


def rms_bug(x):
    with np.errstate(all="ignore"):
        xf = np.asarray(x, dtype=np.float32)
        return (xf / np.sqrt((xf * xf).mean(axis=-1, keepdims=True) + np.float32(1e-6)) * 1.01).astype(x.dtype)


def rms_two_ways(x):
    with np.errstate(all="ignore"):
        xf = np.asarray(x, dtype=np.float32)
        y = xf / np.sqrt((xf * xf).mean(axis=-1, keepdims=True) + np.float32(1e-6))
        if xf.flat[0] > 0:  # a second way to go wrong at the same overflow: inf - inf is NaN
            y = y + np.float32(0) * (xf * xf - xf * xf)
        return y.astype(x.dtype)


def reference(x):
    x = x.astype(np.float64)
    return x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + 1e-6)
"""
EDGE_TOML = (
    TINY_HEADER
    + tiny_op("rms", "edge_ops:rms", "edge_ops:reference", extra='distributions = ["boundary"]')
    + tiny_op("rms_bug", "edge_ops:rms_bug", "edge_ops:reference", extra='distributions = ["boundary"]')
    + tiny_op("rms_two_ways", "edge_ops:rms_two_ways", "edge_ops:reference", extra='distributions = ["boundary"]')
).replace("B = { min = 1, max = 8, default = 4 }\nN = { min = 1, max = 64, default = 16 }", "B = [4]\nN = [16]")


async def test_an_edge_finding_is_a_warning_beside_a_bugs_error(editor: Any, workspace: Any) -> None:
    """An edge finding is shown, as a warning with its own code and line, never as the red of a bug; the op's
    state is edge (a pass), while a real bug in the same file stays an error with its diagnosis."""
    root = workspace(EDGE_TOML, {"edge_ops.py": EDGE_PY})
    src = root / "edge_ops.py"
    client = await editor.start(root)
    client.save(src)
    edge = await client.wait_op_diagnostic(src, "rms", code="edge-finding")
    assert edge.severity == lsp.DiagnosticSeverity.Warning, edge
    assert edge.data["tier"] == "edge" and edge.data["status"] == "edge"
    assert "edge finding" in edge.message and "not a bug of this kernel" in edge.message
    assert "a product of two inputs exceeds float32" in edge.message
    assert edge.range.start.line == line_of(EDGE_PY, "def rms(x)")
    verdicts = {"passed", "failed", "edge", "not_judged", "error"}  # a superseded first run says cancelled
    state = await client.wait_state("rms", verdicts)
    assert state["state"] == "edge", state
    bug = await client.wait_op_diagnostic(src, "rms_bug", code="mismatch")
    assert bug.severity == lsp.DiagnosticSeverity.Error and bug.data["tier"] == "bug"
    assert "diagnosis" in bug.message
    assert (await client.wait_state("rms_bug", verdicts))["state"] == "failed"
    # edge findings of two kinds (wrong values where the sum of squares overflows, NaN from inf - inf) are
    # one warning that counts both, not two problems with the same code
    both = await client.wait_op_diagnostic(src, "rms_two_ways", code="edge-finding")
    assert both.severity == lsp.DiagnosticSeverity.Warning
    assert "[mismatch] in " in both.message and "[unexpected_nan] in " in both.message, both.message
    diags = await client.wait_diagnostics(src)
    edges = [d for d in diags if d.code == "edge-finding" and d.data["op"] == "rms_two_ways"]
    assert len(edges) == 1, [d.message for d in edges]
    assert (await client.wait_state("rms_two_ways", verdicts))["state"] == "edge"
