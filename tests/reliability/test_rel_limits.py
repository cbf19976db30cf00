"""Limits on worker processes: wall time, CPU time, address space, and kills of the whole process group.

Each test runs real workers (forked by the zygote, and as ``python -m gpuemu_ls.engine.run.worker`` with
``GPUEMU_NO_ZYGOTE=1`` where the mode matters) and looks at them from outside, through ``/proc``:
their ``limits``, whether they and what they started are still alive. Every process a run starts
carries a tag in its environment, so leftovers are found wherever they were reparented.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import relkit
from kit.ops import DOUBLE_REF_SCRIPT
from kit.store import db_path

PROBE_PY = """import ctypes
import os
import resource
import subprocess
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def _note(*values):
    with open(os.path.join(HERE, "notes.txt"), "a") as fh:
        fh.write(" ".join(str(v) for v in values) + "\\n")


def reference(x):
    return np.asarray(x, dtype=np.float64) * 2.0


def sleeper(x):
    _note(os.getpid())
    time.sleep(1000)


def probe(x):
    _note(os.getpid())
    time.sleep(1.5)
    return x * 2


def spawn_and_hang(x):
    child = subprocess.Popen(["sleep", "600"])
    _note(os.getpid(), child.pid)
    time.sleep(1000)


def spawn_and_segfault(x):
    child = subprocess.Popen(["sleep", "600"])
    _note(os.getpid(), child.pid)
    time.sleep(0.2)
    ctypes.string_at(0)


def burn_cpu(x):
    _note(os.getpid())
    used = resource.getrusage(resource.RUSAGE_SELF)
    soft, hard = resource.getrlimit(resource.RLIMIT_CPU)
    resource.setrlimit(resource.RLIMIT_CPU, (int(used.ru_utime + used.ru_stime) + 1, hard))
    while True:
        pass


def allocate_2gb(x):
    _note(os.getpid())
    big = np.ones(2**28)
    return x * 2 + big[0] - 1
