"""User code that tries to break the runner (issue 14, items 8 and 12), through the real CLI, gate and server.

* Containment: an op that detaches a process (``setsid``, a double fork with ``setsid``,
  ``start_new_session=True``, a grandchild sleeping under a child) leaves nothing alive once the CLI, the
  gate or the server is done, once its worker times out, or when the CLI is killed with ``kill -9``.
  Liveness is read by pid from ``/proc`` (a zombie counts as dead).
* Shadowing: op modules named like standard library modules (or ``numpy``), and workspace files with
  those names beside an op or a script, never break a worker; an op that needs the workspace file
  under a taken name is told so by name.
* Scripts run unchanged: ``sys.stderr.buffer``, ``sys.stdout.fileno()``, ``sys.stdin.fileno()``,
  ``open(0)``, ``reconfigure()`` and more work in reference and op scripts; and each call starts from a
  fresh interpreter state, so module-level counters never leak from one case into the next.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import relkit
from kit.store import db_path

DIMS = "B = { min = 1, max = 4, default = 2 }\nN = { min = 2, max = 16, default = 8 }"
GRACE = 5.0  # seconds a process may take to be gone after its owner exits (the machine is shared)

# --- containment -------------------------------------------------------------------------------------

ESCAPE_PY = """import os
import subprocess
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def _note(tag, *pids):
    with open(os.path.join(HERE, "notes.txt"), "a") as fh:
        fh.write(tag + " " + " ".join(str(p) for p in pids) + "\\n")


def reference(x):
    return np.asarray(x, dtype=np.float64) * 2.0


def _setsid_child(tag):
    p = subprocess.Popen(["setsid", "sleep", "600"])
    _note(tag, p.pid)


def _double_fork(tag):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.setsid()
        if os.fork() == 0:
            os.write(w, str(os.getpid()).encode())
            time.sleep(600)
            os._exit(0)
        os._exit(0)
    os.waitpid(pid, 0)
    _note(tag, int(os.read(r, 64)))


def _new_session(tag):
    p = subprocess.Popen(["sleep", "600"], start_new_session=True)
    _note(tag, p.pid)


def _grandchild(tag):
    p = subprocess.Popen(["sh", "-c", "sleep 600 & echo $!; wait"], stdout=subprocess.PIPE, start_new_session=True)
    _note(tag, p.pid, int(p.stdout.readline()))


ESCAPES = {"setsid": _setsid_child, "double_fork": _double_fork, "new_session": _new_session, "grandchild": _grandchild}


def escape(x, how):
    ESCAPES[how](how)
    time.sleep(0.2)
    return x * 2


def escape_and_hang(x, how):
    ESCAPES[how](how)
    time.sleep(1000)


def check_dead(x):
    # runs after the op whose worker timed out: are the processes it left still there?
    path = os.path.join(HERE, "notes.txt")
    for line in open(path).read().splitlines() if os.path.exists(path) else []:
        tag, *pids = line.split()
        for pid in map(int, pids):
            try:
                state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
            except OSError:
                state = "gone"
            if state not in ("gone", "Z", "X"):
                raise AssertionError(f"{tag} process {pid} outlived its worker's timeout (state {state})")
    return x * 2
