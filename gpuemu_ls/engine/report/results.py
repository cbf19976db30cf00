"""The results document (JSON, ``"schema": 2``): what a run found, in one versioned structure.

Schema 2 (issue 25): the op verdicts are :data:`oracle.outcome.OP_VERDICTS` (``edge`` and ``not_judged``
added), a failure entry says its ``tier`` (``bug`` or ``edge``) and an edge finding's ``edge`` record, and an
op entry counts ``edge`` findings and carries its tolerance rule.

Every output format (text, JUnit, SARIF) renders this document and nothing else, so a merged set
of CI shards renders exactly like one unsharded run, and ``gpuemu report`` renders stored results
the same way as live ones. Paths are relative to the workspace root.
"""

from __future__ import annotations

import io
import json
import math
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from ..._version import __version__
from ..config.keys import format_duration
from ..config.locations import op_entry, op_source, reference_source
from ..config.model import Config
from ..oracle.outcome import PASSING_VERDICTS, CaseResult, OpOutcome, not_judged_reason
from ..run.validate import RunResult
from .lines import budget_head, replay_command, row_plan
from .provenance import collect as collect_provenance

SCHEMA = 2
MAX_FAILURES_PER_OP = 100
#: Worst first: a run's status is the first of these any entry has.
STATUS_ORDER = ("failed", "error", "not_judged", "not_run", "cancelled", "edge", "passed")


def failure_entry(r: CaseResult, root: Path) -> dict[str, Any]:
    st = r.stats()
    file = None
    if r.file:
        try:
            file = Path(r.file).resolve().relative_to(root.resolve()).as_posix()
        except ValueError:
            file = r.file
    return {
        "seed": r.seed,
        "status": r.status,
        "kind": r.kind,
        "tier": r.tier,
        "edge": r.edge,
        "dtype": r.spec.dtype,
        "shapes": {k: list(v) for k, v in r.spec.shapes.items()},
        "dims": dict(r.spec.dims),
        "layout": r.spec.layout,
        "distribution": r.spec.distribution,
        "strategy": r.spec.strategy,
        "max_abs": st["max_abs"],
        "max_rel": st["max_rel"],
        "max_ulp": st["max_ulp"],
        "max_ratio": st["max_ratio"],
        "mismatches": st["mismatches"],
        "total": st["total"],
        "tolerance": list(r.tolerance) if r.tolerance else None,
        "unexpected_nan": sum(c.unexpected_nan for c in r.comparisons),
        "unexpected_inf": sum(c.unexpected_inf for c in r.comparisons),
        "missing_nan": sum(c.missing_nan for c in r.comparisons),
        "out_of_range": st["out_of_range"],
        "suspect_nan": st["suspect_nan"],
        "examples": _examples(r),
        "worst": _worst(r),
        "first_index": _first_bad(r),
        "message": (r.message or "").strip().splitlines()[0][:500] if (r.message or "").strip() else "",
        "file": file,
        "line": r.line,
        "replay": replay_command(r.op, r.seed, plan=r.spec.plan),
        **_outputs_of(r.comparisons, r.features),
    }


def _outputs_of(comparisons: list[Any], features: dict[str, Any]) -> dict[str, Any]:
    """For an op with several outputs (gradients among them), which output failed worst, and what each
    output's upstream gradient was drawn from (backward validation); nothing for a one-output op."""
    out: dict[str, Any] = {}
    get = (lambda c, k: c.get(k)) if comparisons and isinstance(comparisons[0], dict) else getattr
    failing = [c for c in comparisons if not get(c, "passed")]
    bad = [c for c in failing if not get(c, "edge_only")] or failing
    if len(comparisons) > 1 and bad:
        out["output"] = get(max(bad, key=lambda c: get(c, "max_ratio") or 0.0), "output")
    if features.get("upstream"):
        out["upstream"] = dict(features["upstream"])
    return out


def locate_failures(
    failures: list[dict[str, Any]], source: dict[str, Any] | None, reference: dict[str, Any] | None
) -> list[dict[str, Any]]:
    """Give every failure a file and line: a wrong answer, a timeout or a hard exit has no frame of its own,
    so it points at the function (or script) that produced it: the reference's for reference_* kinds."""
    for f in failures:
        if f.get("file") and f.get("line"):
            continue
        home = reference if str(f.get("kind", "")).startswith("reference_") else source
        if not home:
            continue
        if not f.get("file"):
            f["file"], f["line"] = home["file"], home["line"]
        else:
            f["line"] = home["line"] if f["file"] == home["file"] else 1
    return failures


