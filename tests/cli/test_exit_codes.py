"""Every exit code docs/cli.md documents, produced by the real command (`gpuemu`, `gpuemu-ls`) in a subprocess;
`gpuemu-ls --help` lists the gate; `gpuemu failures --exit-code` for scripts."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from kit.attest import sign, stored_report, write_keypair
from kit.cli import env as kit_env
from kit.workspace import write_ws

from gpuemu_ls.cli import build_parser

BIN = Path(sys.executable).parent
DOC = Path(__file__).resolve().parents[2] / "docs" / "cli.md"

TOML = """
[project]
name = "exit-codes"

[validation]
dtypes = ["float32"]
iterations = 4

[[ops]]
name = "good"
module = "ops:good"
reference = "ops:ref"
{bad}
[ops.dims]
B = {{ min = 1, max = 4, default = 2 }}
N = {{ min = 1, max = 16, default = 8 }}
"""
BAD_OP = '\n[[ops]]\nname = "bad"\nmodule = "ops:bad"\nreference = "ops:ref"\n'
OPS_PY = """
import time

import numpy as np


def good(x):
    return np.array(x, copy=True)


def bad(x):
    return (x * 3).astype(x.dtype)


def slow(x):
    time.sleep(60)
    return x


def ref(x):
    return x


def rms(x):
    with np.errstate(all="ignore"):
        xf = np.asarray(x, dtype=np.float32)
        return (xf / np.sqrt((xf * xf).mean(axis=-1, keepdims=True) + np.float32(1e-6))).astype(x.dtype)


def rms_ref(x):
    x = x.astype(np.float64)
    return x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + 1e-6)


def nan_ref(x):
    return np.full(x.shape, np.nan)
"""
#: an op whose only failures are edge findings: boundary values square past float32 in any kernel
EDGE_OP = (
    '\n[[ops]]\nname = "edgy"\nmodule = "ops:rms"\nreference = "ops:rms_ref"\ndistributions = ["boundary"]\n'
    "[ops.dims]\nB = [4]\nN = [16]\n"
)
#: an op whose reference is NaN everywhere: nothing can be judged
NAN_REF_OP = '\n[[ops]]\nname = "nanref"\nmodule = "ops:good"\nreference = "ops:nan_ref"\n'


def _append(block: str) -> Callable[[Path], None]:
    def prepare(root: Path) -> None:
        with (root / "gpuemu.toml").open("a", encoding="utf-8") as fh:
            fh.write(block)

    return prepare


KERNEL_CU = 'extern "C" __global__ void twice(float* x) { x[threadIdx.x] *= 2.0f; }\n'
KERNEL_TOML = '\n[[kernels]]\nname = "twice"\nsource = "twice.cu"\n[kernels.artifact_checks]\nmax_registers = {}\n'


def env(**extra: str) -> dict[str, str]:
    return kit_env(**{"GPUEMU_USER_CONFIG": os.devnull + ".missing.toml", "PYTHONDONTWRITEBYTECODE": "1", **extra})


def run(argv: list[str], cwd: Path, stdin: bytes | None = None, **extra: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [str(BIN / argv[0]), *argv[1:]], cwd=cwd, env=env(**extra), input=stdin, capture_output=True, timeout=300
    )


@pytest.fixture(scope="module")
def prepared(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Workspaces whose store holds one `gpuemu test`: "pass" (op good), "mixed" (good and bad), "none" (empty)."""
    base = tmp_path_factory.mktemp("exit-codes")
    out = {"none": base / "none"}
    out["none"].mkdir()
    for name, bad in (("pass", ""), ("mixed", BAD_OP)):
        root = write_ws(base / name, TOML.format(bad=bad), {"ops.py": OPS_PY})
        done = run(["gpuemu", "test", "--no-progress"], root)
        assert done.returncode == (1 if bad else 0), done.stdout.decode(errors="replace")
        out[name] = root
    return out


def _add_kernel(max_registers: int) -> Callable[[Path], None]:
    def prepare(root: Path) -> None:
        if shutil.which("nvcc") is None and max_registers > 1:
            pytest.skip("nvcc not found: a kernel that meets its limits needs a real compile")
        (root / "twice.cu").write_text(KERNEL_CU, encoding="utf-8")
        with (root / "gpuemu.toml").open("a", encoding="utf-8") as fh:
            fh.write(KERNEL_TOML.format(max_registers))

    return prepare


