"""What a user can do from a failure: code actions (reproduce, minimize, pin the seed, calibrate), the
commands behind them, the run commands, and the hover and code lens that show the results."""

from __future__ import annotations

import asyncio
import difflib
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import tomllib
from lspkit import FAST, TINY_HEADER, GpuemuClient, apply_text_edits, line_of, tiny_op, uri_of
from lsprotocol import types as lsp

from gpuemu_ls.engine.config.keys import PLAN

pytestmark = pytest.mark.asyncio

OP, TWIN = "softmax_tail_mask", "softmax_tail_mask_ok"


async def failing(editor: Any, buggy_ws: Any, ops: tuple[str, ...] = (OP, TWIN), **opts: Any):
    """A server on a workspace where OP has just failed after a save: (client, root, its one diagnostic (on the
    def), the range of its [[ops]] entry in gpuemu.toml (the diagnostic's related information))."""
    root = buggy_ws(list(ops))
    src = root / "softmax_tail_mask.py"
    client: GpuemuClient = await editor.start(root, {**FAST, **opts})
    client.save(src)
    for name in ops:  # the save's runs are over (the open's run, superseded, may have published first)
        await client.wait_state(name, {"failed"} if name == OP else {"passed"})
    on_def = await client.wait_op_diagnostic(src, OP, code="mismatch")
    assert on_def.related_information, on_def
    entry = on_def.related_information[0].location
    assert entry.uri == uri_of(root / "gpuemu.toml")
    return client, root, on_def, entry.range


def _by_title(actions: list[Any], start: str) -> lsp.CodeAction:
    found = [a for a in actions if a.title.startswith(start)]
    assert len(found) == 1, (start, [a.title for a in actions])
    assert isinstance(found[0], lsp.CodeAction), f"{start!r} came back as {type(found[0]).__name__}"
    return found[0]


def _run_repro(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-I", str(path)], cwd=path.parent, capture_output=True, text=True, timeout=120, check=False
    )


async def test_code_actions_offered_for_a_failure(editor: Any, buggy_ws: Any) -> None:
    client, root, on_def, _ = await failing(editor, buggy_ws)
    seed = on_def.data["seed"]
    for where, diag in ((root / "softmax_tail_mask.py", on_def),):
        actions = await client.code_actions(where, [diag])
        args = [{"workspace": str(root.resolve()), "op": OP, "seed": seed}]
        repro = _by_title(actions, f"Reproduce failure of {OP} (seed {seed})")
        assert repro.kind == lsp.CodeActionKind.QuickFix and repro.is_preferred
        assert list(repro.diagnostics or []) == [diag]
        assert repro.command is not None and repro.command.command == "gpuemu.reproduce"
        assert list(repro.command.arguments or []) == args
        mini = _by_title(actions, f"Minimize test case of {OP} (seed {seed})")
        assert mini.command is not None and mini.command.command == "gpuemu.minimize"
        assert list(mini.command.arguments or []) == args
        pin = _by_title(actions, f"Pin seed {seed} as a regression case of {OP}")
        assert pin.edit is not None and pin.command is None
        # a tail-mask bug (confirmed condition N % 128 != 0) is no rounding: no tolerance is offered for it
        assert not [a for a in actions if a.title.startswith("Apply calibrated tolerance")]

    # the preferred action, run the way the editor runs it
    result = await client.execute(repro.command.command, *repro.command.arguments)
    assert result["status"] != "passed"
    expected = root.resolve() / ".gpuemu" / "repro" / f"{OP}_{seed}.py"
    assert [d.uri for d in client.shown_documents] == [uri_of(expected)]


