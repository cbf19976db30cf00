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
import zipfile
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
import relkit
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

LOUD_REF = """import base64
import json
import os
import sys

import numpy as np

open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "MARK-ref-ran"), "a").close()
req = json.load(sys.stdin)
x = req["inputs"]["x"]
a = np.frombuffer(base64.b64decode(x["data"]), dtype=x["dtype"]).reshape(x["shape"]) * 2.0
print(json.dumps({"outputs": {"result": {"shape": list(a.shape), "dtype": "float64",
                                         "data": base64.b64encode(a.tobytes()).decode()}}}))
"""


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
        assert not relkit.db_path(root).exists(), "an untrusted workspace got a store written into it"
        # now trusted: the same request runs the code (so the marker works) ...
        client.workspace_did_change_configuration(lsp.DidChangeConfigurationParams({"gpuemu": {"trusted": True}}))
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
    relkit.record("server", unexpected_exits=int(code != 0))
    assert code == 0


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
    relkit.record("server", unexpected_exits=int(code != 0))
    assert code == 0


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
    calls = 0
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
                calls += 1
                first = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "args"), None)
                if isinstance(first, (ast.Constant, ast.JoinedStr, ast.BinOp)):
                    problems.append(f"{where}: a command string, not an argument list")
    assert calls >= 4, f"the scan found only {calls} subprocess calls: it is not looking at the package"
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
    db = relkit.db_path(root)
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