def _regressed_baseline(root: Path) -> None:
    """A baseline in which op bad passed: its failure now is a regression."""
    done = run(["gpuemu", "baseline", "store", "old"], root)
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    (path,) = root.rglob("old.json")
    data = json.loads(path.read_text(encoding="utf-8"))
    data["ops"]["bad"]["status"] = "passed"
    path.write_text(json.dumps(data), encoding="utf-8")


def _damaged_store(root: Path) -> None:
    db = root / ".gpuemu" / "gpuemu.db"
    for extra in db.parent.glob("gpuemu.db-*"):
        extra.unlink()
    db.write_bytes(b"SQLite format 3\x00" + b"\xff" * 4000)


def _reported(root: Path) -> None:
    """The stored results as ../out/R.json and R.html, and a key pair in ../keys (outside the workspace)."""
    write_keypair(root.parent / "keys")
    stored_report(root, root.parent / "out")


def _signed(tamper: bool = False) -> Callable[[Path], None]:
    def prepare(root: Path) -> None:
        _reported(root)
        out = root.parent / "out"
        sign([out / "R.html", out / "R.json"], root.parent / "keys" / "signing.pem")
        if tamper:
            (out / "R.html").write_text("<p>all passed</p>", encoding="utf-8")

    return prepare


def _key_in_workspace(root: Path) -> None:
    _reported(root)
    write_keypair(root)


def _lsp(*messages: dict[str, object]) -> bytes:
    out = b""
    for m in messages:
        body = json.dumps({"jsonrpc": "2.0", **m}).encode()
        out += b"Content-Length: %d\r\n\r\n" % len(body) + body
    return out


INITIALIZE = {"id": 1, "method": "initialize", "params": {"processId": None, "rootUri": None, "capabilities": {}}}


@dataclass(frozen=True)
class Scenario:
    command: str  # as the first column of docs/cli.md names it
    code: int
    argv: tuple[str, ...]
    workspace: str = "mixed"
    prepare: Callable[[Path], None] | None = None
    stdin: bytes | None = None
    env: dict[str, str] = field(default_factory=dict)

    @property
    def id(self) -> str:
        return f"{self.code}:{' '.join(self.argv)}"


