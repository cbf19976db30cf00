"""Validation with real worker processes: crashes, aborts, hangs and import errors become results."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest
from kit.ops import op_toml, project_toml

from gpuemu_ls.engine.cases.plan import derive_case
from gpuemu_ls.engine.config.load import load_config
from gpuemu_ls.engine.config.model import Config
from gpuemu_ls.engine.run.validate import RunOptions, RunResult, crash_site, run_validation, this_case_stderr
from gpuemu_ls.engine.run.worker import CASE_MARK
from gpuemu_ls.engine.store.db import Store

TOML = (
    project_toml(validation={"dtypes": ["float32"], "timeout": 20})
    + op_toml(
        "segv",
        module="ops:segv",
        reference="ops:reference",
        layouts=["contiguous"],
        distributions=["normal"],
        iterations=1,
        extra="seeds = @SEGV_SEEDS@",
        inputs={"x": ["N"]},
        dims={"N": (2, 40, 8)},
    )
    + op_toml("abort", module="ops:abort", reference="ops:reference", iterations=2, inputs={"x": ["N"]}, dims={"N": 3})
    + op_toml(
        "hang",
        module="ops:hang",
        reference="ops:reference",
        layouts=["contiguous"],
        distributions=["normal"],
        iterations=4,
        timeout=1,
        inputs={"x": ["N"]},
        dims={"N": [4, 5, 8, 7]},
    )
    + op_toml("refcrash", module="ops:ok", reference="refs/crash.py", iterations=2, inputs={"x": ["N"]}, dims={"N": 4})
    + op_toml(
        "syntax", module="later_broken:op", reference="ops:reference", iterations=2, inputs={"x": ["N"]}, dims={"N": 4}
    )
    + op_toml(
        "raises_at_import",
        module="raises_at_import:op",
        reference="ops:reference",
        iterations=2,
        inputs={"x": ["N"]},
        dims={"N": 4},
    )
    + op_toml("client", reference="ops:reference", execution_mode="client_side", inputs={"x": ["N"]}, dims={"N": 4})
    + op_toml("good", module="ops:ok", reference="ops:reference", iterations=8, dims={"B": (1, 4, 2), "N": (1, 64, 16)})
    + op_toml(
        "bad", module="ops:bad_tail", reference="ops:reference", iterations=8, dims={"B": (1, 4, 2), "N": (1, 64, 16)}
    )
    + op_toml("slow", module="ops:slow", reference="ops:reference", iterations=200, inputs={"x": ["N"]}, dims={"N": 4})
)

OPS = """
import ctypes
import os
import subprocess
import sys
import time

import numpy as np


def segv(x):
    if x.shape[0] % 2:
        ctypes.string_at(0)
    return x.copy()


def abort(x):
    os.abort()


def hang(x):
    if x.shape[0] % 2:
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "gpuemu-test-grandchild"])
        time.sleep(60)
    return x.copy()


def ok(x):
    return np.array(x, copy=True)


def bad_tail(x):
    y = np.array(x, copy=True)
    if x.shape[-1] % 8:
        y[..., -1] += 1
    return y


def slow(x):
    time.sleep(0.05)
    return np.array(x, copy=True)


def reference(x):
    return x
