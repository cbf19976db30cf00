"""`--jobs auto` (issue 16, item 4): the default of `gpuemu test`, `fuzz` and the gate is one worker per core this
process may really use: its CPU affinity (taskset, cpusets) and its cgroup's CPU quota (v2 cpu.max, v1
cfs quota), never the host's core count. An explicit `-j N` still wins; `[ci] parallel_jobs` may say "auto"."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from gatekit import copy_example, env, gpuemu, jdoc, out

from gpuemu_ls.engine.config.keys import MAX_JOBS
from gpuemu_ls.engine.run.cpus import available_cpus, cgroup_cpu_quota, resolve_jobs

RESOLVE = (
    "import json; from gpuemu_ls.engine.config.load import load_config;"
    "from gpuemu_ls.engine.run.cpus import available_cpus, resolve_jobs;"
    "from gpuemu_ls.engine.tools.gate import default_jobs;"
    "import sys, pathlib; cfg = load_config(pathlib.Path(sys.argv[1]));"
    "print(json.dumps([available_cpus(), resolve_jobs(None), default_jobs(cfg)]))"
)


def _resolve(prefix: list[str], ws: Path) -> list[int]:
    proc = subprocess.run(
        [*prefix, sys.executable, "-c", RESOLVE, str(ws)], capture_output=True, text=True, timeout=120, env=env()
    )
    assert proc.returncode == 0, out(proc)
    return json.loads(proc.stdout)


@pytest.mark.skipif(shutil.which("taskset") is None, reason="taskset (util-linux) is not installed")
def test_auto_honours_cpu_affinity_in_a_real_process(tmp_path: Path) -> None:
    ws = copy_example("quickstart", tmp_path / "qs")
    assert _resolve(["taskset", "-c", "0"], ws) == [1, 1, 1]
    mine = len(os.sched_getaffinity(0))
    quota = cgroup_cpu_quota()
    expect = mine if quota is None else min(mine, max(1, -(-int(quota * 1000) // 1000)))
    assert _resolve([], ws) == [expect, expect, expect]


def test_parallel_jobs_setting_and_flag_order(tmp_path: Path) -> None:
    assert resolve_jobs(3, "auto") == 3  # -j N wins over the setting
    assert resolve_jobs(None, 5) == 5
    assert resolve_jobs("auto", 5) == available_cpus()  # -j auto wins over a number in the setting
    assert resolve_jobs(None, None) == resolve_jobs(None, "auto") == available_cpus()
    assert resolve_jobs(10_000) == MAX_JOBS
    # memory_limit_mb bounds auto to the workers that fit in the machine's memory at that cap
    assert resolve_jobs(None, memory_limit_mb=1 << 24) == 1


def _cgroup_v2(root: Path, quotas: dict[str, str]) -> Path:
    (root / "fs").mkdir(parents=True)
    (root / "fs" / "cgroup.controllers").write_text("cpu memory\n")
    for rel, text in quotas.items():
        folder = root / "fs" / rel
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "cpu.max").write_text(text)
    (root / "proc-cgroup").write_text("0::/ci/job\n")
    return root


def test_cgroup_v2_cpu_max_bounds_auto(tmp_path: Path) -> None:
    """A real cgroup v2 tree on disk: this process's cgroup and every one above it count; `max` is no limit."""
    r = _cgroup_v2(tmp_path / "a", {"": "max 100000\n", "ci": "max 100000\n", "ci/job": "150000 100000\n"})
    assert cgroup_cpu_quota(r / "fs", r / "proc-cgroup") == 1.5
    assert available_cpus(r / "fs", r / "proc-cgroup") == min(2, len(os.sched_getaffinity(0)))  # rounded up
    r = _cgroup_v2(tmp_path / "b", {"ci": "50000 100000\n", "ci/job": "400000 100000\n"})
    assert cgroup_cpu_quota(r / "fs", r / "proc-cgroup") == 0.5  # the parent's quota binds the child
    assert available_cpus(r / "fs", r / "proc-cgroup") == 1
    r = _cgroup_v2(tmp_path / "c", {"": "max 100000\n"})
    assert cgroup_cpu_quota(r / "fs", r / "proc-cgroup") is None
    assert available_cpus(r / "fs", r / "proc-cgroup") == len(os.sched_getaffinity(0))


def test_cgroup_v1_cfs_quota_bounds_auto(tmp_path: Path) -> None:
    cpu = tmp_path / "fs" / "cpu,cpuacct" / "docker" / "abc"
    cpu.mkdir(parents=True)
    (cpu / "cpu.cfs_quota_us").write_text("100000\n")
    (cpu / "cpu.cfs_period_us").write_text("100000\n")
    (tmp_path / "proc-cgroup").write_text("4:memory:/docker/abc\n3:cpu,cpuacct:/docker/abc\n")
    assert cgroup_cpu_quota(tmp_path / "fs", tmp_path / "proc-cgroup") == 1.0
    assert available_cpus(tmp_path / "fs", tmp_path / "proc-cgroup") == 1


def test_cli_accepts_auto_and_still_bounds_numbers(tmp_path: Path) -> None:
    ws = copy_example("quickstart", tmp_path / "qs")
    for argv in (
        ["test", "-j", "auto", "--quick", "--op", "gelu", "--iterations", "2"],
        ["fuzz", "--op", "gelu", "--jobs", "auto", "--iterations", "4"],
        ["ci", "--jobs", "auto", "--quick", "--op", "gelu", "--iterations", "2"],
    ):
        proc = gpuemu(*argv, "--format", "json", "--no-progress", cwd=ws)
        assert proc.returncode == 0, out(proc)
        assert jdoc(proc)["summary"]["passed"] == 1
    for bad in ("0", "257", "some"):
        proc = gpuemu("test", "-j", bad, cwd=ws)
        assert proc.returncode == 2 and "jobs must be in 1..256" in proc.stderr, out(proc)


def test_parallel_jobs_auto_in_gpuemu_toml(tmp_path: Path) -> None:
    ws = copy_example("quickstart", tmp_path / "qs")
    toml = ws / "gpuemu.toml"
    text = toml.read_text(encoding="utf-8")
    toml.write_text(text + '\n[ci]\nparallel_jobs = "auto"\n', encoding="utf-8")
    proc = gpuemu("ci", "--quick", "--op", "gelu", "--iterations", "2", "--format", "json", cwd=ws)
    assert proc.returncode == 0, out(proc)
    toml.write_text(text + '\n[ci]\nparallel_jobs = "many"\n', encoding="utf-8")
    proc = gpuemu("ci", "--quick", "--op", "gelu", "--iterations", "2", cwd=ws)
    assert proc.returncode == 2 and "parallel_jobs" in proc.stderr, out(proc)