def _examples(r: CaseResult) -> dict[str, Any]:
    """The first element of each non-finite failure kind (index, op value, reference value), for "NaN where
    the reference is 0.567 (first at [2, 0], 1 of 16 elements)"."""
    out: dict[str, Any] = {}
    for c in r.comparisons:
        for kind, ex in c.examples.items():
            out.setdefault(kind, {**ex, "count": getattr(c, kind, 0), "total": c.total})
    return out


def _worst(r: CaseResult) -> dict[str, Any] | None:
    """The worst element of the worst failing output: index, op value, reference value (NaN/inf as they are)."""
    w = r.worst()
    if w is None or w.passed or w.worst_index is None:
        return None
    return {"output": w.output, "index": list(w.worst_index), "op": w.worst_op, "ref": w.worst_ref}


def _first_bad(r: CaseResult) -> list[int] | None:
    for c in r.comparisons:
        if not c.passed and c.first_index is not None:
            return list(c.first_index)
    return None


def _case_set(o: OpOutcome) -> dict[str, Any]:
    """Which cases an op ran (first seed, count): error figures compare only between the same cases."""
    seeds = [c.seed for c in o.cases]
    plan = max((c.spec.plan for c in o.cases), default=0)
    return {
        "first_seed": min(seeds) if seeds else None,
        "count": len(seeds),
        "seeds_hash": hash_seeds(seeds, plan),
        "seeds": seed_runs(seeds),
        "plan": plan,
    }


def seed_runs(seeds: list[int]) -> list[list[int]]:
    """The seeds as inclusive ``[first, last]`` runs (a plan's seeds are mostly consecutive): exactly which
    cases ran, so ``gpuemu verify --replay`` can run them again from a checkout of the recorded commit."""
    runs: list[list[int]] = []
    for s in sorted(set(seeds)):
        if runs and s == runs[-1][1] + 1:
            runs[-1][1] = s
        else:
            runs.append([s, s])
    return runs


def hash_seeds(seeds: list[int], plan: int = 0) -> str:
    """Which cases ran, as a short hash: the seeds, and the plan version when a later one than 1 drew them
    (so plan-1 hashes, all of them recorded before plan versions, keep their value)."""
    import hashlib

    text = ",".join(map(str, sorted(seeds))) + (f"@plan{plan}" if plan > 1 else "")
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def op_entry_dict(config: Config, o: OpOutcome) -> dict[str, Any]:
    op = config.op(o.op)
    root = config.root
    src, ref = op_source(config, op), reference_source(config, op)
    failures = sorted(o.failures, key=lambda c: c.status == "edge")  # bugs and errors first: they fail the op
    return {
        "name": o.op,
        "kind": "op",
        "status": o.status,
        "message": o.message,
        "diagnosis": o.diagnosis,
        "cases": len(o.cases),
        "passed": o.count("passed"),
        "failed": o.count("failed"),
        "edge": len(o.edges),
        "errors": o.count("error"),
        "reason": not_judged_reason(o.cases) if o.status == "not_judged" else None,
        "strict": op.strict,
        "planned": o.planned,
        "elapsed": round(o.elapsed, 4),
        "stopped": o.stopped,
        "setup_error": o.setup_error,
        "stats": o.stats(),
        "cases_run": _case_set(o),
        "location": op_entry(config, op).to_dict(root),
        "source": src.to_dict(root) if src else None,
        "reference_source": ref.to_dict(root) if ref else None,
        "failures": locate_failures(
            [failure_entry(r, root) for r in failures[:MAX_FAILURES_PER_OP]],
            src.to_dict(root) if src else None,
            ref.to_dict(root) if ref else None,
        ),
        "failures_total": len(failures),
        "budget": o.budget,
        "timing": o.timing(),
    }