@pytest.mark.parametrize("editor", ["vscode"], indirect=True)
async def test_pin_seed_edit_adds_only_the_seed(editor: Any, buggy_ws: Any) -> None:
    client, root, on_def, _ = await failing(editor, buggy_ws)
    seed = on_def.data["seed"]
    toml = root / "gpuemu.toml"
    before = toml.read_text()
    actions = await client.code_actions(root / "softmax_tail_mask.py", [on_def])
    pin = _by_title(actions, f"Pin seed {seed} as a regression case of {OP}")
    assert pin.edit is not None and pin.edit.changes is not None and list(pin.edit.changes) == [uri_of(toml)]
    after = apply_text_edits(before, pin.edit.changes[uri_of(toml)])

    old, new = tomllib.loads(before), tomllib.loads(after)
    ops = {o["name"]: o for o in new["ops"]}
    # a case of the current plan pins as { seed, plan } (a bare integer means its plan-1 case)
    assert {"seed": seed, "plan": on_def.data["plan"]} in ops[OP]["seeds"] and on_def.data["plan"] == PLAN
    assert "seeds" not in ops[TWIN]
    ops[OP].pop("seeds")
    assert new == old, "the pin edit changed more than the op's seeds"
    removed = [line for line in difflib.ndiff(before.split("\n"), after.split("\n")) if line.startswith("- ")]
    assert removed == [], f"the edit removed or rewrote lines (comments are the user's): {removed}"

    # saved, the pinned seed is valid config and a regression case: every run of the op replays it
    client.save(toml, after)
    await asyncio.sleep(0.5)
    assert not [d for d in client.diags(toml) if d.code == "config-error"]
    since = len(client.op_states)
    out = await client.execute("gpuemu.runOp", {"workspace": str(root), "op": OP})
    assert out["results"][0]["status"] == "failed"
    final = client.states(OP, since)[-1]
    assert seed in {f["seed"] for f in final["failures"]}, final["failures"]


async def test_reproduce_command_opens_a_failing_script(editor: Any, buggy_ws: Any) -> None:
    client, root, on_def, _ = await failing(editor, buggy_ws)
    seed = on_def.data["seed"]
    result = await client.execute("gpuemu.reproduce", {"workspace": str(root), "op": OP, "seed": seed})
    assert result["status"] == "failed" and result["kind"] == "mismatch"
    expected = root.resolve() / ".gpuemu" / "repro" / f"{OP}_{seed}.py"
    assert Path(result["repro"]) == expected
    assert [d.uri for d in client.shown_documents] == [uri_of(expected)]
    assert client.shown_documents[0].take_focus
    assert expected.is_file()
    proc = await asyncio.to_thread(_run_repro, expected)
    assert proc.returncode == 1, (proc.stdout[-2000:], proc.stderr[-2000:])
    assert any(f"seed {seed}" in m and "still fails" in m for m in client.message_texts())
    assert result["case"]["seed"] == seed and result["case"]["shapes"] == on_def.data["shapes"]
    # the failing cases of opState carry the worst element (a client's expected/actual diff)
    cases = [f for st in client.states(OP) for f in st.get("failures") or [] if f["seed"] == seed]
    assert cases, client.states(OP)
    worst = cases[-1]["worst"]
    assert worst["output"] and len(worst["index"]) == 2, worst
    assert abs(worst["op"] - worst["ref"]) > worst["allowed"] > 0, worst