"""

ESCAPES = ["setsid", "double_fork", "new_session", "grandchild"]
ESCAPE_PY += "".join(  # one function per op (the config checker looks for each by name)
    f"\n\ndef escape_{how}(x):\n    return escape(x, {how!r})\n\n\n"
    f"def hang_{how}(x):\n    escape_and_hang(x, {how!r})\n"
    for how in ESCAPES
)


def escape_ws(root: Path, *, hang: bool = False, timeout: float = 5.0) -> Path:
    toml = relkit.HEADER.format(name="escape", validation=f"timeout = {timeout}\n", quick=1)
    for how in ESCAPES:
        toml += relkit.op_block(
            f"{'hang' if hang else 'escape'}_{how}",
            f'module = "kern:{"hang" if hang else "escape"}_{how}"\nreference = "kern:reference"',
            dims=DIMS,
        )
    if hang:  # runs last, in the same worker (-j 1): checks what the timed-out ops left
        toml += relkit.op_block("zz_check_dead", 'module = "kern:check_dead"\nreference = "kern:reference"', dims=DIMS)
    return relkit.write_ws(root, toml, {"kern.py": ESCAPE_PY})


def noted(root: Path) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    try:
        text = (root / "notes.txt").read_text()
    except OSError:
        return out
    for line in text.splitlines():
        tag, *pids = line.split()
        out.setdefault(tag, []).extend(int(p) for p in pids)
    return out


def _all_noted(root: Path) -> list[int]:
    return [p for pids in noted(root).values() for p in pids]


def _assert_gone(root: Path, owner: str) -> None:
    pids = noted(root)
    assert set(pids) == set(ESCAPES), pids  # every op really started its processes
    left = relkit.wait_gone(_all_noted(root), GRACE)
    assert left == [], f"outlived {owner}: {[(p, relkit.cmdline(p)) for p in left]} of {pids}"


@pytest.mark.parametrize("mode", ["zygote", "no_zygote"])
def test_detached_processes_die_with_the_cli(tmp_path: Path, mode: str, cleanup_pids: list[int]) -> None:
    """`gpuemu test`: setsid, double fork, start_new_session and a grandchild all end with the run."""
    relkit.record("limits", cases=len(ESCAPES))
    root = escape_ws(tmp_path / "ws")
    try:
        got = relkit.run_cli(
            root, "test", "--quick", "--no-progress", env=relkit.child_env(no_zygote=mode == "no_zygote")
        )
        assert got.returncode == 0, got.stdout + got.stderr
        _assert_gone(root, "gpuemu test")
    finally:
        cleanup_pids += _all_noted(root)


def test_detached_processes_die_with_the_gate(tmp_path: Path, cleanup_pids: list[int]) -> None:
    relkit.record("limits", cases=len(ESCAPES))
    root = escape_ws(tmp_path / "ws")
    try:
        got = relkit.run_check(root, "--quick")
        assert got.returncode == 0, got.stdout + got.stderr
        _assert_gone(root, "gpuemu-ls --check")
    finally:
        cleanup_pids += _all_noted(root)


@pytest.mark.parametrize("mode", ["zygote", "no_zygote"])
def test_detached_processes_die_at_the_worker_timeout(tmp_path: Path, mode: str, cleanup_pids: list[int]) -> None:
    """Each op detaches a process and hangs: at the timeout its worker's whole tree is killed, checked from a
    later op of the same run (while the CLI still runs) and again after it."""
    relkit.record("limits", cases=len(ESCAPES))
    root = escape_ws(tmp_path / "ws", hang=True, timeout=1.0)
    out = tmp_path / "out.json"
    try:
        got = relkit.run_cli(
            root,
            "test",
            "--quick",
            "--no-progress",
            "-j",
            "1",
            "--format",
            "json",
            "--output",
            str(out),
            env=relkit.child_env(no_zygote=mode == "no_zygote"),
        )
        assert got.returncode == 1, got.stdout + got.stderr
        ops = {o["name"]: o for o in json.loads(out.read_text(encoding="utf-8"))["ops"]}
        for how in ESCAPES:
            assert ops[f"hang_{how}"]["failures"][0]["kind"] == "op_timeout", ops[f"hang_{how}"]
        assert ops["zz_check_dead"]["status"] == "passed", ops["zz_check_dead"]
        _assert_gone(root, "the timeout")
    finally:
        cleanup_pids += _all_noted(root)


def test_detached_processes_die_when_the_cli_is_killed(tmp_path: Path, cleanup_pids: list[int]) -> None:
    """kill -9 of the CLI while an op hangs with a setsid'd process: the zygote kills what its workers left."""
    relkit.record("limits", cases=1)
    relkit.record("faults", cli_kill9=1)
    root = escape_ws(tmp_path / "ws", hang=True, timeout=60.0)
    cmd = [*relkit.CLI, "-C", str(root), "test", "--quick", "--no-progress", "--op", "hang_double_fork"]
    proc = subprocess.Popen(cmd, env=relkit.child_env(), cwd=str(tmp_path), stdout=subprocess.DEVNULL)
    cleanup_pids.append(proc.pid)
    try:
        relkit.wait_until(lambda: noted(root).get("double_fork"), 120, "the detached process")
        proc.kill()
        proc.wait(timeout=30)
        left = relkit.wait_gone(_all_noted(root), GRACE)
        assert left == [], f"outlived a killed CLI: {left}"
    finally:
        cleanup_pids += _all_noted(root)