def budget_summary(ops: list[dict[str, Any]], run_budget: dict[str, Any] | None) -> dict[str, Any] | None:
    """What the run's budget (or its ops' budgets) cut, summed over ops, with the one line every face shows
    when something was cut and the budget that would have run everything; None when no op had a budget."""
    budgeted = [e for e in ops if e.get("budget")]
    if not budgeted and not (run_budget and run_budget.get("seconds")):
        return None
    cut = [e for e in budgeted if e["budget"]["cut_cases"] or e["budget"]["cut_classes"]]
    full = [float(e["budget"].get("full_estimate") or 0.0) for e in budgeted]
    seconds = (run_budget or {}).get("seconds")
    together = max(1, int((run_budget or {}).get("side_by_side") or 1))
    timed = any(e["budget"].get("seconds") for e in budgeted)  # an op's own time budget: needs are per op
    needed = max(full, default=0.0) if timed and not seconds else max(max(full, default=0.0), sum(full) / together)
    out: dict[str, Any] = {
        "seconds": seconds,
        "source": (run_budget or {}).get("source") or "",
        "ops": len(budgeted),
        "ops_cut": len(cut),
        "planned": sum(e["budget"]["planned"] for e in budgeted),
        "ran": sum(e["budget"]["ran"] for e in budgeted),
        "cut_cases": sum(e["budget"]["cut_cases"] for e in budgeted),
        "smaller_cases": sum(e["budget"].get("smaller_cases", 0) for e in budgeted),
        "classes": sum(e["budget"]["classes"] for e in budgeted),
        "cut_classes": sum(len(e["budget"]["cut_classes"]) for e in budgeted),
        "full_estimate": round(needed, 3),
        "line": "",
    }
    if cut:
        if seconds:
            head = f"budget {format_duration(seconds)} ({out['source']}) cut {len(cut)} of {len(ops)} ops"
            fix = f"--budget {format_duration(needed)} (or --budget off)"
        else:
            each = sorted({budget_head(e["budget"]).removeprefix("budget ") for e in cut})
            head = f"budget cut {len(cut)} of {len(ops)} ops to " + ", ".join(each)
            fix = f'budget = "{format_duration(needed)}" per op (or --budget off)' if timed else "--budget off"
        classes = (
            "every class still covered"
            if not out["cut_classes"]
            else f"{out['cut_classes']} of {out['classes']} coverage classes cut ("
            + "; ".join(
                f"{e['name']}: {', '.join(e['budget']['cut_classes'][:3])}" for e in cut if e["budget"]["cut_classes"]
            )[:300]
            + ")"
        )
        out["line"] = (
            f"{head}: {out['cut_cases']} of {out['planned']} planned cases not run"
            + (f" ({out['smaller_cases']} smaller stand-ins ran)" if out["smaller_cases"] else "")
            + f", {classes}; everything needs about {format_duration(needed)}: {fix}"
        )
    return out


def summarize(entries: list[dict[str, Any]], regressions: list[dict[str, Any]]) -> dict[str, int]:
    out = {s: 0 for s in STATUS_ORDER}
    for e in entries:
        out[e["status"]] = out.get(e["status"], 0) + 1
    out["ops"] = sum(1 for e in entries if e["kind"] == "op")
    out["kernels"] = sum(1 for e in entries if e["kind"] == "kernel")
    out["regressions"] = len(regressions)
    return out


def overall_status(entries: list[dict[str, Any]]) -> str:
    statuses = {e["status"] for e in entries}
    for s in STATUS_ORDER:
        if s in statuses:
            return s
    return "not_run"


def exit_code(doc: dict[str, Any], *, fail_on_regression: bool) -> int:
    """0 when every entry ran and passed (an op with edge findings only passes; not judged does not), and no
    regression counts; else 1."""
    entries = doc["ops"] + doc["kernels"]
    if not entries:
        return 1
    if any(e["status"] not in (PASSING_VERDICTS if e["kind"] == "op" else ("passed",)) for e in entries):
        return 1
    if fail_on_regression and doc["regressions"]:
        return 1
    return 0


