"""Baselines: a reviewable JSON snapshot of a run's verdicts, and regressions measured against it.

``gpuemu baseline store TAG`` writes ``gpuemu-baselines/TAG.json`` (meant to be committed and
reviewed like code) and pins the stored runs it was taken from (retention keeps them: store/prune.py). A
regression is an op that passed in the baseline and does not now, or whose
max error grew beyond ``baseline * (1 + regression_threshold)`` on the same cases (the error figures
of other seeds or case counts are not comparable, so they are compared only when the cases match);
and a kernel whose registers, spills or local memory grew, or whose instruction counts grew beyond
the threshold. Error growth below a noise floor (the current max error under 10% of its tolerance)
is not a regression: an error that far inside tolerance says nothing about the kernel, and counting
it would make the gate flaky. A baseline records the tolerance rule its errors were measured under
(``tolerance_rule``; absent in baselines written before the half-precision atol scaled): errors measured
under another rule are not compared, and an op with edge findings only counts as passing on both sides.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from ..._version import __version__
from ..config.model import TOLERANCE_RULE, Config
from ..errors import UsageError
from ..oracle.outcome import PASSING_VERDICTS
from ..private_files import check_name, write_private
from ..replace_file import replace_file

BASELINE_DIR = "gpuemu-baselines"
SCHEMA = 1
NOISE_FLOOR = 0.1  # fraction of tolerance below which error growth is noise


def baseline_path(config: Config, tag_or_file: str) -> Path:
    """A tag names ``gpuemu-baselines/TAG.json``; anything that looks like a path is taken as a file."""
    if tag_or_file.endswith(".json") or "/" in tag_or_file or "\\" in tag_or_file:
        p = Path(tag_or_file)
        return p if p.is_absolute() else (Path.cwd() / p)
    return config.root / BASELINE_DIR / f"{check_name('baseline tag', tag_or_file)}.json"


def from_document(doc: dict[str, Any], tag: str) -> dict[str, Any]:
    """The baseline of a results document: per op its verdict and errors, per kernel its figures."""
    ops = {}
    for e in doc["ops"]:
        stats = e.get("stats") or {}
        ops[e["name"]] = {
            "status": e["status"],
            "cases": e.get("cases", 0),
            "failed": e.get("failed", 0),
            "max_abs": stats.get("max_abs"),
            "max_rel": stats.get("max_rel"),
            "max_ratio": stats.get("max_ratio"),
            "cases_run": e.get("cases_run"),
            "elapsed": _seconds(e.get("elapsed")),  # what `--shard` balances CI shards by
        }
    kernels = {}
    for k in doc["kernels"]:
        kernels[k["name"]] = {
            "status": k["status"],
            "elapsed": _seconds(k.get("elapsed")),
            "resources": k.get("resources", {}),
            "ptx_instructions": k.get("ptx_instructions", {}),
            "sass_instructions": k.get("sass_instructions", {}),
        }
    return {
        "schema": SCHEMA,
        "tag": tag,
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "tool": f"gpuemu-ls {__version__}",
        "mode": doc.get("mode"),
        "seed": doc.get("seed"),
        "tolerance_rule": TOLERANCE_RULE,
        "ops": dict(sorted(ops.items())),
        "kernels": dict(sorted(kernels.items())),
        # the stored runs its results come from: `baseline store` pins them, so retention keeps their cases
        "runs": baseline_runs(doc),
    }


def baseline_runs(doc: dict[str, Any]) -> list[str]:
    """The run ids a results document's ops and kernels were read from (the run's own, for a run's document)."""
    ids = {e.get("run_id") for e in [*doc.get("ops", []), *doc.get("kernels", [])]} | {doc.get("run_id")}
    return sorted(i for i in ids if isinstance(i, str) and i)