@pytest.mark.asyncio
async def test_detached_processes_die_with_the_server(tmp_path: Path, cleanup_pids: list[int]) -> None:
    """LSP shutdown/exit while an op hangs after detaching processes of every kind: none survives."""
    relkit.record("limits", cases=1)
    root = escape_ws(tmp_path / "ws", hang=True, timeout=60.0)
    client = await relkit.start_server(root)
    relkit.record("server", started=1)
    try:
        run = asyncio.ensure_future(relkit.request(client, "gpuemu/runOps", {"ids": ["op:hang_setsid"]}, timeout=300))
        await relkit.wait_for(lambda: noted(root).get("setsid"), 120, "the detached process", client)
        assert await relkit.stop_server(client) == 0
    finally:
        await relkit.force_close(client)
        cleanup_pids += _all_noted(root)
    run.cancel()
    left = relkit.wait_gone(_all_noted(root), GRACE)
    assert left == [], f"outlived the server: {left}"


# --- shadowing -----------------------------------------------------------------------------------------

SHADOWED = ["signal", "socket", "select", "random", "struct", "numbers", "token", "numpy"]

OP_MODULE = """import numpy as np


def op(x):
    return x * 2


def ref(x):
    return np.asarray(x, dtype=np.float64) * 2.0
"""

BROKEN = 'raise RuntimeError("the workspace file {name}.py was imported in place of the real {name}")\n'

USES_ALL = """import numbers
import random
import select
import signal
import socket
import struct
import token

import numpy as np


def op(x):
    assert struct.calcsize("<f") == 4 and isinstance(1, numbers.Number) and token.NAME >= 0
    assert callable(random.random) and callable(select.select) and callable(socket.socket) and signal.SIGINT
    return x * 2


def ref(x):
    return np.asarray(x, dtype=np.float64) * 2.0
"""

REF_SCRIPT = """import base64
import json
import random
import socket
import sys

import numpy as np

req = json.load(sys.stdin)
t = req["inputs"]["x"]
x = np.frombuffer(base64.b64decode(t["data"]), dtype=t["dtype"]).reshape(t["shape"]).astype(np.float64)
y = x * 2.0 + 0 * random.random()
assert callable(socket.socket)
data = base64.b64encode(y.tobytes()).decode()
print(json.dumps({"outputs": {"result": {"shape": list(y.shape), "dtype": "float64", "data": data}}}))
"""


def _entry_point(name: str) -> str | None:
    path = Path(sys.executable).parent / name
    return str(path) if path.exists() else shutil.which(name)


def _run_in(root: Path, argv: list[str]) -> subprocess.CompletedProcess[str]:
    """The real entry point, started in the workspace itself (the folder the issue's runs started in)."""
    return subprocess.run(
        argv, capture_output=True, text=True, timeout=relkit.LONG, env=relkit.child_env(), cwd=str(root), check=False
    )