"""


def probe_ws(root: Path, *, timeout: float = 1.0, memory_mb: int | None = 1024) -> Path:
    validation = f"timeout = {timeout}\n" + (f"memory_limit_mb = {memory_mb}\n" if memory_mb else "")
    toml = relkit.HEADER.format(name="limits", validation=validation, quick=1)
    for name in ("sleeper", "probe", "spawn_and_hang", "spawn_and_segfault", "burn_cpu", "allocate_2gb"):
        extra = "\ntimeout = 60" if name == "burn_cpu" else ""
        toml += relkit.op_block(name, f'module = "kern:{name}"\nreference = "kern:reference"{extra}')
    return relkit.write_ws(root, toml, {"kern.py": PROBE_PY})


def notes(root: Path) -> list[list[int]]:
    try:
        return [[int(v) for v in line.split()] for line in (root / "notes.txt").read_text().splitlines() if line]
    except (OSError, ValueError):
        return []


def start_cli(root: Path, tag: str, *args: str, no_zygote: bool = False, out: Path | None = None) -> Any:
    cmd = [*relkit.CLI, "-C", str(root), "test", "--quick", "--no-progress", *args]
    if out is not None:
        cmd += ["--format", "json", "--output", str(out)]
    return subprocess.Popen(
        cmd,
        env=relkit.child_env({relkit.TAG_VAR: tag}, no_zygote=no_zygote),
        cwd=str(root),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # as a user's terminal delivers Ctrl-C: a test suite started as a background job (`pytest &`, nohup)
        # has SIGINT ignored, which its children inherit, and Python then installs no KeyboardInterrupt
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def run_json(root: Path, op: str, *, no_zygote: bool = False, timeout: float = 120) -> tuple[dict[str, Any], str]:
    tag = relkit.new_tag()
    out = root / f"{op}.json"
    proc = start_cli(root, tag, "--op", op, no_zygote=no_zygote, out=out)
    stdout, stderr = proc.communicate(timeout=timeout)
    assert proc.returncode in (0, 1), stdout + stderr
    assert relkit.no_traceback(stdout + stderr), stderr
    assert relkit.wait_gone(relkit.tagged(tag), 15) == [], "processes outlived the CLI"
    return json.loads(out.read_text(encoding="utf-8"))["ops"][0], stdout


MODES = ["zygote", "no_zygote"]


@pytest.mark.parametrize("mode", MODES)
def test_wall_time_timeout_kills_a_sleeping_op(tmp_path: Path, mode: str) -> None:
    relkit.record("limits", cases=1)
    root = probe_ws(tmp_path / "ws")
    t0 = time.monotonic()
    entry, _ = run_json(root, "sleeper", no_zygote=mode == "no_zygote")
    elapsed = time.monotonic() - t0
    assert entry["status"] == "error" and [f["kind"] for f in entry["failures"]][:1] == ["op_timeout"], entry
    assert "no answer within 1 s" in entry["failures"][0]["message"]
    assert elapsed < 60, elapsed
    (worker,) = notes(root)[0]
    assert not relkit.alive(worker)


def _limits(pid: int) -> dict[str, tuple[str, str]]:
    out = {}
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines()[1:]:
        m = re.match(r"(.+?)\s{2,}(\S+)\s+(\S+)", line)
        if m:
            out[m.group(1).strip()] = (m.group(2), m.group(3))
    return out


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.mark.parametrize("mode", MODES)
def test_cpu_time_and_address_space_limits_are_set_on_workers(
    tmp_path: Path, mode: str, cleanup_pids: list[int]
) -> None:
    """Read from /proc while a case runs: RLIMIT_CPU a little above what the case may use (timeout x CPUs),
    RLIMIT_AS at memory_limit_mb."""
    relkit.record("limits", cases=1)
    root = probe_ws(tmp_path / "ws", timeout=3.0, memory_mb=1024)
    tag = relkit.new_tag()
    proc = start_cli(root, tag, "--op", "probe", no_zygote=mode == "no_zygote")
    cleanup_pids.append(proc.pid)
    (worker,) = relkit.wait_until(lambda: notes(root), 120, "the probe case")[0]
    assert worker in relkit.worker_pids(proc.pid)
    limits = _limits(worker)
    used = _cpu_seconds(worker)
    soft_cpu, _ = limits["Max cpu time"]
    assert soft_cpu != "unlimited", limits["Max cpu time"]
    budget = 3.0 * (os.cpu_count() or 1) + 1.0
    assert used < int(soft_cpu) <= used + budget + 2, (soft_cpu, used, budget)
    assert limits["Max address space"] == (str(1024 * 2**20), str(1024 * 2**20)), limits["Max address space"]
    proc.communicate(timeout=120)
    assert proc.returncode == 0
    assert relkit.wait_gone(relkit.tagged(tag), 15) == []


def test_cpu_limit_kill_is_reported_as_such(tmp_path: Path) -> None:
    """A worker that hits RLIMIT_CPU (here one second above what it used) dies of SIGXCPU, and the case says so."""
    relkit.record("limits", cases=1)
    root = probe_ws(tmp_path / "ws")
    entry, _ = run_json(root, "burn_cpu")
    assert entry["status"] == "error", entry
    failure = entry["failures"][0]
    assert failure["kind"] == "op_crash" and "SIGXCPU" in failure["message"] and "CPU time limit" in failure["message"]


def test_memory_limit_turns_a_2gb_allocation_into_a_clear_error(tmp_path: Path) -> None:
    relkit.record("limits", cases=1)
    root = probe_ws(tmp_path / "ws", memory_mb=1024)
    entry, _ = run_json(root, "allocate_2gb")
    failure = entry["failures"][0]
    assert entry["status"] == "error" and failure["kind"] == "op_error", entry
    assert "MemoryError" in failure["message"] and "2.00 GiB" in failure["message"], failure
    assert failure["file"] == "kern.py" and failure["line"] == relkit.line_of(root / "kern.py", "np.ones(2**28)")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("how", ["timeout", "crash"])
def test_what_an_op_started_dies_with_its_worker(tmp_path: Path, mode: str, how: str) -> None:
    """The op starts a child process, then hangs (killed at the timeout) or segfaults: the whole process group
    goes, the child included."""
    relkit.record("limits", cases=1)
    root = probe_ws(tmp_path / "ws")
    op = "spawn_and_hang" if how == "timeout" else "spawn_and_segfault"
    entry, _ = run_json(root, op, no_zygote=mode == "no_zygote")
    assert [f["kind"] for f in entry["failures"]][:1] == ["op_timeout" if how == "timeout" else "op_crash"], entry
    worker, child = notes(root)[0]
    assert relkit.wait_gone([worker, child], 15) == [], f"{'worker' if relkit.alive(worker) else 'child'} survived"


def _params_outlive() -> list[Any]:
    return [
        pytest.param("zygote", id="zygote"),
        pytest.param("no_zygote", id="no_zygote"),
    ]


@pytest.mark.parametrize("mode", _params_outlive())
def test_nothing_outlives_a_killed_cli(tmp_path: Path, mode: str, cleanup_pids: list[int]) -> None:
    """kill -9 of the CLI (a cancelled CI job) while an op runs a child process: nothing it started survives."""
    relkit.record("limits", cases=1)
    root = probe_ws(tmp_path / "ws", timeout=60)
    tag = relkit.new_tag()
    proc = start_cli(root, tag, "--op", "spawn_and_hang", no_zygote=mode == "no_zygote")
    cleanup_pids.append(proc.pid)
    worker, child = relkit.wait_until(lambda: notes(root), 120, "the op's child")[0]
    cleanup_pids += [worker, child]
    started = relkit.tagged(tag)
    assert {worker, child} <= set(started)
    proc.kill()
    proc.communicate(timeout=30)
    relkit.record("faults", cli_kill9=1)
    left = relkit.wait_gone(started, 5)
    assert left == [], f"outlived the CLI: {[relkit.cmdline(p) for p in left]}"


def test_sigint_stops_the_cli_and_everything_it_started(tmp_path: Path, cleanup_pids: list[int]) -> None:
    """Ctrl-C during a run: exit 130 with one line, no traceback, no process left."""
    relkit.record("limits", cases=1)
    root = probe_ws(tmp_path / "ws", timeout=60)
    tag = relkit.new_tag()
    proc = start_cli(root, tag, "--op", "spawn_and_hang")
    cleanup_pids.append(proc.pid)
    worker, child = relkit.wait_until(lambda: notes(root), 120, "the op's child")[0]
    cleanup_pids += [worker, child]
    started = relkit.tagged(tag)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, (proc.returncode, out, err)
    assert relkit.no_traceback(out + err) and "interrupted" in err, err
    assert relkit.wait_gone(started, 15) == []
    assert relkit.integrity(db_path(root)) == "ok"


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("mode", "end"),
    [
        ("zygote", "shutdown"),
        ("no_zygote", "shutdown"),
        ("zygote", "kill9"),
        ("no_zygote", "kill9"),
    ],
)
async def test_nothing_outlives_the_server(tmp_path: Path, mode: str, end: str, cleanup_pids: list[int]) -> None:
    """The server is shut down (LSP shutdown/exit) or killed -9 while an op runs a child process: workers,
    the zygote and the child all go."""
    relkit.record("limits", cases=1)
    root = probe_ws(tmp_path / "ws", timeout=60)
    tag = relkit.new_tag()
    client = await relkit.start_server(root, env=relkit.child_env({relkit.TAG_VAR: tag}, no_zygote=mode == "no_zygote"))
    relkit.record("server", started=1)
    try:
        run = asyncio.ensure_future(
            relkit.request(client, "gpuemu/runOps", {"ids": ["op:spawn_and_hang"]}, timeout=300)
        )
        worker, child = (await relkit.wait_for(lambda: notes(root), 120, "the op's child", client))[0]
        cleanup_pids += [worker, child]
        started = relkit.tagged(tag)
        assert {worker, child} <= set(started)
        if end == "shutdown":
            code = await relkit.stop_server(client)
            assert code == 0
        else:
            os.kill(client.server_pid, signal.SIGKILL)
            relkit.record("faults", server_kill9=1)
    finally:
        await relkit.force_close(client)
    run.cancel()
    left = relkit.wait_gone(started, 5)
    assert left == [], f"outlived the server: {[relkit.cmdline(p) for p in left]}"


#: a process that opens the workspace's store and holds its write lock for five minutes
LOCKER = (
    "import sqlite3, sys, time\n"
    "c = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=60)\n"
    "c.execute('BEGIN IMMEDIATE')\n"
    "open(sys.argv[2], 'w').close()\n"
    "time.sleep(300)\n"
)
GRAB = """
def _grab_store_lock(here):
    import os, subprocess, sys, time
    marker = os.path.join(here, "LOCKER-started")
    if os.path.exists(marker):
        return
    db = os.path.join(here, ".gpuemu", "gpuemu.db")
    subprocess.Popen([sys.executable, "-c", {locker!r}, db, marker], start_new_session=True)
    for _ in range(200):
        if os.path.exists(marker):
            return
        time.sleep(0.05)