def _seconds(value: Any) -> float | None:
    """An op's cost in a baseline: to the hundredth of a second (finer figures would only churn its diffs)."""
    return round(float(value), 2) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def write_baseline(config: Config, path: Path, baseline: dict[str, Any]) -> Path:
    """Write a baseline: a tag's file under ``gpuemu-baselines/`` without following symlinks there; a
    path the user named explicitly is written as given."""
    data = (json.dumps(baseline, indent=2, sort_keys=False) + "\n").encode("utf-8")
    folder = config.root / BASELINE_DIR
    if path.parent == folder:
        return write_private(config.root, (BASELINE_DIR, path.name), data)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        replace_file(path, data)
    except OSError as exc:
        raise UsageError(f"cannot write baseline {path}: {exc.strerror or exc}") from None
    return path


def load_baseline(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError(f"no baseline at {path} (store one with `gpuemu baseline store TAG`)") from None
    except (OSError, json.JSONDecodeError) as exc:
        raise UsageError(f"cannot read baseline {path}: {exc}") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA or "ops" not in data:
        raise UsageError(f"{path} is not a gpuemu baseline (schema {SCHEMA})")
    return data


def regressions(doc: dict[str, Any], baseline: dict[str, Any], threshold: float) -> list[dict[str, Any]]:
    """Regressions of a results document against a baseline."""
    out: list[dict[str, Any]] = []
    for e in doc["ops"]:
        old = baseline["ops"].get(e["name"])
        if old is None:
            continue
        stats = e.get("stats") or {}
        if old["status"] in PASSING_VERDICTS and e["status"] not in PASSING_VERDICTS:
            out.append(
                {
                    "kind": "op",
                    "name": e["name"],
                    "reason": f"passed in baseline {baseline['tag']!r}, now {e['status']}: {e.get('message', '')}",
                    "location": e.get("source") or e.get("location"),
                    "baseline": old,
                    "current": {"status": e["status"], **stats},
                }
            )
            continue
        cur, base = stats.get("max_abs"), old.get("max_abs")
        ratio = stats.get("max_ratio")
        same_cases = bool(old.get("cases_run")) and (old.get("cases_run") or {}).get("seeds_hash") == (
            e.get("cases_run") or {}
        ).get("seeds_hash")
        if not same_cases:
            continue  # other cases (another seed, mode or count): their errors differ without a regression
        if baseline.get("tolerance_rule") != TOLERANCE_RULE:
            continue  # errors against another tolerance rule (max_ratio's denominator) are not comparable
        if (
            isinstance(cur, (int, float))
            and isinstance(base, (int, float))
            and cur > base * (1 + threshold)
            and isinstance(ratio, (int, float))
            and ratio >= NOISE_FLOOR
        ):
            out.append(
                {
                    "kind": "op",
                    "name": e["name"],
                    "reason": f"max error grew from {base:.3g} to {cur:.3g} (> +{threshold:.0%}; now "
                    f"{ratio:.0%} of tolerance)",
                    "location": e.get("source") or e.get("location"),
                    "baseline": old,
                    "current": {"status": e["status"], **stats},
                }
            )
    for k in doc["kernels"]:
        old = baseline.get("kernels", {}).get(k["name"])
        if old is None:
            continue
        for reason in kernel_growth(old, k, threshold):
            out.append({"kind": "kernel", "name": k["name"], "reason": reason, "location": k.get("source")})
    return out


def kernel_growth(old: dict[str, Any], new: dict[str, Any], threshold: float) -> list[str]:
    """Growth in registers, spills or local memory, or in instruction counts beyond the threshold."""
    from ..cuda.diff import diff_results

    def as_result(d: dict[str, Any]) -> dict[str, Any]:
        return {
            "resources": d.get("resources") or {},
            "ptx_instructions": d.get("ptx_instructions") or None,
            "sass_histogram": d.get("sass_instructions") or None,
        }

    return [c.message for c in diff_results(as_result(old), as_result(new), threshold) if c.regression]