def shadow_ws(root: Path) -> Path:
    """Ops whose modules have taken names; a sibling-shadowed op; a script beside shadowing files."""
    toml = relkit.HEADER.format(name="shadow", validation="timeout = 10\n", quick=2)
    files = {f"{name}.py": OP_MODULE for name in SHADOWED}
    for name in SHADOWED:
        toml += relkit.op_block(f"named_{name}", f'module = "{name}:op"\nreference = "{name}:ref"', dims=DIMS)
    # a package that shadows too, and sibling files that must not be imported by anything
    files["sub/__init__.py"] = ""
    files["sub/uses_all.py"] = USES_ALL
    for name in ("numbers", "random", "select", "signal", "socket", "struct", "token", "numpy"):
        files[f"sub/{name}.py"] = BROKEN.format(name=name)
    files["sub/refs/ref.py"] = REF_SCRIPT
    files["sub/refs/random.py"] = BROKEN.format(name="random")
    files["sub/refs/socket.py"] = BROKEN.format(name="socket")
    toml += relkit.op_block("siblings_shadow", 'module = "sub.uses_all:op"\nreference = "sub.uses_all:ref"', dims=DIMS)
    toml += relkit.op_block(
        "script_siblings_shadow", 'module = "sub.uses_all:op"\nreference = "sub/refs/ref.py"', dims=DIMS
    )
    return relkit.write_ws(root, toml, files)


def _statuses(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0] in ("PASS", "FAIL", "ERROR", "NOT_RUN"):
            out[parts[1]] = parts[0]
    return out


@pytest.mark.parametrize("face", ["gpuemu", "gpuemu-ls"])
def test_modules_named_like_stdlib_or_numpy_run(tmp_path: Path, face: str) -> None:
    """The CLI and the gate, started in the workspace: every op loads and passes."""
    relkit.record("ops", cases=len(SHADOWED) + 2)
    root = shadow_ws(tmp_path / "ws")
    exe = _entry_point(face)
    if exe is None:
        pytest.skip(f"no {face} entry point")
    got = _run_in(root, [exe, "--check", ".", "--quick"] if face == "gpuemu-ls" else [exe, "test", "--quick"])
    statuses = _statuses(got.stdout)
    expected = {f"named_{n}": "PASS" for n in SHADOWED} | {"siblings_shadow": "PASS", "script_siblings_shadow": "PASS"}
    assert statuses == expected, got.stdout + got.stderr
    assert got.returncode == 0 and relkit.no_traceback(got.stdout + got.stderr)


def test_python_dash_m_started_in_a_workspace_imports_the_real_standard_library(tmp_path: Path) -> None:
    """``python -m gpuemu_ls`` puts the current folder first on sys.path; started in a workspace holding
    ``json.py`` and ``typing.py`` (which gpuemu's own process imports early), the CLI must still use the real
    ones, and every op still loads and passes."""
    relkit.record("ops", cases=len(SHADOWED) + 2)
    root = shadow_ws(tmp_path / "ws")
    for name in ("json", "typing", "sqlite3"):
        (root / f"{name}.py").write_text(BROKEN.format(name=name), encoding="utf-8")
    got = _run_in(root, [sys.executable, "-m", "gpuemu_ls", "test", "--quick"])
    expected = {f"named_{n}": "PASS" for n in SHADOWED} | {"siblings_shadow": "PASS", "script_siblings_shadow": "PASS"}
    assert _statuses(got.stdout) == expected, got.stdout + got.stderr
    assert got.returncode == 0 and relkit.no_traceback(got.stdout + got.stderr)


@pytest.mark.parametrize(
    ("name", "how"), [("random", "from"), ("socket", "from"), ("numbers", "from"), ("struct", "attr")]
)
def test_a_workspace_module_under_a_taken_name_is_named(tmp_path: Path, name: str, how: str) -> None:
    """The op needs a helper from its sibling `random.py` (by `from random import` or `random.helper`): it
    cannot have it, and the message's first line names the file."""
    relkit.record("ops", cases=1)
    if how == "from":
        kern = f"from {name} import my_helper\n\n\ndef op(x):\n    return my_helper(x)\n"
    else:
        kern = f"import {name}\n\n\ndef op(x):\n    return {name}.my_helper(x)\n"
    kern += "\n\ndef ref(x):\n    return x * 2.0\n"
    toml = relkit.HEADER.format(name="named", validation="", quick=1)
    toml += relkit.op_block("needs_helper", 'module = "kern:op"\nreference = "kern:ref"', dims=DIMS)
    root = relkit.write_ws(
        tmp_path / "ws", toml, {"kern.py": kern, f"{name}.py": "def my_helper(x):\n    return x * 2\n"}
    )
    out = tmp_path / "out.json"
    got = relkit.run_cli(
        root, "test", "--quick", "--no-progress", "--format", "json", "--output", str(out), cwd=tmp_path
    )
    assert got.returncode == 1, got.stdout + got.stderr
    (entry,) = json.loads(out.read_text(encoding="utf-8"))["ops"]
    first = (entry["failures"][0]["message"] if entry["failures"] else entry["message"]).splitlines()[0]
    assert f"workspace file {name}.py shadows the standard library module {name}" in first, entry
    assert "exited with status" not in json.dumps(entry), entry