"""

FILES = {
    "ops.py": OPS,
    "refs/crash.py": "import os\nimport sys\n\nsys.stdin.read()\nos.abort()\n",
    "later_broken.py": "def op(x):\n    return x\n",
    "raises_at_import.py": "import numpy as np\n\nTABLE = {}\nVALUE = TABLE['missing']\n\n\ndef op(x):\n    return x\n",
}


def _parity_seeds(root: Path) -> list[int]:
    """Seeds whose N covers three odd and three even values, found from the plan itself (no RNG luck)."""
    probe = root / "probe"
    probe.mkdir()
    (probe / "ops.py").write_text("def segv(x):\n    return x\n\ndef reference(x):\n    return x\n")
    (probe / "gpuemu.toml").write_text(
        TOML.split("[[ops]]")[0] + "[[ops]]" + TOML.split("[[ops]]")[1].replace("@SEGV_SEEDS@", "[]")
    )
    op = load_config(probe, user_config=probe / "none.toml").op("segv")
    odd: dict[int, int] = {}
    even: dict[int, int] = {}
    for seed in range(400):
        n = derive_case(op, seed).dims["N"]
        (odd if n % 2 else even).setdefault(n, seed)
        if len(odd) >= 3 and len(even) >= 2:
            break
    o, e = list(odd.values())[:3], list(even.values())[:2]
    return [o[0], e[0], o[1], e[1], o[2]]  # interleaved: three crashes in a row would stop the op early


@pytest.fixture(scope="module")
def cfg(tmp_path_factory: pytest.TempPathFactory, write_tree) -> Config:
    base = tmp_path_factory.mktemp("validate")
    toml = TOML.replace("@SEGV_SEEDS@", str(_parity_seeds(base)))
    root = write_tree(base / "ws", {"gpuemu.toml": toml, **FILES})
    cfg = load_config(root, user_config=root / "none.toml")
    # broken after the config was checked, as when an editor saves a half-typed module
    (root / "later_broken.py").write_text("import numpy as np\n\ndef op(x):\n    return x +* 2\n")
    return cfg


def validate(cfg: Config, *ops: str, **options: object) -> RunResult:
    return run_validation(cfg, RunOptions(ops=list(ops), store=False, **options))  # type: ignore[arg-type]


def worker_children() -> list[int]:
    """Live (non-zombie) processes whose parent is this process and that run the gpuemu worker."""
    me = str(os.getpid())
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if fields[1] == me and fields[0] != "Z" and b"gpuemu_ls.engine.run.worker" in cmdline:
            found.append(int(pid))
    return found


def processes_with(marker: bytes) -> list[int]:
    out = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                if marker in Path(f"/proc/{pid}/cmdline").read_bytes():
                    out.append(int(pid))
            except OSError:
                continue
    return out


def test_segfault_is_an_error_case_and_the_other_cases_still_pass(cfg: Config) -> None:
    (o,) = validate(cfg, "segv").outcomes
    assert o.status == "error" and len(o.cases) == 6  # five pinned seeds and one planned
    crashed = [c for c in o.cases if c.status == "error"]
    odd = sorted(c.spec.dims["N"] for c in o.cases if c.spec.dims["N"] % 2)
    assert len(set(odd)) >= 3 and sorted(c.spec.dims["N"] for c in crashed) == odd
    assert all(c.passed for c in o.cases if c.spec.dims["N"] % 2 == 0)
    for c in crashed:
        assert c.kind == "op_crash" and "SIGSEGV" in c.message and "during the op" in c.message
        assert Path(c.file) == cfg.root / "ops.py"
        assert c.line == OPS.splitlines().index("        ctypes.string_at(0)") + 1
        assert "Segmentation fault" in c.stderr
        assert c.snapshot is not None and c.snapshot["x"].shape == (c.spec.dims["N"],)
    assert o.diagnosis.startswith("errors iff N % 2 != 0")
    assert worker_children() == []


def test_abort_is_a_crash_naming_sigabrt(cfg: Config) -> None:
    (o,) = validate(cfg, "abort").outcomes
    assert o.status == "error" and [c.kind for c in o.cases] == ["op_crash", "op_crash"]
    assert all("SIGABRT" in c.message for c in o.cases)
    assert o.cases[0].line == OPS.splitlines().index("    os.abort()") + 1


def test_hanging_op_times_out_and_the_run_goes_on(cfg: Config) -> None:
    t0 = time.monotonic()
    (o,) = validate(cfg, "hang").outcomes
    elapsed = time.monotonic() - t0
    kinds = {c.spec.dims["N"]: c.kind for c in o.cases}
    assert len(o.cases) == 4 and o.status == "error"
    assert all(kinds[n] == "op_timeout" for n in kinds if n % 2) and all(kinds[n] is None for n in kinds if n % 2 == 0)
    assert all("no answer within 1 s" in c.message for c in o.cases if c.kind)
    stuck = OPS.splitlines().index("        time.sleep(60)") + 1
    assert all((Path(c.file), c.line) == (cfg.root / "ops.py", stuck) for c in o.cases if c.kind)  # the dump
    assert elapsed < 12  # two 1 s timeouts plus worker restarts, not 60 s sleeps
    time.sleep(0.2)
    assert processes_with(b"gpuemu-test-grandchild") == []  # the whole process group was killed
    assert worker_children() == []


def test_reference_crash(cfg: Config) -> None:
    (o,) = validate(cfg, "refcrash").outcomes
    assert o.status == "error" and [c.kind for c in o.cases] == ["reference_crash"] * 2
    assert "SIGABRT" in o.cases[0].message and "during the reference" in o.cases[0].message
    assert Path(o.cases[0].file) == cfg.root / "refs" / "crash.py" and o.cases[0].line == 5


def test_module_with_a_syntax_error(cfg: Config) -> None:
    (o,) = validate(cfg, "syntax").outcomes
    assert o.status == "error" and o.cases == []
    assert o.setup_error["kind"] == "import"
    assert Path(o.setup_error["file"]) == cfg.root / "later_broken.py" and o.setup_error["line"] == 4
    assert "SyntaxError" in o.message


def test_module_raising_at_import(cfg: Config) -> None:
    result = validate(cfg, "raises_at_import")
    (o,) = result.outcomes
    assert o.status == "error" and o.cases == [] and result.exit_code == 1
    assert Path(o.setup_error["file"]) == cfg.root / "raises_at_import.py" and o.setup_error["line"] == 4
    assert "KeyError" in o.message


def test_import_failure_message_is_one_line(cfg: Config) -> None:
    (o,) = validate(cfg, "raises_at_import").outcomes
    assert o.message.startswith("importing 'raises_at_import' failed: KeyError")
    assert "\n" not in o.message and "gpuemu_ls" not in o.message


def test_client_side_op_without_module_is_not_run(cfg: Config) -> None:
    result = validate(cfg, "client")
    (o,) = result.outcomes
    assert o.status == "not_run" and o.cases == [] and "client_side" in o.message
    assert result.status == "not_run" and result.exit_code == 1  # never "passed"


def test_passing_run_exits_zero(cfg: Config) -> None:
    result = validate(cfg, "good")
    assert result.status == "passed" and result.exit_code == 0
    assert [o.count("passed") for o in result.outcomes] == [8]


def test_fail_fast_stops_at_the_first_failing_case(cfg: Config) -> None:
    (full,) = validate(cfg, "bad").outcomes
    first_bad = next(i for i, c in enumerate(full.cases) if not c.passed)
    assert 0 < len([c for c in full.cases if not c.passed]) < len(full.cases)
    (fast,) = validate(cfg, "bad", fail_fast=True).outcomes
    assert len(fast.cases) == first_bad + 1 and fast.stopped == "fail-fast" and fast.status == "failed"
    assert [c.seed for c in fast.cases] == [c.seed for c in full.cases[: first_bad + 1]]


def test_two_jobs_give_the_same_verdicts_as_one(cfg: Config) -> None:
    names = ("segv", "good", "bad", "refcrash", "client")

    def verdicts(jobs: int) -> list[tuple[str, str, list[tuple[int, str, str | None]]]]:
        result = validate(cfg, *names, jobs=jobs)
        return [(o.op, o.status, [(c.seed, c.status, c.kind) for c in o.cases]) for o in result.outcomes]

    one, two = verdicts(1), verdicts(2)
    assert one == two
    assert [v[1] for v in one] == ["error", "passed", "failed", "error", "not_run"]
    assert worker_children() == []


@pytest.mark.parametrize("name", ["segv", "bad", "good", "client"])
def test_one_op_split_over_three_workers_gives_the_verdicts_of_one(cfg: Config, name: str) -> None:
    """Fewer ops than jobs: an op's cases are dealt to several workers; crashes, hangs and failures land on the
    same cases, in plan order, with progress counted over the whole op."""
    seen: list[tuple[int, int]] = []

    def run(jobs: int) -> tuple[str, list[tuple[int, str, str | None]], str]:
        (o,) = validate(cfg, name, jobs=jobs, on_case=lambda _op, _r, i, n: seen.append((i, n))).outcomes
        return o.status, [(c.seed, c.status, c.kind) for c in o.cases], o.diagnosis

    one = run(1)
    seen.clear()
    three = run(3)
    assert one == three
    if name != "client":
        assert sorted(i for i, _ in seen) == list(range(1, len(one[1]) + 1))
        assert {n for _, n in seen} == {len(one[1])}
    assert worker_children() == []


def test_cancel_stops_a_long_run_quickly(cfg: Config) -> None:
    cancel = threading.Event()
    timer = threading.Timer(0.7, cancel.set)
    timer.start()
    t0 = time.monotonic()
    try:
        result = validate(cfg, "slow", "good", cancel=cancel)
    finally:
        timer.cancel()
    elapsed = time.monotonic() - t0
    assert elapsed < 4.0  # 200 cases x 50 ms would take 10 s
    assert result.cancelled and result.status == "cancelled" and result.exit_code == 1
    assert result.outcomes[0].status == "cancelled" and len(result.outcomes[0].cases) < 100
    assert worker_children() == []


def test_results_are_stored(cfg: Config, tmp_path: Path) -> None:
    store = Store(tmp_path / "s.db")
    result = run_validation(cfg, RunOptions(ops=["bad", "segv"], source="test"), store=store)
    run = store.run(result.run_id)
    assert run["status"] == "failed" and run["source"] == "test"
    rows = store.cases(run_id=result.run_id)
    assert len(rows) == sum(len(o.cases) for o in result.outcomes)
    failing = [r for r in rows if r["status"] != "passed"]
    assert failing and all(r["snapshot_id"] for r in failing)
    assert all(r["snapshot_id"] is None for r in rows if r["status"] == "passed")
    ops = store.latest_op_results(kind="op")
    assert ops["bad"]["status"] == "failed" and ops["segv"]["status"] == "error"
    assert ops["segv"]["diagnosis"].startswith("errors iff N % 2 != 0")


def test_crash_site_reads_the_faulthandler_dump(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    dump = (
        "Fatal Python error: Segmentation fault\n\nCurrent thread 0x00007f (most recent call first):\n"
        '  File "/usr/lib/python3.11/ctypes/__init__.py", line 519 in string_at\n'
        f'  File "{root}/kernels/op.py", line 12 in tile\n'
        f'  File "{root}/kernels/op.py", line 30 in op\n'
        '  File "/x/gpuemu_ls/engine/run/runners.py", line 136 in call\n'
    )
    assert crash_site(dump, root) == (f"{root}/kernels/op.py", 12)
    assert crash_site("no frames here", root) == (None, None)


def test_crash_site_ignores_tracebacks_logged_before_the_crash(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    earlier = (
        "Traceback (most recent call last):\n"
        f'  File "{root}/kernels/op.py", line 6, in fallback\n'
        "RuntimeError: fast path unavailable\n"
    )
    dump = (
        "Fatal Python error: Segmentation fault\n\nCurrent thread 0x00007f (most recent call first):\n"
        f'  File "{root}/kernels/op.py", line 15 in op\n'
    )
    assert crash_site(earlier + dump, root) == (f"{root}/kernels/op.py", 15)


def test_crash_site_reads_only_the_case_that_crashed(tmp_path: Path) -> None:
    """A slow earlier case left a watchdog dump; the next case exits without one: no stale site is named."""
    root = tmp_path / "ws"
    slow = (
        f"{CASE_MARK}1 ---\nTimeout (0:00:09)!\nThread 0x00007f (most recent call first):\n"
        f'  File "{root}/kernels/op.py", line 15 in op\n'
    )
    text = this_case_stderr(slow + f"{CASE_MARK}2 ---\nlast words\n")
    assert text == "last words\n" and crash_site(text, root) == (None, None)


def test_crash_site_unescapes_non_ascii_paths_and_skips_pseudo_files(tmp_path: Path) -> None:
    root = tmp_path / "wörk ✓"
    root.mkdir()
    escaped = str(root).replace("ö", "\\xf6").replace("✓", "\\u2713")
    dump = (
        "Fatal Python error: Aborted\n\nCurrent thread 0x00007f (most recent call first):\n"
        f'  File "{escaped}/op.py", line 7 in op\n  File "<frozen runpy>", line 88 in _run_code\n'
    )
    assert crash_site(dump, root) == (f"{root}/op.py", 7)
    assert crash_site('  File "<frozen runpy>", line 88 in _run_code\n', root) == (None, None)