def _document(
    config: Config,
    *,
    mode: str | None,
    seed: int,
    run_id: str | None,
    shard: str | None,
    elapsed: float,
    fail_on_regression: bool,
    ops: list[dict[str, Any]],
    kernels: list[dict[str, Any]],
    regressions: list[dict[str, Any]],
    created: float | None = None,
    provenance: dict[str, Any] | None = None,
    **more: Any,
) -> dict[str, Any]:
    """The results document of these entries (``more``: keys after the regressions), with its summary, status,
    exit code and provenance (collected now, unless given with its ``created``: of the run itself, or of the
    workspace when built from the store)."""
    created = time.time() if created is None else created
    doc: dict[str, Any] = {
        "schema": SCHEMA,
        "tool": {"name": "gpuemu-ls", "version": __version__},
        "workspace": str(config.root),
        "config": config.path.name,
        "project": config.project_name,
        "mode": mode,
        "seed": seed,
        "run_id": run_id,
        "shard": shard,
        "created_at": created,
        "elapsed": elapsed,
        "fail_on_regression": fail_on_regression,
        "ops": ops,
        "kernels": kernels,
        "regressions": regressions,
        **more,
    }
    doc["summary"] = summarize(ops + kernels, regressions)
    doc["status"] = overall_status(ops + kernels)
    doc["exit_code"] = exit_code(doc, fail_on_regression=fail_on_regression)
    if provenance is None:
        provenance = collect_provenance(config, when=created, of="report" if mode == "stored" else "run")
    doc["provenance"] = provenance
    return doc