@pytest.mark.parametrize("editor", ["vscode"], indirect=True)
async def test_minimize_command_reports_progress_and_a_smaller_shape(editor: Any, buggy_ws: Any) -> None:
    client, root, on_def, _ = await failing(editor, buggy_ws, ops=(OP,))
    seed, shape = on_def.data["seed"], on_def.data["shapes"]["x"]
    assert on_def.data["minimized"] is None and "minimized:" not in on_def.message
    out = await client.execute("gpuemu.minimize", {"workspace": str(root), "op": OP, "seed": seed}, timeout=120)
    assert "error" not in out, out

    tokens = client.progress_tokens(f"minimize {OP} seed {seed}")
    assert len(tokens) == 1, client.progress_log
    steps = client.progress(tokens[0])
    assert isinstance(steps[0], lsp.WorkDoneProgressBegin) and isinstance(steps[-1], lsp.WorkDoneProgressEnd)
    assert tokens[0] in client.created_tokens

    src = root / "softmax_tail_mask.py"
    diag = await client.wait_diagnostics(
        src, lambda ds: any(d.data.get("seed") == seed and d.data.get("minimized") for d in ds)
    )
    d = next(d for d in diag if d.data.get("seed") == seed)
    small = d.data["minimized"]["x"]
    assert small[0] * small[1] < shape[0] * shape[1], (small, shape)
    assert small[1] % 128 != 0, "a minimized tail-mask case still needs a partial tile"
    assert f"minimized: x={small}" in d.message

    # the minimized case is offered for reproduction too, and replays that small case
    actions = await client.code_actions(src, [d])
    title = f"Reproduce minimized case of {OP} (seed {seed}, x=[{small[0]}, {small[1]}])"
    action = _by_title(actions, title)
    assert action.command is not None and action.command.command == "gpuemu.reproduce"
    (args,) = action.command.arguments or []
    assert args == {"workspace": str(root.resolve()), "op": OP, "seed": seed, "minimized": True}
    out = await client.execute("gpuemu.reproduce", args, timeout=120)
    assert out["status"] == "failed" and out["case"]["shapes"] == {"x": small}, out
    assert Path(out["repro"]).name == f"{OP}_{seed}_min.py"
    bad = await client.execute("gpuemu.reproduce", {**args, "seed": seed + 100000}, timeout=60)
    assert "no minimized case" in bad["error"]


APPROX_PY = '''\
import math

import numpy as np


def gelu_tanh(x):
    """GELU with the tanh approximation, as fast kernels compute it: correct, within ~5e-4 of the exact GELU."""
    x32 = x.astype(np.float32)
    c = np.float32(math.sqrt(2.0 / math.pi))
    return (0.5 * x32 * (1 + np.tanh(c * (x32 + np.float32(0.044715) * x32**3)))).astype(x.dtype)


_erf = np.vectorize(math.erf, otypes=[np.float64])


def gelu_erf(x):
    """The exact GELU, x * Phi(x), in float64."""
    x64 = x.astype(np.float64)
    return 0.5 * x64 * (1 + _erf(x64 / math.sqrt(2.0)))
'''
#: a correct (approximate) kernel whose tolerance is set too tight for its approximation error
APPROX_TOML = TINY_HEADER + tiny_op(
    "gelu",
    "approx:gelu_tanh",
    "approx:gelu_erf",
    extra=('distributions = ["normal", "uniform"]\n\n[ops.tolerances]\nfloat32 = { atol = 1e-5, rtol = 1e-5 }\n'),
)


@pytest.mark.parametrize("editor", ["neovim"], indirect=True)
async def test_apply_calibrated_tolerance_makes_a_correct_op_pass(editor: Any, workspace: Any) -> None:
    root = workspace(APPROX_TOML, {"approx.py": APPROX_PY})
    toml = root / "gpuemu.toml"
    client = await editor.start(root)
    client.save(root / "approx.py")
    diag = await client.wait_op_diagnostic(root / "approx.py", "gelu")
    assert diag.code == "mismatch"

    # the edit is shown and asked for first: "Cancel" applies nothing
    client.message_answer = "Cancel"
    out = await client.execute("gpuemu.calibrate", {"workspace": str(root), "op": "gelu"}, timeout=120)
    assert out["applied"] is False and "atol" in out["change"] and not client.applied_edits, out
    assert "float32: atol 1e-05 ->" in client.message_requests[-1].message
    client.message_answer = "Apply"
    out = await client.execute("gpuemu.calibrate", {"workspace": str(root), "op": "gelu"}, timeout=120)
    assert out["applied"] is True, out
    assert len(client.applied_edits) == 1
    edited = client.text(toml)
    new = tomllib.loads(edited)
    tol = new["ops"][0]["tolerances"]["float32"]
    assert 1e-4 < tol["atol"] < 1e-2 and tol["rtol"] < 1e-2, tol  # the approximation's error, with a margin
    old = tomllib.loads(APPROX_TOML)
    old["ops"][0].pop("tolerances")
    new["ops"][0].pop("tolerances")
    assert new == old, "calibration changed more than the op's tolerances"

    # saved, the calibrated tolerance makes the op pass (run explicitly: see TOML_SAVE_BUG for why a save does not)
    since = len(client.op_states)
    client.save(toml, edited)
    out = await client.execute("gpuemu.runOp", {"workspace": str(root), "op": "gelu"})
    # "cancelled" only if a run started by the save itself superseded it (once TOML_SAVE_BUG is fixed)
    assert [r["status"] for r in out["results"]][:1] in (["passed"], ["cancelled"]), out
    state = await client.wait_state("gelu", {"passed", "failed", "error"}, since=since)
    assert state["state"] == "passed", state
    await client.wait_diagnostics(root / "approx.py", lambda ds: not ds)


