"""How many worker processes ``--jobs auto`` starts: the cores this process may really use.

``os.cpu_count()`` counts the machine's cores, not the ones a container or ``taskset`` leaves us: a CI
runner limited to 2 CPUs by its cgroup on a 64-core host would otherwise start 64 workers that fight over
2 cores (and take 64 times the memory). So the count is the smallest of

* the CPUs this process may be scheduled on (``sched_getaffinity``: ``taskset``, cpusets);
* the cgroup's CPU quota, rounded up: v2 ``cpu.max`` (``QUOTA PERIOD``, or ``max``) of this process's cgroup
  and every cgroup above it, or v1 ``cpu.cfs_quota_us / cpu.cfs_period_us``;
* with ``memory_limit_mb`` set, how many workers at that cap fit in the machine's (or cgroup's) memory;

and at least 1, at most :data:`~gpuemu_ls.engine.config.keys.MAX_JOBS`. Unreadable files count as no limit.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

from ..config.keys import MAX_JOBS

AUTO = "auto"
CGROUP_ROOT = Path("/sys/fs/cgroup")


def affinity_cpus() -> int:
    """CPUs this process may run on (``taskset``, cpusets), else the machine's count."""
    if hasattr(os, "sched_getaffinity"):
        try:
            return max(1, len(os.sched_getaffinity(0)))
        except OSError:
            pass
    return max(1, os.cpu_count() or 1)


def _own_cgroups(proc_cgroup: Path) -> dict[str, str]:
    """Controller -> cgroup path of this process, from ``/proc/self/cgroup`` (``""`` is the v2 hierarchy)."""
    out: dict[str, str] = {}
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        return out
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) == 3:
            for controller in parts[1].split(",") if parts[1] else [""]:
                out[controller] = parts[2]
    return out


def _ancestors(mount: Path, rel: str) -> list[Path]:
    """``mount/rel`` and each folder above it up to ``mount``: a limit anywhere above binds us too. In a cgroup
    namespace the path may not exist under the mount; the mount's own files (ours, there) are still read."""
    rel_parts = [p for p in rel.strip("/").split("/") if p and p != ".."]
    paths = [mount.joinpath(*rel_parts[:i]) for i in range(len(rel_parts), 0, -1)]
    return [*paths, mount]


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def cgroup_cpu_quota(root: Path = CGROUP_ROOT, proc_cgroup: Path = Path("/proc/self/cgroup")) -> float | None:
    """The tightest CPU quota (in CPUs, may be fractional) of this process's cgroups, or None when unlimited."""
    groups = _own_cgroups(proc_cgroup)
    quotas: list[float] = []
    if (root / "cgroup.controllers").exists() or (root / "cpu.max").exists():  # v2, unified
        for folder in _ancestors(root, groups.get("", "/")):
            text = _read(folder / "cpu.max")
            if text:
                fields = text.split()
                if len(fields) == 2 and fields[0] != "max":
                    try:
                        quota, period = int(fields[0]), int(fields[1])
                    except ValueError:
                        continue
                    if quota > 0 and period > 0:
                        quotas.append(quota / period)
    else:  # v1: the cpu controller's own mount
        rel = groups.get("cpu", "/")
        for mount in (root / "cpu", root / "cpu,cpuacct", root / "cpuacct,cpu"):
            if not mount.is_dir():
                continue
            for folder in _ancestors(mount, rel):
                q, p = _read(folder / "cpu.cfs_quota_us"), _read(folder / "cpu.cfs_period_us")
                try:
                    quota, period = int(q or "-1"), int(p or "0")
                except ValueError:
                    continue
                if quota > 0 and period > 0:
                    quotas.append(quota / period)
            break
    return min(quotas) if quotas else None


def machine_memory_mb(root: Path = CGROUP_ROOT) -> int | None:
    """The memory this machine, or its cgroup, has (MB); None where it cannot be read."""
    sizes: list[int] = []
    try:
        sizes.append(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        pass
    for f in (root / "memory.max", root / "memory" / "memory.limit_in_bytes"):
        text = _read(f)
        if text and text.isdigit():
            sizes.append(int(text))
    return min(sizes) // 2**20 if sizes else None


def available_cpus(root: Path = CGROUP_ROOT, proc_cgroup: Path = Path("/proc/self/cgroup")) -> int:
    """The cores this process may use: affinity, bounded by the cgroup's quota (rounded up), at least 1."""
    n = affinity_cpus()
    quota = cgroup_cpu_quota(root, proc_cgroup)
    if quota is not None:
        n = min(n, max(1, math.ceil(quota - 1e-9)))
    return max(1, n)


def auto_jobs(memory_limit_mb: int | None = None) -> int:
    """``--jobs auto``: one worker per available core; with ``memory_limit_mb``, no more than fit in memory."""
    n = available_cpus()
    if memory_limit_mb:
        total = machine_memory_mb()
        if total:
            n = min(n, max(1, total // memory_limit_mb))
    return max(1, min(MAX_JOBS, n))


def resolve_jobs(*choices: int | str | None, memory_limit_mb: int | None = None) -> int:
    """The first of ``choices`` that is set (``-j``, then ``[ci] parallel_jobs``), ``"auto"`` or unset meaning
    :func:`auto_jobs`; an explicit number is taken as it is (the parsers bound it to 1..MAX_JOBS)."""
    for choice in choices:
        if choice is None:
            continue
        if choice == AUTO:
            break
        return max(1, min(MAX_JOBS, int(choice)))
    return auto_jobs(memory_limit_mb)
