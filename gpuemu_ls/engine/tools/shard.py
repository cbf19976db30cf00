"""Shards of a gate run over a CI matrix: which ops and kernels shard K of N runs.

A matrix is only as fast as its slowest shard, and op costs are skewed (one Triton op through the
interpreter can cost a hundred numpy ops), so shards are balanced by each item's measured cost, not
dealt out by name: a greedy longest-processing-time partition (the costliest item first, each to the
shard with the least work so far; ties by name and by shard number), which is deterministic given the
same costs and puts every item in exactly one shard.

Costs, in this order: the per-op ``elapsed`` of the ``--baseline`` (committed, so every machine of the
matrix reads the same figures), else each op's last stored run that was not itself a shard (same mode
first; a shard's own run must not move the split under the shards after it), else none. An item
without a cost counts as the median of the known ones (1 s when none is known).
Every shard must see the same costs to compute the same partition; each shard's results document
carries a digest of the partition it used (``shard_plan``) and ``gpuemu report --merge`` refuses shards
planned differently, rather than report ops that ran twice or never.

``--shard auto`` takes K/N from the CI: ``GPUEMU_SHARD=K/N`` (any CI; the GitHub Actions recipe in
docs/ci.md sets it from ``matrix``), else GitLab's ``parallel:`` variables ``CI_NODE_INDEX`` (1-based) and
``CI_NODE_TOTAL``; with none of them set, the one shard 1/1 (every op).
"""

from __future__ import annotations

import hashlib
import json
import statistics
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import UsageError
from ..store.db import Store

Item = tuple[str, str]  # (kind, name): ("op", "softmax") or ("kernel", "gemm")
SHARD_ENV = "GPUEMU_SHARD"
GITLAB_INDEX, GITLAB_TOTAL = "CI_NODE_INDEX", "CI_NODE_TOTAL"
#: The cost of an item when no item has a measured one (seconds; only ratios matter).
DEFAULT_COST = 1.0
MAX_SHARDS = 10_000


@dataclass
class ShardPlan:
    """Shard ``k`` of ``n``: its items, and how the partition was made (for the results document)."""

    k: int
    n: int
    items: list[Item]
    parts: list[list[Item]]
    costs: dict[Item, float]
    cost_source: str
    origin: str = "--shard"
    loads: list[float] = field(default_factory=list)

    @property
    def digest(self) -> str:
        """Equal on every shard that computed the same partition."""
        text = json.dumps([[f"{kind}:{name}" for kind, name in p] for p in self.parts])
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def describe(self) -> dict[str, Any]:
        mean = sum(self.loads) / len(self.loads) if self.loads else 0.0
        return {
            "shard": f"{self.k}/{self.n}",
            "from": self.origin,
            "costs": self.cost_source,
            "digest": self.digest,
            "items": sum(len(p) for p in self.parts),
            "expected_s": round(self.loads[self.k - 1], 3) if self.loads else None,
            "imbalance": round(max(self.loads) / mean, 3) if mean > 0 else 1.0,
        }


def parse_shard(text: str, what: str = "--shard") -> tuple[int, int]:
    """``K/N`` with 1 <= K <= N (1-based, as CI matrices count)."""
    try:
        k_s, n_s = text.strip().split("/")
        k, n = int(k_s), int(n_s)
    except ValueError:
        raise UsageError(f"{what} {text!r}: expected K/N, e.g. 1/4") from None
    if not 1 <= n <= MAX_SHARDS or not 1 <= k <= n:
        raise UsageError(f"{what} {text!r}: K must be in 1..N (N at most {MAX_SHARDS})")
    return k, n


def shard_from_env(env: Mapping[str, str]) -> tuple[int, int, str]:
    """``--shard auto``: (K, N, where they came from) from the CI's variables; 1/1 when none is set."""
    explicit = env.get(SHARD_ENV, "").strip()
    if explicit:
        k, n = parse_shard(explicit, f"--shard auto: {SHARD_ENV}=")
        return k, n, SHARD_ENV
    index, total = env.get(GITLAB_INDEX, "").strip(), env.get(GITLAB_TOTAL, "").strip()
    if index or total:
        if not (index and total):
            missing = GITLAB_TOTAL if index else GITLAB_INDEX
            raise UsageError(f"--shard auto: {GITLAB_INDEX}/{GITLAB_TOTAL} set without {missing}")
        k, n = parse_shard(f"{index}/{total}", f"--shard auto: {GITLAB_INDEX}/{GITLAB_TOTAL} =")
        return k, n, f"{GITLAB_INDEX}/{GITLAB_TOTAL}"
    return 1, 1, f"no {SHARD_ENV} or {GITLAB_INDEX}/{GITLAB_TOTAL} set: one shard, every op"