@pytest.mark.parametrize("editor", ["vscode"], indirect=True)
async def test_calibrating_a_buggy_op_is_refused_once_with_progress_and_nothing_logged_as_an_error(
    editor: Any, buggy_ws: Any
) -> None:
    # calibrate from an editor on an op with a bug (NaN where N == 1): it counts its cases on the client's own
    # progress token (VS Code shows it as a notification with Cancel), stops at the first dtype refused, and
    # answers with one warning; its log says so at info level, with no traceback and nothing at error level
    op = "variance_empty_split"
    root = buggy_ws([op])
    client: GpuemuClient = await editor.start(root)
    shown, logged, token = len(client.messages), len(client.log_messages), "calibrate-from-the-editor"
    args = {"workspace": str(root), "op": op, "iterations": 20, "workDoneToken": token}
    out = await client.execute("gpuemu.calibrate", args, timeout=240)
    assert out["applied"] is False and out["refused"], out
    assert {r.split(":")[0] for r in out["refused"]} == {"float32"}, out  # float16 and bfloat16 never ran
    values = client.progress(token)
    assert isinstance(values[0], lsp.WorkDoneProgressBegin) and values[0].title == f"gpuemu: calibrate {op}", values
    reports = [v.message for v in values if isinstance(v, lsp.WorkDoneProgressReport)]
    assert reports and all(re.fullmatch(r"float32: \d+ of \d+ cases", m or "") for m in reports), reports
    assert isinstance(values[-1], lsp.WorkDoneProgressEnd), values
    messages = client.messages[shown:]
    assert len(messages) == 1 and messages[0].type == lsp.MessageType.Warning, messages
    assert messages[0].message.startswith(f"gpuemu: refusing to calibrate '{op}': its failures look like a bug")
    lines = client.log_messages[logged:]
    assert any(m.type == lsp.MessageType.Info and f"calibrate {op}: refusing" in m.message for m in lines), lines
    assert not [m for m in lines if m.type == lsp.MessageType.Error], lines
    log = client.log_file.read_text() if client.log_file and client.log_file.exists() else ""
    assert "Traceback" not in log and "ERROR" not in log, log


TOML_SAVE_BUG = (
    "BUG: saving an edited gpuemu.toml does not re-validate. did_change (server.py:479-485 at 7ada266) reloads "
    "the unsaved buffer into s.config; at save, on_changed -> reload(s, text, after) hands after() "
    "`old = s.config` (server.py:314), i.e. the already-edited config, so after() (server.py:336-342) finds no "
    "op changed and validates nothing. Every editor sends didChange before didSave, so a tolerance, dims or "
    "kwargs change (e.g. an applied calibration) is never re-checked on save. Fix: compare with the config the "
    "last save/validation used (keep it apart from the live buffer's), e.g. s.saved_config set in on_changed."
)


@pytest.mark.parametrize("editor", ["neovim"], indirect=True)
async def test_saving_an_edited_toml_revalidates_the_changed_op(editor: Any, workspace: Any) -> None:
    root = workspace(APPROX_TOML, {"approx.py": APPROX_PY})
    toml = root / "gpuemu.toml"
    client = await editor.start(root)
    client.save(root / "approx.py")
    await client.wait_state("gelu", {"failed"})
    await client.wait_op_diagnostic(root / "approx.py", "gelu")
    client.open(toml)
    await asyncio.sleep(0.5)
    since = len(client.op_states)
    client.save(toml, APPROX_TOML.replace("atol = 1e-5, rtol = 1e-5", "atol = 1e-3, rtol = 1e-3"))
    state = await client.wait_state("gelu", {"passed", "failed", "error"}, since=since, timeout=5)
    assert state["state"] == "passed", state
    await client.wait_diagnostics(root / "approx.py", lambda ds: not ds, timeout=10)