SCENARIOS = [
    Scenario("gpuemu test", 0, ("gpuemu", "test", "--op", "good")),
    Scenario("gpuemu test", 1, ("gpuemu", "test", "--op", "bad")),
    Scenario("gpuemu test", 2, ("gpuemu", "test", "--op", "nosuch")),
    # edge findings only pass, unless --strict; an op that judged nothing never passes
    Scenario("gpuemu test", 0, ("gpuemu", "test", "--op", "edgy"), prepare=_append(EDGE_OP)),
    Scenario("gpuemu test", 1, ("gpuemu", "test", "--op", "edgy", "--strict"), prepare=_append(EDGE_OP)),
    Scenario("gpuemu test", 1, ("gpuemu", "test", "--op", "nanref"), prepare=_append(NAN_REF_OP)),
    Scenario("gpuemu-ls --check", 1, ("gpuemu-ls", "--check", "--op", "nanref"), prepare=_append(NAN_REF_OP)),
    Scenario("gpuemu fuzz", 0, ("gpuemu", "fuzz", "--op", "good", "--iterations", "3")),
    Scenario("gpuemu fuzz", 1, ("gpuemu", "fuzz", "--op", "bad", "--iterations", "3")),
    Scenario("gpuemu fuzz", 2, ("gpuemu", "fuzz", "--op", "good", "--dtype", "float16")),
    Scenario("gpuemu reproduce", 0, ("gpuemu", "reproduce", "--op", "good", "--seed", "1")),
    Scenario("gpuemu reproduce", 1, ("gpuemu", "reproduce", "--op", "bad", "--seed", "1")),
    Scenario("gpuemu reproduce", 2, ("gpuemu", "reproduce", "--op", "bad", "--seed", "1", "--minimized")),
    Scenario("gpuemu minimize", 1, ("gpuemu", "minimize", "--op", "bad", "--seed", "1", "--max-trials", "10")),
    Scenario("gpuemu minimize", 2, ("gpuemu", "minimize", "--op", "good", "--seed", "1")),
    Scenario("gpuemu failures", 0, ("gpuemu", "failures")),
    Scenario("gpuemu failures", 0, ("gpuemu", "failures", "--exit-code", "--op", "good")),
    Scenario("gpuemu failures", 0, ("gpuemu", "failures", "--exit-code", "--format", "json"), "pass"),
    Scenario("gpuemu failures", 1, ("gpuemu", "failures", "--exit-code")),
    Scenario("gpuemu failures", 1, ("gpuemu", "failures", "--exit-code", "--op", "bad", "--format", "json")),
    Scenario("gpuemu failures", 2, ("gpuemu", "failures", "--exit-code", "--op", "nosuch")),
    Scenario("gpuemu ops", 0, ("gpuemu", "ops")),
    Scenario("gpuemu ops", 2, ("gpuemu", "ops"), "none"),
    Scenario("gpuemu calibrate", 0, ("gpuemu", "calibrate", "--op", "good", "--iterations", "8")),
    Scenario("gpuemu calibrate", 1, ("gpuemu", "calibrate", "--op", "bad", "--iterations", "8")),
    Scenario("gpuemu calibrate", 2, ("gpuemu", "calibrate", "--op", "good", "--method", "p42")),
    Scenario("gpuemu lint", 0, ("gpuemu", "lint"), "pass", _add_kernel(255)),
    Scenario("gpuemu lint", 1, ("gpuemu", "lint"), "pass", _add_kernel(1)),
    Scenario("gpuemu lint", 2, ("gpuemu", "lint"), "pass"),
    Scenario("gpuemu report", 0, ("gpuemu", "report"), "pass"),
    Scenario("gpuemu report", 1, ("gpuemu", "report")),
    Scenario("gpuemu report", 2, ("gpuemu", "report", "--merge", "missing.json")),
    Scenario("gpuemu baseline", 0, ("gpuemu", "baseline", "store", "main")),
    Scenario("gpuemu baseline", 0, ("gpuemu", "baseline", "diff", "old"), prepare=_regressed_baseline),
    Scenario(
        "gpuemu baseline",
        1,
        ("gpuemu", "baseline", "diff", "old", "--fail-on-regression"),
        "mixed",
        _regressed_baseline,
    ),
    Scenario("gpuemu baseline", 2, ("gpuemu", "baseline", "show", "nosuch")),
    Scenario("gpuemu store", 0, ("gpuemu", "store", "check")),
    Scenario("gpuemu store", 1, ("gpuemu", "store", "check"), prepare=_damaged_store),
    Scenario("gpuemu store", 2, ("gpuemu", "store", "check"), "none"),
    Scenario("gpuemu init", 0, ("gpuemu", "init", "starter"), "none"),
    Scenario("gpuemu init", 2, ("gpuemu", "init", "."), "pass"),
    Scenario("gpuemu ci", 0, ("gpuemu", "ci", "--quick", "--iterations", "2"), "pass"),
    Scenario("gpuemu ci", 1, ("gpuemu", "ci", "--quick", "--iterations", "2")),
    Scenario("gpuemu ci", 2, ("gpuemu", "ci", "--shard", "0/2")),
    Scenario("gpuemu-ls --check", 0, ("gpuemu-ls", "--check", "--quick", "--iterations", "2"), "pass"),
    Scenario("gpuemu-ls --check", 1, ("gpuemu-ls", "--check", "--quick", "--iterations", "2")),
    Scenario("gpuemu-ls --check", 2, ("gpuemu-ls", "--check", "--op", "nosuch")),
    Scenario(
        "gpuemu-ls", 0, ("gpuemu-ls",), stdin=_lsp(INITIALIZE, {"id": 2, "method": "shutdown"}, {"method": "exit"})
    ),
    Scenario("gpuemu-ls", 1, ("gpuemu-ls",), stdin=_lsp(INITIALIZE, {"method": "exit"})),
    Scenario("gpuemu-ls", 2, ("gpuemu-ls", "--no-such-flag")),
    Scenario(
        "gpuemu attest", 0, ("gpuemu", "attest", "../out/R.json", "--key", "../keys/signing.pem"), prepare=_reported
    ),
    Scenario(
        "gpuemu attest", 2, ("gpuemu", "attest", "../out/R.json", "--key", "signing.pem"), prepare=_key_in_workspace
    ),
    Scenario(
        "gpuemu verify", 0, ("gpuemu", "verify", "../out/R.json", "--key", "../keys/signing.pub"), prepare=_signed()
    ),
    Scenario(
        "gpuemu verify", 1, ("gpuemu", "verify", "../out/R.json", "--key", "../keys/signing.pub"), prepare=_signed(True)
    ),
    Scenario(
        "gpuemu verify", 2, ("gpuemu", "verify", "../out/R.json", "--key", "../keys/missing.pub"), prepare=_signed()
    ),
    Scenario("store error", 2, ("gpuemu", "failures"), env={"GPUEMU_STORE": "."}),  # a folder is no SQLite file
    Scenario(
        "store error", 2, ("gpuemu-ls", "--check", "--quick", "--iterations", "2"), "pass", env={"GPUEMU_STORE": "."}
    ),
]
INTERRUPTED = [("gpuemu", "test", "--no-progress"), ("gpuemu-ls", "--check", "--no-progress")]