# --- scripts run unchanged ---------------------------------------------------------------------------------

COMMON = """import base64
import json

import numpy as np


def double(req):
    t = req["inputs"]["x"]
    x = np.frombuffer(base64.b64decode(t["data"]), dtype=t["dtype"]).reshape(t["shape"]).astype(np.float64)
    y = x * 2.0
    data = base64.b64encode(y.tobytes()).decode()
    return {"outputs": {"result": {"shape": list(y.shape), "dtype": "float64", "data": data}}}


def as_op(out, req):
    # the op answers in the case dtype
    t = req["inputs"]["x"]
    y = np.frombuffer(base64.b64decode(out["outputs"]["result"]["data"]), dtype=np.float64).astype(t["dtype"])
    res = {"shape": t["shape"], "dtype": t["dtype"], "data": base64.b64encode(y.tobytes()).decode()}
    return {"outputs": {"result": res}}
"""

STREAM_SCRIPTS = {
    "stderr_buffer": """import json, sys
from common import double
req = json.load(sys.stdin)
sys.stderr.buffer.write(b"bytes on stderr\\n")
sys.stderr.buffer.flush()
sys.stdout.buffer.write(json.dumps(double(req)).encode())
""",
    "stdout_fileno": """import json, os, sys
from common import double
req = json.load(sys.stdin)
os.write(sys.stdout.fileno(), json.dumps(double(req)).encode())
""",
    "stdin_fileno": """import json, os, sys
from common import double
chunks = []
while True:
    chunk = os.read(sys.stdin.fileno(), 1 << 16)
    if not chunk:
        break
    chunks.append(chunk)
print(json.dumps(double(json.loads(b"".join(chunks)))))
""",
    "open0": """import json
from common import double
with open(0) as fh:
    req = json.load(fh)
with open(1, "w", closefd=False) as out:
    out.write(json.dumps(double(req)))
""",
    "reconfigure": """import json, sys
from common import double
sys.stdin.reconfigure(encoding="utf-8")
sys.stdout.reconfigure(line_buffering=True)
sys.stderr.reconfigure(errors="replace")
print(json.dumps(double(json.load(sys.stdin))))
""",
    "stdin_buffer_read": """import json, sys
from common import double
print(json.dumps(double(json.loads(sys.stdin.buffer.read()))))
""",
    "dev_stdin": """import json
from common import double
with open("/dev/stdin", "rb") as fh:
    req = json.loads(fh.read())
print(json.dumps(double(req)), flush=True)
""",
    "isatty_and_dunder": """import json, sys
from common import double
assert not sys.stdin.isatty() and sys.__stdout__ is sys.stdout
req = json.load(sys.__stdin__)
sys.__stdout__.write(json.dumps(double(req)))
""",
}

STATE_SCRIPTS = {
    # each changes its answer from the second call in the same interpreter on
    "helper_counter": """import json, sys
import counter_state
from common import double
counter_state.calls += 1
out = double(json.load(sys.stdin))
if counter_state.calls > 1:
    out["outputs"]["result"]["shape"] = [0]
print(json.dumps(out))
""",
    "builtins_counter": """import builtins, json, sys
from common import double
builtins.gpuemu_calls = getattr(builtins, "gpuemu_calls", 0) + 1
out = double(json.load(sys.stdin))
if builtins.gpuemu_calls > 1:
    raise RuntimeError("state leaked: call %d" % builtins.gpuemu_calls)
print(json.dumps(out))
""",
    "library_counter": """import json, sys
import numpy as np
from common import double
np.gpuemu_calls = getattr(np, "gpuemu_calls", 0) + 1
assert np.gpuemu_calls == 1, "state leaked into numpy"
print(json.dumps(double(json.load(sys.stdin))))
""",
    "main_module_and_atexit": """import atexit, json, sys
import __main__
from common import double
assert not hasattr(__main__, "seen"), "state leaked in __main__"
seen = True
req = json.load(sys.stdin)
atexit.register(lambda: print(json.dumps(double(req))))
""",
}