"""


@pytest.mark.parametrize("who", ["script-reference", "in-process-op"])
def test_a_descendant_holding_the_store_lock_never_stalls_or_loses_the_run(tmp_path: Path, who: str) -> None:
    """A setsid child of a reference script (or of an in-process op) that takes the store's write lock made the
    CLI wait 137 s and lose the run, left `running`. What a script starts ends with its call; a lock holder the
    run itself started is ended when a store write finds it in the way; the run is stored."""
    grab = GRAB.format(locker=LOCKER)
    kern = (
        "import os\n\nimport numpy as np\n"
        + grab
        + (
            "\n\ndef double(x):\n"
            + ("    _grab_store_lock(os.path.dirname(os.path.abspath(__file__)))\n" if who == "in-process-op" else "")
            + "    return x * 2\n\n\ndef reference(x):\n    return np.asarray(x, dtype=np.float64) * 2.0\n"
        )
    )
    ref = DOUBLE_REF_SCRIPT.replace(
        "import json\n",
        "import json\nimport os\n"
        + grab
        + "\n_grab_store_lock(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))\n",
        1,
    )
    toml = relkit.HEADER.format(name="locker", validation="iterations = 6\n", quick=2)
    reference = 'reference = "refs/ref.py"' if who == "script-reference" else 'reference = "kern:reference"'
    toml += relkit.op_block("double", f'module = "kern:double"\n{reference}')
    root = relkit.write_ws(tmp_path / "ws", toml, {"kern.py": kern, "refs/ref.py": ref})
    t0 = time.monotonic()
    done = relkit.run_cli(root, "test", "--no-progress", timeout=300)
    took = time.monotonic() - t0
    assert (root / "LOCKER-started").exists(), "the locker never started: the test proves nothing"
    assert done.returncode == 0 and "stored" in done.stdout, done.stdout[-2000:] + done.stderr[-2000:]
    assert took < 60, f"the run took {took:.0f} s"
    runs = relkit.store_rows(root / ".gpuemu" / "gpuemu.db", "SELECT status FROM runs")
    assert [r[0] for r in runs] == ["passed"], runs
    lockers = [p for p in relkit.gpuemu_processes() if "BEGIN IMMEDIATE" in relkit.cmdline(p)]
    assert not lockers, f"the locker outlived the run: {lockers}"
    relkit.record("limits", cases=1)