def documented() -> set[tuple[str, int]]:
    """(command, code) of every code docs/cli.md lists: the per-command table's cells that are not "—", and the
    "every command" table (its store row as command "store error", Ctrl-C as "interrupted")."""
    text = DOC.read_text(encoding="utf-8")
    out: set[tuple[str, int]] = set()
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and (m := re.fullmatch(r"`(gpuemu[^`]*)`", cells[0])):
            out |= {(m.group(1), code) for code, cell in enumerate(cells[1:]) if cell != "—"}
        elif len(cells) == 2 and cells[1].isdigit():
            out.add(
                (
                    "store error" if "store" in cells[0] else "interrupted" if "Ctrl-C" in cells[0] else cells[0],
                    int(cells[1]),
                )
            )
    return out


def test_every_documented_exit_code_has_a_scenario_and_every_command_a_row() -> None:
    tested = {(s.command, s.code) for s in SCENARIOS} | {("interrupted", 130)}
    assert documented() == tested
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    rows = {c for c, _ in documented()}
    assert {f"gpuemu {name}" for name in sub.choices} <= rows  # type: ignore[attr-defined]


@pytest.mark.parametrize("s", SCENARIOS, ids=[s.id for s in SCENARIOS])
def test_documented_exit_code(s: Scenario, prepared: dict[str, Path], tmp_path: Path) -> None:
    root = tmp_path / "ws"
    shutil.copytree(prepared[s.workspace], root)
    if s.prepare is not None:
        s.prepare(root)
    done = run(list(s.argv), root, s.stdin, **s.env)
    out = (done.stdout + done.stderr).decode(errors="replace")
    assert done.returncode == s.code, f"{' '.join(s.argv)} exited {done.returncode}, docs/cli.md says {s.code}:\n{out}"
    assert "Traceback" not in out


@pytest.mark.parametrize("argv", INTERRUPTED, ids=[" ".join(a) for a in INTERRUPTED])
def test_ctrl_c_exits_130(argv: tuple[str, ...], tmp_path: Path) -> None:
    toml = TOML.format(bad="").replace('"ops:good"', '"ops:slow"')
    root = write_ws(tmp_path / "ws", toml.replace("iterations = 4", "iterations = 1"), {"ops.py": OPS_PY})
    proc = subprocess.Popen(
        [str(BIN / argv[0]), *argv[1:]],
        cwd=root,
        env=env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # a shell's background job ignores it
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not list((root / ".gpuemu").glob("gpuemu.db*")):  # the run started
            time.sleep(0.1)
        time.sleep(1.0)
        proc.send_signal(signal.SIGINT)
        sent = time.monotonic()
        out, err = proc.communicate(timeout=120)
        waited = time.monotonic() - sent
    finally:
        proc.kill()
    text = (out + err).decode(errors="replace")
    assert proc.returncode == 130, text
    # the op sleeps 60 s: Ctrl-C stops its worker instead of waiting for the case (the gate waited 86 s)
    assert waited < 30, f"exited {waited:.0f} s after Ctrl-C"
    assert "interrupted" in text and "Traceback" not in text


def test_server_help_lists_the_gate_and_its_flags(tmp_path: Path) -> None:
    done = run(["gpuemu-ls", "--help"], tmp_path)
    out = done.stdout.decode()
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    assert "--stdio" in out and "--tcp" in out  # the server's own flags
    gate = out.split("--check", 1)[1]
    for flag in ("--quick", "--thorough", "--format", "--output", "--jobs", "--seed", "--iterations", "--baseline"):
        assert flag in gate, flag
    for flag in ("--fail-on-regression", "--shard", "--op", "--no-kernels"):
        assert flag in gate, flag
    assert "exit status: 0" in out


def test_failures_exit_code_follows_the_selected_ops(prepared: dict[str, Path]) -> None:
    root = prepared["mixed"]
    listed = run(["gpuemu", "failures", "--exit-code", "--op", "bad"], root)
    assert listed.returncode == 1 and b"failing cases" in listed.stdout, listed.stdout
    plain = run(["gpuemu", "failures", "--op", "bad"], root)
    assert plain.returncode == 0 and plain.stdout == listed.stdout  # the same listing; only the code differs