def scripts_ws(root: Path, iterations: int = 6) -> Path:
    toml = relkit.HEADER.format(name="scripts", validation="timeout = 10\n", quick=iterations)
    files = {
        "kern.py": "def op(x):\n    return x * 2\n",
        "scripts/common.py": COMMON,
        "scripts/counter_state.py": "calls = 0\n",
    }
    for name, text in {**STREAM_SCRIPTS, **STATE_SCRIPTS}.items():
        files[f"scripts/{name}.py"] = text
        toml += relkit.op_block(f"ref_{name}", f'module = "kern:op"\nreference = "scripts/{name}.py"', dims=DIMS)
    for name, text in STREAM_SCRIPTS.items():  # the same, as op scripts (answering in the case dtype)
        op_text = text.replace("double(", "as_op_double(").replace(
            "from common import double",
            "from common import as_op, double\n\n\ndef as_op_double(req):\n    return as_op(double(req), req)\n",
        )
        files[f"scripts/op_{name}.py"] = op_text
        toml += relkit.op_block(
            f"op_{name}",
            f'execution_mode = "script_based"\nop_script = "scripts/op_{name}.py"\n'
            'reference = "scripts/stdin_fileno.py"',
            dims=DIMS,
        )
    return relkit.write_ws(root, toml, files)


def test_scripts_using_real_streams_and_state_run_unchanged(tmp_path: Path) -> None:
    """Every stream usage works in reference and op scripts, and no state survives from one call to the next."""
    relkit.record("ops", cases=2 * len(STREAM_SCRIPTS) + len(STATE_SCRIPTS))
    root = scripts_ws(tmp_path / "ws")
    out = tmp_path / "out.json"
    got = relkit.run_cli(root, "test", "--quick", "--no-progress", "--format", "json", "--output", str(out))
    ops = {o["name"]: o for o in json.loads(out.read_text(encoding="utf-8"))["ops"]}
    bad = {
        n: (o["status"], o.get("message"), o.get("failures", [])[:1]) for n, o in ops.items() if o["status"] != "passed"
    }
    assert bad == {}, bad
    assert len(ops) == 2 * len(STREAM_SCRIPTS) + len(STATE_SCRIPTS)
    assert {o["cases"] for o in ops.values()} == {6}, {n: o["cases"] for n, o in ops.items()}
    assert got.returncode == 0, got.stdout + got.stderr