def resolve_shard(text: str, env: Mapping[str, str]) -> tuple[int, int, str]:
    """``--shard K/N`` or ``--shard auto``: (K, N, origin)."""
    if text.strip().lower() == "auto":
        return shard_from_env(env)
    k, n = parse_shard(text)
    return k, n, "--shard"


def partition(items: list[Item], costs: Mapping[Item, float], n: int) -> tuple[list[list[Item]], list[float]]:
    """Greedy LPT: items by cost, costliest first (ties by name), each to the least loaded shard (ties by
    number). Returns the shards (each sorted by name) and their loads; every item lands in exactly one."""
    known = [c for c in costs.values() if c > 0]
    default = statistics.median(known) if known else DEFAULT_COST

    def cost(it: Item) -> float:
        c = costs.get(it)
        return c if c is not None and c > 0 else default

    parts: list[list[Item]] = [[] for _ in range(n)]
    loads = [0.0] * n
    for it in sorted(set(items), key=lambda it: (-cost(it), it)):
        j = min(range(n), key=lambda j: (loads[j], j))
        parts[j].append(it)
        loads[j] += cost(it)
    return [sorted(p) for p in parts], loads


def by_name(items: list[Item], n: int) -> list[list[Item]]:
    """The old split: sorted by name, every n-th item (kept to measure what cost balancing buys)."""
    ordered = sorted(set(items))
    return [ordered[j::n] for j in range(n)]


def baseline_costs(baseline: Mapping[str, Any] | None) -> dict[Item, float]:
    """Per-item ``elapsed`` of a baseline (baselines stored since shards balance by cost carry it)."""
    out: dict[Item, float] = {}
    if not baseline:
        return out
    for kind, section in (("op", "ops"), ("kernel", "kernels")):
        for name, entry in (baseline.get(section) or {}).items():
            value = entry.get("elapsed") if isinstance(entry, dict) else None
            if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
                out[(kind, name)] = float(value)
    return out


def store_costs(store: Store, mode: str) -> dict[Item, float]:
    """Each item's duration in its last stored unsharded run of ``mode`` (quick or thorough); where no run of
    that mode is stored at all, of the other one (ratios are what balance shards). Shard runs are left out
    (their command holds ``--shard``): shards run one after another on one store must plan alike."""
    rows = store.query(
        "SELECT o.op AS op, o.kind AS kind, o.duration AS duration, r.mode AS mode FROM op_results o"
        " JOIN runs r ON r.id = o.run_id WHERE o.duration > 0 AND r.mode IN ('quick', 'thorough')"
        " AND o.status NOT IN ('cancelled', 'not_run') AND COALESCE(r.command, '') NOT LIKE '%--shard%'"
        " ORDER BY o.finished_at"
    )
    by_mode: dict[str, dict[Item, float]] = {"quick": {}, "thorough": {}}
    for r in rows:
        kind = "kernel" if r["kind"] == "kernel" else "op"
        by_mode[r["mode"]][(kind, r["op"])] = float(r["duration"])
    own = by_mode.get(mode, {})
    return own if own else by_mode["thorough" if mode == "quick" else "quick"]


def plan_shard(
    items: list[Item],
    text: str,
    env: Mapping[str, str],
    *,
    mode: str,
    baseline: Mapping[str, Any] | None = None,
    store: Callable[[], Store | None] | None = None,
) -> ShardPlan:
    """The items of the shard ``text`` names (``K/N`` or ``auto``), balanced by the best costs at hand; ``store``
    opens the store, only once the shard is known to be valid and no baseline gave costs."""
    k, n, origin = resolve_shard(text, env)
    costs = baseline_costs(baseline)
    source = f"baseline {baseline.get('tag')!r}" if costs and baseline else ""
    opened = store() if not costs and store is not None else None
    if opened is not None:
        costs = store_costs(opened, mode)
        source = "last stored run" if costs else ""
    wanted = set(items)
    costs = {it: c for it, c in costs.items() if it in wanted}
    parts, loads = partition(items, costs, n)
    return ShardPlan(k, n, parts[k - 1], parts, costs, source or "none (equal costs)", origin, loads)