def build_document(
    config: Config,
    run: RunResult | None,
    *,
    kernels: list[dict[str, Any]] | None = None,
    regressions: list[dict[str, Any]] | None = None,
    shard: str | None = None,
    fail_on_regression: bool = False,
    mode: str | None = None,
    extra: dict[str, Any] | None = None,
    entries: Mapping[str, dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The document of ``run``; ``entries``: op entries already made as each op finished (the gate's, whose
    outcomes let their cases go: :mod:`~gpuemu_ls.engine.tools.settle`), the others made here."""
    mode = mode or (run.mode if run else None)
    created = time.time()
    # collected before the op entries are: its passing copy of the config (~7 KB an op) never adds to theirs
    provenance = collect_provenance(config, when=created, of="report" if mode == "stored" else "run")
    got = entries or {}
    ops = [got[o.op] if o.op in got else op_entry_dict(config, o) for o in run.outcomes] if run else []
    doc = _document(
        config,
        created=created,
        provenance=provenance,
        mode=mode,
        seed=run.seed if run else config.validation.seed,
        run_id=run.run_id if run else None,
        shard=shard,
        elapsed=round(run.elapsed, 4) if run else 0.0,
        fail_on_regression=fail_on_regression,
        ops=ops,
        kernels=kernels or [],
        regressions=regressions or [],
        budget=budget_summary(ops, run.budget if run else None),
        # False when the store file was replaced under the run (a forced `store reset`): nothing of it is there
        stored=bool(run and run.run_id and not run.store_replaced),
    )
    if extra:
        doc.update(extra)
    return doc


def merge_documents(docs: list[dict[str, Any]]) -> dict[str, Any]:
    """Join shard documents into the document an unsharded run would have produced."""
    if not docs:
        raise ValueError("nothing to merge")
    for d in docs:
        if d.get("schema") != SCHEMA:
            raise ValueError(f"cannot merge a results document of schema {d.get('schema')!r} (expected {SCHEMA})")
    shards = [d.get("shard") for d in docs]
    if any(shards):
        parsed = []
        for sh in shards:
            try:
                k, n = (int(x) for x in str(sh).split("/"))
            except ValueError:
                raise ValueError(
                    f"cannot merge: a document has no shard (shard {sh!r}); merge the shards of one run"
                ) from None
            parsed.append((k, n))
        totals = {n for _, n in parsed}
        if len(totals) != 1:
            raise ValueError(f"cannot merge shards of different splits: {sorted(set(shards))}")
        total = totals.pop()
        missing = sorted(set(range(1, total + 1)) - {k for k, _ in parsed})
        if missing:
            raise ValueError(
                f"cannot merge: shard(s) {', '.join(f'{k}/{total}' for k in missing)} missing; "
                "an incomplete merge would pass ops that never ran"
            )
        digests = {(d.get("shard_plan") or {}).get("digest") for d in docs} - {None}
        if len(digests) > 1:  # shards balanced by different costs: some ops ran twice, others never
            raise ValueError(
                "cannot merge: the shards were planned from different op costs (shard_plan digests "
                f"{', '.join(sorted(digests))}); give every shard the same --baseline: its costs win over a store's"
            )
    base = dict(docs[0])
    base.pop("shard_plan", None)
    seen: dict[tuple[str, str], dict[str, Any]] = {}
    for d in docs:
        for e in d["ops"] + d["kernels"]:
            seen[(e["kind"], e["name"])] = e
    base["ops"] = sorted((e for (k, _), e in seen.items() if k == "op"), key=lambda e: e["name"])
    base["kernels"] = sorted((e for (k, _), e in seen.items() if k == "kernel"), key=lambda e: e["name"])
    regs = {(r["kind"], r["name"], r["reason"]): r for d in docs for r in d.get("regressions", [])}
    base["regressions"] = sorted(regs.values(), key=lambda r: (r["kind"], r["name"]))
    base["shard"] = None
    base["merged_from"] = [d.get("shard") for d in docs]
    # each shard ran on its own machine, maybe from its own checkout: the merged document keeps the first shard's
    # provenance as its own and every shard's beside it
    base["shard_provenance"] = [d.get("provenance") for d in docs]
    base["elapsed"] = max(d.get("elapsed", 0.0) for d in docs)
    base["fail_on_regression"] = any(d.get("fail_on_regression") for d in docs)
    entries = base["ops"] + base["kernels"]
    base["budget"] = budget_summary(base["ops"], docs[0].get("budget"))
    base["summary"] = summarize(entries, base["regressions"])
    base["status"] = overall_status(entries)
    base["exit_code"] = exit_code(base, fail_on_regression=base["fail_on_regression"])
    return base


def dumps(doc: dict[str, Any]) -> str:
    """``json.dumps(sanitize(doc), indent=2, allow_nan=False)``, the same text, with neither a sanitized copy
    of the document nor the list of every chunk (a few bytes each) that ``json.dumps`` joins: together 9x
    the text (50 MB at 1,000 ops, issue 31). Non-finite floats are written as :func:`sanitize` writes them."""
    out = io.StringIO()
    for chunk in iter_json(doc):
        out.write(chunk)
    return out.getvalue()


def iter_json(doc: dict[str, Any]) -> Iterator[str]:
    """The text of :func:`dumps` in chunks, for a writer that never holds it whole."""
    return _SanitizingEncoder(indent=2, default=_default).iterencode(doc)


class _SanitizingEncoder(json.JSONEncoder):
    """The standard indented encoder, floats as :func:`sanitize` makes them ("nan", "inf", "-inf")."""

    def iterencode(self, o: Any, _one_shot: bool = False) -> Iterator[str]:
        def floatstr(f: float) -> str:
            if f != f:
                return '"nan"'
            if f in (math.inf, -math.inf):
                return '"inf"' if f > 0 else '"-inf"'
            return float.__repr__(f)

        markers: dict[int, Any] | None = {} if self.check_circular else None
        encode = json.encoder.encode_basestring_ascii if self.ensure_ascii else json.encoder.encode_basestring
        return json.encoder._make_iterencode(  # type: ignore[attr-defined]
            markers, self.default, encode, self.indent, floatstr, self.key_separator, self.item_separator,
            self.sort_keys, self.skipkeys, _one_shot,
        )(o, 0)  # fmt: skip


def _default(o: Any) -> Any:
    if hasattr(o, "item"):
        return o.item()
    if isinstance(o, (set, tuple)):
        return list(o)
    return str(o)


def sanitize(obj: Any) -> Any:
    """Replace non-finite floats (JSON has none) with strings readers can still interpret."""
    if isinstance(obj, float):
        if obj != obj:
            return "nan"
        if obj in (float("inf"), float("-inf")):
            return "inf" if obj > 0 else "-inf"
        return obj
    if isinstance(obj, dict):
        return {k: sanitize(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [sanitize(v) for v in obj]
    return obj


def _row_failure(row: dict[str, Any], root: Path) -> dict[str, Any]:
    detail = json.loads(row.get("detail") or "{}")
    file = detail.get("file")
    if file:
        try:
            file = Path(file).resolve().relative_to(root.resolve()).as_posix()
        except ValueError:
            pass
    tol = json.loads(row["tolerance"]) if row.get("tolerance") else None
    msg = (row.get("message") or "").strip()
    return {
        "seed": row["seed"],
        "status": row["status"],
        "kind": row["kind"],
        "tier": detail.get("tier"),
        "edge": detail.get("edge"),
        "dtype": row["dtype"],
        "shapes": json.loads(row["shapes"] or "{}"),
        "dims": json.loads(row["dims"] or "{}"),
        "layout": row["layout"],
        "distribution": row["distribution"],
        "strategy": row["strategy"],
        "max_abs": row["max_abs"],
        "max_rel": row["max_rel"],
        "max_ulp": row["max_ulp"],
        "max_ratio": row["max_ratio"],
        "mismatches": row["mismatches"],
        "total": row["total"],
        "tolerance": tol,
        "message": msg.splitlines()[0][:500] if msg else "",
        "file": file,
        "line": detail.get("line"),
        "replay": replay_command(row["op"], row["seed"], plan=row_plan(row)),
        **_outputs_of(detail.get("comparisons") or [], detail.get("features") or {}),
    }


def document_from_store(
    config: Config,
    store: Any,
    *,
    since: float | None = None,
    include_lint: bool = True,
    include_artifacts: bool = False,
) -> dict[str, Any]:
    """The latest stored verdict of every op (and kernel) of the workspace, as a results document."""
    from ..config.locations import op_entry, op_source, reference_source

    latest = store.latest_op_results()
    ops, kernels = [], []
    names = {o.name for o in config.ops}
    for _key, row in sorted(latest.items()):
        if since is not None and (row.get("finished_at") or 0) < since:
            continue
        detail = json.loads(row.get("detail") or "{}")
        if row["kind"] == "op" and row["op"] in names:
            op = config.op(row["op"])
            src, ref = op_source(config, op), reference_source(config, op)
            fails = [
                _row_failure(r, config.root) for r in store.cases(run_id=row["run_id"], op=row["op"], not_passed=True)
            ]
            seeds = [
                r["seed"]
                for r in store.query("SELECT seed FROM cases WHERE run_id = ? AND op = ?", (row["run_id"], row["op"]))
            ]
            ops.append(
                {
                    "name": row["op"],
                    "kind": "op",
                    "status": row["status"],
                    "message": row["message"] or "",
                    "diagnosis": row["diagnosis"] or "",
                    "cases": row["cases"],
                    "passed": row["passed"],
                    "failed": row["failed"],
                    "edge": detail.get("edge_cases", 0),
                    "errors": row["errors"],
                    "reason": detail.get("reason"),
                    "strict": op.strict,
                    "planned": detail.get("planned"),
                    "elapsed": round(row["duration"] or 0.0, 4),  # as the document of the run itself
                    "stopped": detail.get("stopped"),
                    "setup_error": detail.get("setup_error"),
                    # the tier counts of verdicts stored since they were kept (earlier ones: the errors alone)
                    "stats": {
                        **{k: row[k] for k in ("max_abs", "max_rel", "max_ulp", "max_ratio")},
                        **detail.get("counts", {}),
                    },
                    "location": op_entry(config, op).to_dict(config.root),
                    "source": src.to_dict(config.root) if src else None,
                    "reference_source": ref.to_dict(config.root) if ref else None,
                    "failures": locate_failures(
                        fails[:MAX_FAILURES_PER_OP],
                        src.to_dict(config.root) if src else None,
                        ref.to_dict(config.root) if ref else None,
                    ),
                    "failures_total": len(fails),
                    "run_id": row["run_id"],
                    "finished_at": row.get("finished_at"),
                    "mode": detail.get("mode"),
                    "budget": detail.get("budget"),
                    "timing": detail.get("timing"),
                    "cases_run": {
                        "first_seed": min(seeds) if seeds else None,
                        "count": len(seeds),
                        "seeds_hash": hash_seeds(seeds, int(detail.get("plan") or 1)),
                        "seeds": seed_runs(seeds),
                        "plan": int(detail.get("plan") or 1),
                    },
                }
            )
        elif row["kind"] == "kernel" and include_lint:
            entry = dict(detail) if detail else {"name": row["op"], "kind": "kernel", "status": row["status"]}
            if not include_artifacts:
                for k in ("ptx_instructions", "sass_instructions"):
                    entry.pop(k, None)
            kernels.append(entry)

    return _document(
        config,
        mode="stored",
        seed=config.validation.seed,
        run_id=None,
        shard=None,
        elapsed=sum(e["elapsed"] or 0 for e in ops),
        fail_on_regression=False,
        ops=ops,
        kernels=kernels,
        regressions=[],
    )