def test_script_errors_keep_their_stderr_and_crashes_their_line(tmp_path: Path) -> None:
    """A forked script's stderr tail, exit status, exception line and crash signal are reported as before."""
    relkit.record("ops", cases=3)
    scripts = {
        "exit_ref": 'import sys\nsys.stdin.read()\nprint("weights missing", file=sys.stderr)\nsys.exit(3)\n',
        "raise_ref": 'import sys\nsys.stdin.read()\nsys.stderr.buffer.write(b"about to fail\\n")\nraise KeyError(1)\n',
        "segv_ref": "import ctypes, sys\nsys.stdin.read()\nctypes.string_at(0)\n",
    }
    toml = relkit.HEADER.format(name="errs", validation="timeout = 10\n", quick=1)
    for name in scripts:
        toml += relkit.op_block(name, f'module = "kern:op"\nreference = "scripts/{name}.py"', dims=DIMS)
    files = {"kern.py": "def op(x):\n    return x * 2\n"} | {f"scripts/{n}.py": t for n, t in scripts.items()}
    root = relkit.write_ws(tmp_path / "ws", toml, files)
    out = tmp_path / "out.json"
    got = relkit.run_cli(root, "test", "--quick", "--no-progress", "--format", "json", "--output", str(out))
    assert got.returncode == 1 and relkit.no_traceback(got.stderr), got.stdout + got.stderr
    ops = {o["name"]: o["failures"][0] for o in json.loads(out.read_text(encoding="utf-8"))["ops"]}
    assert ops["exit_ref"]["kind"] == "reference_exit" and "status 3" in ops["exit_ref"]["message"], ops["exit_ref"]
    details = dict(relkit.store_rows(db_path(root), "SELECT op, detail FROM cases"))
    assert "weights missing" in details["exit_ref"], details["exit_ref"]
    assert "about to fail" in details["raise_ref"], details["raise_ref"]
    assert ops["raise_ref"]["kind"] == "reference_error" and "KeyError" in ops["raise_ref"]["message"]
    assert ops["raise_ref"]["line"] == 4, ops["raise_ref"]
    assert ops["segv_ref"]["kind"] == "reference_crash" and "SIGSEGV" in ops["segv_ref"]["message"], ops["segv_ref"]
    assert ops["segv_ref"]["line"] == 3, ops["segv_ref"]


ENV_CHECK = """import os
GOT = {k: os.environ.get(k) for k in ("GLIBC_TUNABLES", "GPUEMU_USER_GLIBC_TUNABLES")}
WANT = {"GLIBC_TUNABLES": os.environ.get("RELTEST_WANT_TUNABLES") or None, "GPUEMU_USER_GLIBC_TUNABLES": None}
assert GOT == WANT, f"the op's environment is not its user's: {GOT} != {WANT}"
"""


@pytest.mark.parametrize("user", ["", "glibc.malloc.arena_max=2"], ids=["unset", "set"])
@pytest.mark.parametrize("no_zygote", [False, True], ids=["zygote", "fresh-worker"])
def test_ops_and_scripts_see_their_users_environment(tmp_path: Path, user: str, no_zygote: bool) -> None:
    """The malloc tunable workers start with (huge pages for forked script calls) is not in what an op, a reference
    or a script sees, and a user's own GLIBC_TUNABLES reaches them unchanged."""
    relkit.record("ops", cases=2)
    toml = relkit.HEADER.format(name="env", validation="timeout = 10\n", quick=2)
    toml += relkit.op_block("inproc", 'module = "kern:op"\nreference = "kern:ref"', dims=DIMS)
    toml += relkit.op_block(
        "script", 'execution_mode = "script_based"\nop_script = "op.py"\nreference = "ref.py"', dims=DIMS
    )
    files = {
        "kern.py": ENV_CHECK + "\n\ndef op(x):\n    return x * 2\n\n\ndef ref(x):\n    return x * 2\n",
        "common.py": COMMON,
        "op.py": ENV_CHECK + "import json, sys\nfrom common import as_op, double\n"
        "req = json.load(sys.stdin)\nprint(json.dumps(as_op(double(req), req)))\n",
        "ref.py": ENV_CHECK + "import json, sys\nfrom common import double\n"
        "print(json.dumps(double(json.load(sys.stdin))))\n",
    }
    root = relkit.write_ws(tmp_path / "ws", toml, files)
    extra = {"RELTEST_WANT_TUNABLES": user} | ({"GLIBC_TUNABLES": user} if user else {})
    env = relkit.child_env(extra, no_zygote=no_zygote)
    if not user:
        env.pop("GLIBC_TUNABLES", None)
    out = tmp_path / "out.json"
    got = relkit.run_cli(root, "test", "--quick", "--no-progress", "--format", "json", "--output", str(out), env=env)
    ops = {o["name"]: o for o in json.loads(out.read_text(encoding="utf-8"))["ops"]}
    assert {n: o["status"] for n, o in ops.items()} == {"inproc": "passed", "script": "passed"}, got.stdout + got.stderr
    assert {o["cases"] for o in ops.values()} == {2}