@pytest.mark.parametrize("editor", ["vscode"], indirect=True)
async def test_run_commands(editor: Any, buggy_ws: Any) -> None:
    root = buggy_ws([OP, TWIN])
    client = await editor.start(root, {**FAST, "iterations": 4})
    ws = str(root.resolve())

    out = await client.execute("gpuemu.runOp", {"workspace": ws, "op": OP})
    assert [(r["id"], r["name"], r["status"]) for r in out["results"]] == [(f"op:{OP}", OP, "failed")]
    assert out["results"][0]["workspace"] == ws
    await client.wait_op_diagnostic(root / "softmax_tail_mask.py", OP)
    assert [s["state"] for s in client.states(TWIN)] == [], "runOp ran more than the op it names"

    for command, mode in (("gpuemu.runAll", "quick"), ("gpuemu.runQuick", "quick"), ("gpuemu.runThorough", "thorough")):
        since, began = len(client.op_states), len(client.progress_log)
        out = await client.execute(command, {"workspace": ws}, timeout=120)
        statuses = {r["name"]: r["status"] for r in out["results"]}
        # a 4-case thorough sweep (random dtypes and shapes) may miss the tail-mask bug; quick ones hit it
        assert statuses == {OP: "failed" if mode == "quick" else statuses.get(OP), TWIN: "passed"}, (command, out)
        assert statuses[OP] in ("failed", "passed")
        for name in (OP, TWIN):
            assert client.states(name, since)[-1]["state"] in ("failed", "passed")
        # each op's progress says which mode it runs in; the run's own counts its ops
        begins = [v for _, _, v in client.progress_log[began:] if isinstance(v, lsp.WorkDoneProgressBegin)]
        modes = {v.title.rsplit(" ", 1)[-1]: v.message for v in begins if v.title.startswith("gpuemu: Validating ")}
        assert modes == {OP: f"{mode} (run request)", TWIN: f"{mode} (run request)"}, (command, modes)
        runs = [v for v in begins if v.title == "gpuemu: run request: 2 ops"]
        assert len(runs) == 1 and runs[0].message == "running 1 of 2 ops", begins
    found = await client.request("gpuemu/discoverOps")
    assert {i["name"]: i["status"] for i in found["workspaces"][0]["items"]} == statuses  # the last run's


# --- hover and code lens -----------------------------------------------------------------------------
async def test_hover_summary_first_table_heatmap_only_when_informative(editor: Any, buggy_ws: Any) -> None:
    client, root, on_def, entry = await failing(editor, buggy_ws)
    toml, src = root / "gpuemu.toml", root / "softmax_tail_mask.py"
    seed = on_def.data["seed"]
    width = on_def.data["shapes"]["x"][1]

    texts = {}
    for where, path, pos in (("toml", toml, entry.end), ("def", src, on_def.range.start)):
        hover = await client.hover(path, pos.line, pos.character + 1)
        assert hover is not None, path
        assert isinstance(hover.contents, lsp.MarkupContent) and hover.contents.kind == lsp.MarkupKind.Markdown
        texts[where] = hover.contents.value
    # the diagnostic's error against tolerance ("max abs err 0.429 vs atol=... (...x tolerance)"), its first line's end
    error = on_def.message.split("\n")[0].split(" cases: ", 1)[1]
    assert re.fullmatch(r"max abs err [\d.e+-]+ vs atol=\S+ rtol=\S+ \([\d.e+]+x tolerance\)", error), on_def.message
    for where, text in texts.items():
        first = text.split("\n")[0]
        # the summary comes first: status, cases, then the error of the case the diagnostic quotes, in its words
        # (one source: the hover once named another case's error than the diagnostic above it)
        assert first.startswith(f"**{OP}** FAIL · "), (where, first)
        assert re.search(r"\d+/\d+ cases passed, \d+ failed", first), first
        assert f" · seed {seed}: {error} · " in first, (where, first, error)
        assert "worst error" not in first, (where, first)
        # then the table by dtype x layout, with the distributions that failed in each row
        table = text.index("| dtype | layout | passed | worst / tolerance | failing distributions |")
        assert table > len(first)
        assert [line for line in text.split("\n") if line.startswith("| float32 |")], text
        # where the errors sit, in words: the leaked padding spoils whole rows (every column of a row)
        where_line = next(line for line in text.split("\n") if line.startswith("Where "))
        assert f"at seed {seed}: " in where_line and where_line.endswith("every column"), where_line
        # the heatmap shows because the errors are denser in some cells than in others: more than one shade
        block = text.split("```text\n")
        assert len(block) == 2, f"no heatmap block in hover:\n{text}"
        heat = block[1].split("```")[0].strip("\n").split("\n")
        assert heat and all(len(row) == len(heat[0]) for row in heat), heat
        assert len({ch for row in heat for ch in row}) > 1, f"an uninformative heatmap was shown: {heat}"
    # beside the diagnostic (on the def) its text is not repeated; in gpuemu.toml, where no diagnostic sits, it is
    message = on_def.message
    diagnosis = next((line for line in message.split("\n") if line.startswith("diagnosis: ")), None)
    assert diagnosis, message
    assert "Diagnosis" not in texts["def"] and "Replay" not in texts["def"] and "First failure" not in texts["def"]
    assert message.split("\n")[0] not in texts["def"]
    assert "*Diagnosis:*" in texts["toml"] and f"Replay: `gpuemu reproduce --op {OP} --seed {seed}`" in texts["toml"]
    assert width % 128 != 0

    twin_line = line_of(toml.read_text(), f'name = "{TWIN}"')
    twin = await client.hover(toml, twin_line, 3)
    assert twin is not None and twin.contents.value.startswith(f"**{TWIN}** PASS · ")
    assert "of tolerance" in twin.contents.value.split("\n")[0]
    assert "```" not in twin.contents.value and "failing distributions" not in twin.contents.value
    # elsewhere in gpuemu.toml: the key's docs
    project = await client.hover(toml, line_of(toml.read_text(), "[project]"), 2)
    assert project is not None and "The project." in project.contents.value


@pytest.mark.parametrize("editor", ["neovim"], indirect=True)
async def test_code_lens_shows_status_and_runs_the_op(editor: Any, buggy_ws: Any) -> None:
    client, root, _, entry = await failing(editor, buggy_ws)
    toml, src = root / "gpuemu.toml", root / "softmax_tail_mask.py"
    src_text = src.read_text()
    for path, lines in (
        (toml, {OP: entry.start.line, TWIN: line_of(toml.read_text(), f'name = "{TWIN}"') - 1}),
        (src, {OP: line_of(src_text, f"def {OP}("), TWIN: line_of(src_text, f"def {TWIN}(")}),
    ):
        lenses = await client.code_lens(path)
        by_op = {lens.command.arguments[0]["op"]: lens for lens in lenses if lens.command}
        assert set(by_op) == {OP, TWIN}, lenses
        for name, line in lines.items():
            lens = by_op[name]
            assert lens.range.start.line == line, (path.name, name, lens.range)
            assert lens.command.command == "gpuemu.runOp"
            assert list(lens.command.arguments or []) == [{"workspace": str(root.resolve()), "op": name}]
        assert by_op[OP].command.title.startswith(f"✗ gpuemu {OP}:")
        assert by_op[TWIN].command.title.startswith(f"✓ gpuemu {TWIN}:")

    lens = by_op[OP]
    since = len(client.op_states)
    out = await client.execute(lens.command.command, *lens.command.arguments)
    assert out["results"][0]["status"] == "failed"
    assert client.states(OP, since)
