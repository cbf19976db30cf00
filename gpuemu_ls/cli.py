"""``gpuemu`` (the bundled CLI) and ``gpuemu-ls`` (the language server and its ``--check`` gate).

A thin face: every command parses its flags, calls the engine, prints. Exit codes: 0 when every op
ran and passed, 1 on any failure, error or op that could not run, 2 on usage or configuration
errors (the message names file, line and column); each command's exact codes are in docs/cli.md.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ._version import __version__
from .args import (
    EXIT_FAIL,
    EXIT_OK,
    REDACT_HELP,
    SHOW_FAILURES,
    STRICT_HELP,
    Parser,
    argv_text,
    emit,
    guarded,
    iterations_arg,
    jobs_arg,
    load_workspace,
    op_names,
    replay_prefix,
    seed_arg,
    size_flags,
    workspace_root,
)
from .console import Progress
from .engine.cases.generate import generate_inputs
from .engine.cases.plan import mode_filter
from .engine.config.keys import CONFIG_NAME, PLAN, PLAN_DISTRIBUTIONS
from .engine.config.load import find_workspace, load_config
from .engine.config.model import Config, StoreConfig
from .engine.errors import ConfigError, UsageError
from .engine.report.baseline import baseline_path, from_document, load_baseline, regressions, write_baseline
from .engine.report.formats import FORMATS, render, render_parts
from .engine.report.lines import replay_command, row_line, row_plan
from .engine.report.results import (
    build_document,
    document_from_store,
    dumps,
    exit_code,
    merge_documents,
    overall_status,
    summarize,
)
from .engine.report.slow import SLOW_DEFAULT, render_slow, slow_cases
from .engine.run.cpus import resolve_jobs
from .engine.run.frameworks import torch_build_note
from .engine.run.validate import RunOptions, case_count, plan_op, replay_spec, run_validation
from .engine.store.db import Store, StoreError, store_path
from .engine.store.prune import DEFAULT_KEEP_FAILURES_DAYS, DEFAULT_KEEP_RUNS, pin_held, pruned_seed
from .engine.tools.calibrate import CalibrationRefused, calibrate, write_tolerances
from .engine.tools.minimize import describe, minimize, store_minimized
from .engine.tools.repro import needs, write_repro
from .engine.tools.settle import settle_ops
from .gate import gate_flags, run_ci


def _command(sub: Any, name: str, help: str) -> argparse.ArgumentParser:
    """A ``gpuemu`` command's parser, taking ``-C/--workspace`` as every command does."""
    p = sub.add_parser(name, help=help)
    p.add_argument(
        "-C",
        "--workspace",
        metavar="PATH",
        help=f"workspace folder (default: the nearest folder holding {CONFIG_NAME}, from the current one up)",
    )
    return p


def _run_flags(p: argparse.ArgumentParser, *, fuzz: bool = False) -> None:
    if not fuzz:
        mode = p.add_mutually_exclusive_group()
        mode.add_argument(
            "--quick",
            action="store_const",
            const="quick",
            dest="mode",
            help="float32 (or the op's first dtype) plus a few float16/bfloat16 cases, default and boundary shapes, "
            "[ci.quick] iterations",
        )
        mode.add_argument(
            "--thorough",
            action="store_const",
            const="thorough",
            dest="mode",
            help="the op's dtypes (default: float32, float16, bfloat16), every layout, shape and distribution "
            "(default)",
        )
        p.add_argument("--op", action="append", metavar="NAME", help="only this op (repeatable)")
    size_flags(
        p,
        "workers at once: ops side by side, or one op's cases split over them when there are fewer ops "
        "(N in 1..256 or auto; default: [ci] parallel_jobs, else auto: a worker per core this process may use)",
        seed_help="first case seed (default: [validation] seed)",
        iterations_help="cases per op",
    )
    p.add_argument("--fail-fast", action="store_true", help="stop an op at its first failing case")
    p.add_argument("--strict", action="store_true", help=STRICT_HELP)
    p.add_argument("--format", choices=FORMATS, default="text")
    p.add_argument("--redact", action="store_true", help=REDACT_HELP)
    p.add_argument("--output", metavar="FILE", help="write the report there instead of stdout")
    p.add_argument("--no-progress", action="store_true", help="no progress line on a terminal")
    p.add_argument("--show", type=int, default=SHOW_FAILURES, metavar="N", help="failure lines shown per op")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="gpuemu", description="Validate GPU kernels against float64 references, on a CPU.")
    parser.add_argument("--version", action="version", version=f"gpuemu {__version__}")
    parser.add_argument(
        "-C",
        "--workspace",
        dest="top_workspace",
        metavar="PATH",
        help="workspace folder (also accepted after the command)",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    sub.required = True

    p = _command(sub, "test", "validate every op (or --op NAME) over shapes, dtypes, layouts and values")
    _run_flags(p)

    p = _command(sub, "fuzz", "run many cases of one op")
    p.add_argument("--op", required=True, metavar="NAME")
    _run_flags(p, fuzz=True)
    p.add_argument("--dtype", action="append", metavar="D", help="only these dtypes")
    p.add_argument("--layout", action="append", metavar="L", help="only these layouts")
    p.add_argument("--distribution", action="append", metavar="D", help="only these value distributions")

    p = _command(sub, "reproduce", "re-run op and reference on the stored (or regenerated) inputs of a seed")
    p.add_argument("--op", required=True, metavar="NAME")
    p.add_argument("--seed", required=True, type=seed_arg, metavar="N")
    p.add_argument("--regenerate", action="store_true", help="ignore the stored snapshot; regenerate from the seed")
    p.add_argument(
        "--plan",
        type=int,
        choices=sorted(PLAN_DISTRIBUTIONS),
        metavar="P",
        help=f"the plan version the seed was drawn under (default: the stored case's, else {PLAN}); "
        "failure lines say --plan when a seed needs one",
    )
    p.add_argument("--minimized", action="store_true", help="replay the minimized case (gpuemu minimize)")
    p.add_argument("--no-repro", action="store_true", help="do not write the standalone reproduction")
    p.add_argument("--format", choices=("text", "json"), default="text")

    p = _command(sub, "minimize", "shrink a failing case to the smallest one that fails the same way")
    p.add_argument("--op", required=True, metavar="NAME")
    p.add_argument("--seed", required=True, type=seed_arg, metavar="N")
    p.add_argument("--max-trials", type=int, default=400, metavar="N")
    p.add_argument("--format", choices=("text", "json"), default="text")

    p = _command(sub, "failures", "failing cases of the latest run of each op, from the store")
    p.add_argument("--op", metavar="NAME")
    p.add_argument("--all", action="store_true", help="every stored failure, not just the latest run's")
    p.add_argument("--since-hours", type=float, metavar="H")
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.add_argument(
        "--exit-code",
        action="store_true",
        help="exit 1 when any failing case is listed (for scripts), 0 when none is",
    )

    p = _command(sub, "ops", "the ops and kernels of the workspace and their last status")
    p.add_argument("--format", choices=("text", "json"), default="text")

    p = _command(sub, "ci", "the CI gate (same as gpuemu-ls --check): every op and kernel, one exit code")
    gate_flags(p)

    p = _command(sub, "report", "render stored results, or merge shard outputs")
    p.add_argument("--format", choices=FORMATS, default="text")
    p.add_argument("--output", metavar="FILE")
    p.add_argument("--since-hours", type=float, metavar="H", help="only results newer than this")
    p.add_argument("--include-lint", action="store_true", help="include kernel lint results")
    p.add_argument("--include-artifacts", action="store_true", help="include instruction histograms of kernels")
    p.add_argument("--merge", nargs="+", metavar="JSON", help="join these `--format json` outputs (CI shards)")
    p.add_argument("--input", metavar="JSON", help="render one `--format json` output as it is (a shard's too)")
    p.add_argument("--redact", action="store_true", help=REDACT_HELP)
    p.add_argument("--show", type=int, default=SHOW_FAILURES, metavar="N", help="failure lines shown per op")
    p.add_argument(
        "--slow",
        nargs="?",
        const=SLOW_DEFAULT,
        type=_positive,
        metavar="N",
        help=f"the N slowest stored cases of the latest runs (default {SLOW_DEFAULT}) and each op's time by phase",
    )

    p = _command(sub, "baseline", "store, show or diff a baseline (reviewable JSON under gpuemu-baselines/)")
    bsub = p.add_subparsers(dest="baseline_command", metavar="ACTION", parser_class=Parser)
    bsub.required = True
    b = bsub.add_parser("store", help="store the latest results (or a results JSON) as baseline TAG")
    b.add_argument("tag")
    b.add_argument("--from", dest="from_file", metavar="JSON", help="a `--format json` results file")
    b = bsub.add_parser("show", help="print a baseline")
    b.add_argument("tag")
    b = bsub.add_parser("diff", help="regressions of the latest stored results against a baseline")
    b.add_argument("tag")
    b.add_argument("--fail-on-regression", action="store_true")

    p = _command(sub, "calibrate", "propose atol/rtol per dtype from a known-good op's observed errors")
    p.add_argument("--op", required=True, metavar="NAME")
    p.add_argument("--dtype", action="append", metavar="D", help="only these dtypes (default: the op's)")
    p.add_argument("--iterations", type=iterations_arg, default=200, metavar="N", help="cases per dtype (default 200)")
    p.add_argument("--method", default="p95", help="p50, p90, p95 (default), p99 or max of the per-case errors")
    p.add_argument("--factor", type=float, default=1.5, help="safety factor on the statistic (default 1.5)")
    p.add_argument("--seed", type=seed_arg, metavar="N")
    p.add_argument("--parallel", "--jobs", "-j", type=jobs_arg, dest="jobs", default=1, metavar="N")
    p.add_argument("--write", action="store_true", help="write the proposal into [ops.tolerances] of gpuemu.toml")
    p.add_argument(
        "--force",
        action="store_true",
        help="propose (and write) even when the failures look like a bug rather than rounding (warns)",
    )
    p.add_argument("--format", choices=("text", "json"), default="text")

    p = _command(sub, "lint", "compile [[kernels]] (or .cu/.ptx files) and lint their PTX/SASS")
    p.add_argument("files", nargs="*", metavar="FILE.cu|FILE.ptx", help="lint these files instead of [[kernels]]")
    p.add_argument("--kernel", action="append", metavar="NAME", help="only this [[kernels]] entry (repeatable)")
    p.add_argument("--format", choices=FORMATS, default="text")
    p.add_argument("--output", metavar="FILE")
    p.add_argument("--show", type=int, default=20, metavar="N", help=argparse.SUPPRESS)

    p = _command(sub, "store", "check, repair, reset or prune the result store; list, pin or unpin its runs")
    p.add_argument(
        "action",
        choices=("check", "repair", "reset", "runs", "prune", "pin", "unpin"),
        help="check: read every page, say what is wrong (exit 1 if anything); repair: copy every readable row into"
        " a new store; reset: start empty (both keep the old file as <name>.corrupt-<time>); runs: recent runs;"
        " prune: remove all but the last --keep-runs runs of each kind (source and mode), the runs holding an"
        " op's latest result and pinned runs, then shrink the file; pin RUN: keep a run through every prune"
        " (`baseline store` pins its runs); unpin RUN: let retention judge it again",
    )
    p.add_argument("run", nargs="?", metavar="RUN", help="`store pin|unpin`: a run id, or its first characters")
    p.add_argument("--reason", default="", metavar="TEXT", help="`store pin`: why (shown by `store runs`)")
    p.add_argument("--limit", type=int, default=20, metavar="N", help="runs listed by `store runs` (default 20)")
    p.add_argument(
        "--keep-runs",
        type=int,
        default=None,
        metavar="N",
        help=f"runs of each kind `store prune` keeps (default: [store] keep_runs, else {DEFAULT_KEEP_RUNS})",
    )
    p.add_argument(
        "--keep-failures-days",
        type=_days_arg,
        default=None,
        metavar="D",
        help="days `store prune` keeps the failing cases (and input snapshots) of the runs it removes, so"
        " `reproduce` replays them byte for byte (default: [store] keep_failures_days, else"
        f' {DEFAULT_KEEP_FAILURES_DAYS:g}; 0: they go with their run; "all": forever)',
    )
    p.add_argument("--dry-run", action="store_true", help="`store prune`: say what it would remove, remove nothing")
    p.add_argument(
        "--force", action="store_true", help="repair or reset even while a run writes the store (its results are lost)"
    )
    p.add_argument("--format", choices=("text", "json"), default="text")

    p = sub.add_parser("attest", help="sign report files (HTML, JSON) with your key: an in-toto attestation")
    p.add_argument("files", nargs="+", metavar="FILE", help="the report files; one is the JSON results document")
    how = p.add_mutually_exclusive_group()
    how.add_argument("--key", metavar="PEM", help="private key file, Ed25519 or ECDSA (default: $GPUEMU_SIGNING_KEY)")
    how.add_argument("--keyless", action="store_true", help="Sigstore with the CI job's OIDC identity: R.sigstore.json")
    p.add_argument("--output", metavar="FILE", help="the attestation (default: <report>.intoto.jsonl beside it)")
    p.add_argument("--trust-config", metavar="FILE", help="--keyless: a private Sigstore instance's trust config")

    p = _command(sub, "verify", "check a signed report: signature, every digest, config; --replay re-runs it")
    p.add_argument("report", metavar="REPORT", help="R.intoto.jsonl or R.sigstore.json, or a report file beside it")
    who = p.add_mutually_exclusive_group(required=True)
    who.add_argument("--key", metavar="PUB", help="the signer's public key (PEM): R.intoto.jsonl")
    who.add_argument("--identity", metavar="ID", help="the keyless signer's certificate identity: R.sigstore.json")
    p.add_argument("--issuer", metavar="URL", help="its OIDC issuer (default: GitHub Actions')")
    p.add_argument("--trusted-root", metavar="FILE", help="Sigstore trusted root (default: the one sigstore ships)")
    p.add_argument("--replay", action="store_true", help="re-run the recorded cases from the recorded commit")
    p.add_argument("--yes", action="store_true", help="--replay without asking: you trust the commit's code")
    p.add_argument("--format", choices=("text", "json"), default="text")

    p = sub.add_parser("init", help="write a starter workspace that passes")
    p.add_argument("path", nargs="?", default=".", help="folder to create it in (default: here)")
    p.add_argument("--force", action="store_true", help="overwrite existing files")
    return parser


# --- helpers ----------------------------------------------------------------------------------


def _run_and_report(
    cfg: Config,
    args: argparse.Namespace,
    options: RunOptions,
    specs: dict[str, Any] | None = None,
    snapshots: dict[str, Any] | None = None,
) -> int:
    # what each op is expected to run: the cases given, else the count its plan asks for; each op is planned as
    # its turn nears (as in the gate: a run of thousands of ops never holds every plan), and says what it runs
    # when it starts (its plan, or the cut its probe cases counted), which corrects the count
    expected = (
        {n: len(v) for n, v in specs.items()}
        if specs
        else {n: case_count(cfg, cfg.op(n), options.mode, options.iterations) for n in options.ops or []}
    )
    progress = Progress(
        sum(expected.values()), enabled=not args.no_progress and args.format == "text" and not args.output
    )
    options.on_case = lambda op, r, i, n: progress.case(op, r.status, i, n)
    options.on_op_start = lambda op, n: progress.replan(expected.get(op, 0), n)
    entries = settle_ops(cfg, options)  # each op's cases go as it finishes, as in the gate
    result = run_validation(cfg, options, specs_by_op=specs, snapshots=snapshots)
    progress.close()
    doc = build_document(cfg, result, mode=options.mode, entries=entries)
    shown = render_parts(doc, args.format, show=args.show, replay_prefix=replay_prefix(cfg), redact=args.redact)
    emit(shown, args.output)
    return int(doc["exit_code"])


def _reading_store(cfg: Config) -> Store:
    """The store, opened for reading only (a read-only file or folder, a CI artifact, a newer schema)."""
    store = Store.for_workspace(cfg.root, readonly=True)
    for note in store.notes:
        print(f"gpuemu: note: {note}", file=sys.stderr)
    return store


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _jobs(cfg: Config, args: argparse.Namespace) -> int:
    """``-j``, else ``[ci] parallel_jobs``, else auto (the cores cgroup and affinity leave this process)."""
    return resolve_jobs(args.jobs, cfg.ci.parallel_jobs, memory_limit_mb=cfg.validation.memory_limit_mb)


# --- commands ---------------------------------------------------------------------------------


def cmd_test(args: argparse.Namespace) -> int:
    cfg = load_workspace(args)
    mode = args.mode or "thorough"
    options = RunOptions(
        mode=mode,
        iterations=args.iterations,
        seed=args.seed,
        ops=op_names(cfg, args.op),
        jobs=_jobs(cfg, args),
        fail_fast=args.fail_fast,
        source="cli",
        command=argv_text(),
        budget=args.budget,
    )
    if not cfg.ops:
        print(f"{cfg.path}: no [[ops]] to validate", file=sys.stderr)
        return EXIT_FAIL
    if any(o.framework == "pytorch" or o.reference_framework == "pytorch" for o in cfg.ops):
        note = torch_build_note()
        if note:
            print(note, file=sys.stderr)
    return _run_and_report(cfg, args, options)


def cmd_fuzz(args: argparse.Namespace) -> int:
    cfg = load_workspace(args)
    name = op_names(cfg, [args.op])[0]
    op = cfg.op(name)
    for flag, values, valid in (
        ("--dtype", args.dtype, op.dtypes),
        ("--layout", args.layout, op.layouts),
        ("--distribution", args.distribution, op.distributions),
    ):
        for v in values or ():
            if v not in valid:
                raise UsageError(f"{flag} {v}: op {name!r} uses {', '.join(valid)}")
    accept = mode_filter(
        op,
        dtypes=tuple(args.dtype) if args.dtype else None,
        layouts=tuple(args.layout) if args.layout else None,
        distributions=tuple(args.distribution) if args.distribution else None,
    )
    iterations = args.iterations or cfg.ci.fuzz_iterations
    specs = {name: plan_op(cfg, op, "thorough", iterations, args.seed, accept, whole=True)}
    options = RunOptions(
        mode="fuzz",
        iterations=iterations,
        seed=args.seed,
        ops=[name],
        jobs=_jobs(cfg, args),  # one op: its cases split over the workers (not with --fail-fast)
        fail_fast=args.fail_fast,
        source="cli",
        command=argv_text(),
        budget=args.budget,  # only when asked: a fuzz run's count is the ask
    )
    return _run_and_report(cfg, args, options, specs)


def _refuse_pruned(store: Store, op: str, seed: int) -> None:
    """A seed whose stored failing case retention removed is not replayed as if it were still stored: the
    regenerated case may differ from the one that failed (generation changed since)."""
    when = pruned_seed(store, op, seed) if store.find_case(op, seed) is None else None
    if when is not None:
        day = time.strftime("%Y-%m-%d", time.localtime(when))
        raise UsageError(
            f"op {op!r} seed {seed} was pruned; use --regenerate to replay it regenerated from (op, seed) (its"
            f" stored failing case and input snapshot went on {day}: [store] keep_runs, keep_failures_days)"
        )


def cmd_reproduce(args: argparse.Namespace) -> int:
    cfg = load_workspace(args)
    name = op_names(cfg, [args.op])[0]
    op = cfg.op(name)
    store = _reading_store(cfg)
    if args.minimized:
        found = store.find_minimized(name, args.seed)
        if found is None:
            raise UsageError(
                f"no minimized case for op {name!r} seed {args.seed} "
                f"(run `gpuemu minimize --op {name} --seed {args.seed}`)"
            )
        spec, snapshot = found
        source = "minimized snapshot"
    else:
        if not op.runnable:  # a client-side op runs in the user's process: show what it stored
            from .api.replay import client_replay_text

            text, code = client_replay_text(cfg, op, args.seed, store, write_inputs=not args.no_repro)
            print(text)
            return code
        if not args.regenerate and args.plan is None:
            _refuse_pruned(store, name, args.seed)
        spec, snapshot, source = replay_spec(cfg, op, args.seed, store, regenerate=args.regenerate, plan=args.plan)
    options = RunOptions(mode="reproduce", ops=[name], source="reproduce", command=argv_text(), store=False)
    try:  # the replay is recorded where it can be; a read-only store (a CI artifact) is still replayed from
        sink: Store | None = Store.for_workspace(cfg.root)
        options.store = True
    except StoreError as exc:
        print(f"gpuemu reproduce: note: this replay is not stored: {exc}", file=sys.stderr)
        sink = None
    result = run_validation(
        cfg,
        options,
        store=sink,
        specs_by_op={name: [spec]},
        snapshots={name: {spec.seed: snapshot}} if snapshot is not None else None,
    )
    outcome = result.outcomes[0]
    case = outcome.cases[0] if outcome.cases else None
    repro = None
    if not args.no_repro and case is not None:
        inputs = snapshot if snapshot is not None else generate_inputs(op, spec).logical
        try:
            repro = write_repro(cfg, op, spec, inputs, case, label="_min" if args.minimized else "")
        except OSError as exc:  # a read-only .gpuemu/ (a CI artifact): the replay itself is still shown
            where = f"{exc.filename}: " if exc.filename else ""
            print(
                f"gpuemu reproduce: note: no standalone reproduction written: {where}{exc.strerror or exc}",
                file=sys.stderr,
            )
    if args.format == "json":
        print(
            json.dumps(
                {
                    "schema": 1,
                    "op": name,
                    "seed": args.seed,
                    "source": source,
                    "status": outcome.status,
                    "case": case.to_dict() if case else None,
                    "message": outcome.message,
                    "repro": str(repro) if repro else None,
                },
                indent=2,
                default=str,
            )
        )
        return result.exit_code
    print(f"op {name}, seed {args.seed}: inputs {source}")
    print(
        f"  strategy={spec.strategy} dtype={spec.dtype} {spec.shape_text()} layout={spec.layout} "
        f"dist={spec.distribution} dims={spec.dims}"
    )
    if case is None:
        print(f"  {outcome.message}")
        return result.exit_code
    if case.features.get("upstream"):  # backward validation: what each output's upstream gradient was
        print("  upstream gradients: " + ", ".join(f"{k}={v}" for k, v in case.features["upstream"].items()))
    for cmp in case.comparisons:
        print("  " + cmp.report().replace("\n", "\n  "))
    for v in case.violations:
        print(f"  invariant {v.invariant}: {v.message}")
    if case.status == "passed":
        print("PASSED: op and reference agree on these inputs")
    else:
        word = {"failed": "FAILED", "edge": "EDGE FINDING"}.get(case.status, "ERROR")
        print(f"{word} [{case.kind}]: {case.message.splitlines()[0]}")
        if case.tier == "edge" and case.edge:
            verdict = "failing: strict = true" if case.status == "failed" else "not a bug (strict = true fails it)"
            print(f"  edge finding: {case.edge.get('text', '')}; {verdict}")
        if case.status == "error" and len(case.message.splitlines()) > 1:
            print("  " + "\n  ".join(case.message.splitlines()[1:][-15:]))
        if case.file:
            print(f"  at {case.file}:{case.line}")
        if case.stderr.strip():
            print("  stderr:\n    " + "\n    ".join(case.stderr.strip().splitlines()[-10:]))
    if repro is not None:
        print(f"standalone reproduction: {_display(repro)} (python {_display(repro)}; needs {needs(op, spec)})")
    return result.exit_code


def _display(path: Path) -> str:
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def cmd_minimize(args: argparse.Namespace) -> int:
    cfg = load_workspace(args)
    name = op_names(cfg, [args.op])[0]
    op = cfg.op(name)
    store = Store.for_workspace(cfg.root)
    tty = sys.stderr.isatty() and args.format == "text"
    res = minimize(
        cfg,
        op,
        args.seed,
        store,
        max_trials=args.max_trials,
        on_step=(lambda step, n: print(f"  {step} (trial {n})", file=sys.stderr)) if tty else None,
    )
    store_minimized(store, cfg, res, command=argv_text())
    repro = write_repro(cfg, op, res.minimized.spec, res.minimized_inputs, res.minimized, label="_min")
    info = describe(res)
    info["repro"] = str(repro)
    info["replay"] = f"gpuemu reproduce --op {name} --seed {args.seed} --minimized"
    if args.format == "json":
        print(json.dumps(info, indent=2, default=str))
        return EXIT_FAIL
    o, m = info["original"], info["minimized"]
    print(f"op {name}, seed {args.seed} ({res.source}): {res.trials} trials, {res.elapsed:.1f} s")
    print(f"  original : {o['shapes']}  [{o['kind']}] {o['message']}")
    print(f"  minimized: {m['shapes']}  [{m['kind']}] {m['message']}")
    for step in res.steps:
        print(f"    {step}")
    if not res.steps:
        print("    (already minimal: no smaller case fails the same way)")
    print(f"replay it: {info['replay']}")
    shown = _display(repro)
    print(f"standalone reproduction: {shown} (python {shown}; needs {needs(op, res.minimized.spec)})")
    return EXIT_FAIL


def cmd_failures(args: argparse.Namespace) -> int:
    cfg = load_workspace(args)
    if args.op:
        op_names(cfg, [args.op])  # an unknown op is a usage error (exit 2), never "no failures" (exit 0)
    store = _reading_store(cfg)
    listed = EXIT_FAIL if args.exit_code else EXIT_OK
    since = time.time() - args.since_hours * 3600 if args.since_hours else None
    if args.all or since is not None:
        rows = store.cases(op=args.op, since=since, not_passed=True)
    else:
        rows = store.latest_failures(args.op)
    failing = [r for r in rows if r["status"] != "edge"]  # edge findings are listed, but fail nothing
    if args.format == "json":
        out = []
        for r in rows:
            d = dict(r)
            for k in ("shapes", "dims", "tolerance", "detail"):
                d[k] = json.loads(d[k]) if d.get(k) else None
            d["replay"] = replay_command(r["op"], r["seed"], cfg.root, Path.cwd(), plan=row_plan(r))
            out.append(d)
        print(json.dumps({"schema": 1, "failures": out}, indent=2, default=str))
        return listed if failing else EXIT_OK
    if not rows:
        print(
            "no failures stored"
            + (f" for op {args.op}" if args.op else "")
            + ("" if store.count("runs") else " (nothing has run yet: gpuemu test)")
        )
        return EXIT_OK
    for r in rows:
        print(row_line(r, cfg.root, Path.cwd()))
    edges = len(rows) - len(failing)
    more = f", {edges} edge finding{'s' * (edges != 1)} (not failing)" if edges else ""
    print(f"{len(failing)} failing cases{more}")
    return listed if failing else EXIT_OK


def cmd_ops(args: argparse.Namespace) -> int:
    cfg = load_workspace(args)
    store = _reading_store(cfg)  # a store that cannot be read is an error, never "never run" everywhere
    latest = store.latest_op_results(kind="op")
    kernels = store.latest_op_results(kind="kernel")
    rows = []
    for op in cfg.ops:
        last = latest.get(op.name)
        runner = op.op_script if op.execution_mode == "script_based" else (op.module or f"({op.execution_mode})")
        rows.append(
            {
                "name": op.name,
                "kind": "op",
                "mode": op.execution_mode,
                "op": runner,
                "reference": op.reference,
                "framework": op.framework,
                "inputs": {i.name: list(i.shape) for i in op.inputs},
                "dims": {
                    d.name: (list(d.candidates) if d.candidates else [d.min, d.max, d.default])
                    for d in op.dims.values()
                },
                "dtypes": list(op.dtypes),
                "layouts": list(op.layouts),
                "status": last["status"] if last else "never run",
                "message": last["message"] if last else "",
            }
        )
    for k in cfg.kernels:
        last = kernels.get(k.name)
        rows.append(
            {
                "name": k.name,
                "kind": "kernel",
                "source": k.source,
                "status": last["status"] if last else "never linted",
                "message": last["message"] if last else "",
            }
        )
    if args.format == "json":
        print(json.dumps({"schema": 1, "ops": rows}, indent=2))
        return EXIT_OK
    for r in rows:
        if r["kind"] == "op":
            shapes = " ".join(f"{n}{s}" for n, s in r["inputs"].items())
            print(
                f"{r['name']:24} {r['status']:10} {r['mode']:12} {r['op']} vs {r['reference']}  "
                f"{shapes}  {','.join(r['dtypes'])}"
            )
        else:
            print(f"{r['name']:24} {r['status']:10} {'kernel':12} {r['source']}  {r['message']}")
    return EXIT_OK


def cmd_ci(args: argparse.Namespace) -> int:
    return run_ci(load_workspace(args), args)


def cmd_report(args: argparse.Namespace) -> int:
    if args.slow is not None:
        if args.merge or args.input:
            raise UsageError("--slow reads the store; it does not combine with --merge or --input")
        cfg = load_workspace(args)
        slow = slow_cases(cfg, _reading_store(cfg), args.slow, since=args.since_hours)
        emit(render_slow(slow) if args.format == "text" else dumps(slow), args.output)
        return EXIT_OK
    if args.input and args.merge:
        raise UsageError("--input renders one results document; --merge joins several: use one of them")
    if args.input or args.merge:
        docs = []
        for f in [args.input] if args.input else args.merge:
            try:
                docs.append(json.loads(Path(f).read_text(encoding="utf-8")))
            except (OSError, json.JSONDecodeError) as exc:
                raise UsageError(f"cannot read {f}: {exc}") from None
        if args.input:
            doc = docs[0]
            if not isinstance(doc, dict) or not {"ops", "kernels", "summary", "exit_code"} <= set(doc):
                raise UsageError(f"{args.input} is not a gpuemu results document (`--format json` output)")
        else:
            try:
                doc = merge_documents(docs)
            except ValueError as exc:
                raise UsageError(str(exc)) from None
    else:
        cfg = load_workspace(args)
        since = time.time() - args.since_hours * 3600 if args.since_hours else None
        doc = document_from_store(
            cfg,
            _reading_store(cfg),
            since=since,
            include_lint=args.include_lint,
            include_artifacts=args.include_artifacts,
        )
    emit(render(doc, args.format, show=args.show, redact=args.redact), args.output)
    return int(doc["exit_code"])


def cmd_baseline(args: argparse.Namespace) -> int:
    cfg = load_workspace(args)
    path = baseline_path(cfg, args.tag)
    if args.baseline_command == "store":
        if args.from_file:
            try:
                doc = json.loads(Path(args.from_file).read_text(encoding="utf-8"))
            except (OSError, json.JSONDecodeError) as exc:
                raise UsageError(f"cannot read {args.from_file}: {exc}") from None
        else:
            doc = document_from_store(cfg, _reading_store(cfg), include_lint=True, include_artifacts=True)
        if not doc["ops"] and not doc["kernels"]:
            raise UsageError("no results to store: run `gpuemu ci` (or `gpuemu test`) first")
        base = from_document(doc, args.tag)
        write_baseline(cfg, path, base)
        pinned = pin_held(store_path(cfg.root), base["runs"], f"baseline {base['tag']}")
        print(f"baseline {args.tag!r}: {len(doc['ops'])} ops, {len(doc['kernels'])} kernels -> {path}")
        if pinned:
            print(f"  pinned {pinned} stored run(s) it was taken from: retention keeps them (`gpuemu store runs`)")
        return EXIT_OK
    base = load_baseline(path)
    if args.baseline_command == "show":
        print(json.dumps(base, indent=2))
        return EXIT_OK
    doc = document_from_store(cfg, _reading_store(cfg), include_lint=True, include_artifacts=True)
    regs = regressions(doc, base, cfg.ci.regression_threshold)
    for r in regs:
        print(f"REGRESSION {r['kind']} {r['name']}: {r['reason']}")
    print(f"{len(regs)} regressions against baseline {args.tag!r}")
    return EXIT_FAIL if regs and args.fail_on_regression else EXIT_OK


def cmd_calibrate(args: argparse.Namespace) -> int:
    cfg = load_workspace(args)
    name = op_names(cfg, [args.op])[0]
    op = cfg.op(name)
    progress = _calibrate_progress(name) if sys.stderr.isatty() and args.format != "json" else None
    try:
        proposals = calibrate(
            cfg,
            op,
            dtypes=args.dtype,
            iterations=args.iterations,
            method=args.method,
            factor=args.factor,
            seed=args.seed,
            jobs=resolve_jobs(args.jobs),
            force=args.force,
            on_progress=progress,
        )
    except CalibrationRefused as exc:
        if progress is not None:
            progress(None, 0, 0)
        if args.format == "json":
            print(json.dumps({"schema": 1, "op": name, "refused": exc.reasons, "written": False}, indent=2))
        # one reason a line: the one-line message (what an editor shows) ran to 700 characters here
        print(f"gpuemu: {exc.heading}:", *(f"  {r}" for r in exc.reasons), exc.ADVICE, sep="\n", file=sys.stderr)
        return EXIT_FAIL
    if progress is not None:
        progress(None, 0, 0)
    for p in proposals:
        for reason in p.refusal:
            print(f"gpuemu: warning: --force: {p.dtype}: {reason}", file=sys.stderr)
    if args.write:
        write_tolerances(cfg, op, proposals)
    if args.format == "json":
        print(
            json.dumps(
                {
                    "schema": 1,
                    "op": name,
                    "method": args.method,
                    "factor": args.factor,
                    "written": bool(args.write),
                    "proposals": [p.to_dict() for p in proposals],
                },
                indent=2,
            )
        )
        return EXIT_OK
    print(f"op {name}: {args.method} of per-case max errors x {args.factor:g}")
    for p in proposals:
        small, large = p.observed["abs_err_small_ref"], p.observed["rel_err_large_ref"]
        print(
            f"  {p.dtype:9} {p.cases} cases ({p.excluded} excluded): abs err |ref|<=1 p95 {small['p95']:.3g} "
            f"max {small['max']:.3g}; rel err |ref|>1 p95 {large['p95']:.3g} max {large['max']:.3g}"
        )
        print(
            f"            proposed atol={p.atol:.2g} rtol={p.rtol:.2g}  (now atol={p.current[0]:g} "
            f"rtol={p.current[1]:g}; cases over the proposal: {p.failing_proposed}, failing now: {p.failing_now})"
        )
    print(
        f"written to {cfg.path} [ops.tolerances] of {name}"
        if args.write
        else "use --write to put this into gpuemu.toml"
    )
    return EXIT_OK


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _days_arg(text: str) -> float | str:
    """``--keep-failures-days``: a number of days >= 0, or ``all``."""
    if text == "all":
        return text
    try:
        days = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f'a number of days or "all", got {text!r}') from None
    if not days >= 0:
        raise argparse.ArgumentTypeError(f"must be at least 0, got {text}")
    return days


def _retention(args: argparse.Namespace) -> tuple[int | None, float | None]:
    """What ``store prune`` keeps: runs of each kind and days of failing cases (None: all). The flags, else the
    workspace's ``[store]`` table (a config that does not load: the defaults, so a broken gpuemu.toml never
    stops a prune)."""
    try:
        kept = load_workspace(args).store
    except ConfigError:
        kept = StoreConfig()
    runs = kept.keep_runs if args.keep_runs is None else args.keep_runs
    if args.keep_failures_days is None:
        return runs, kept.keep_failures_days
    return runs, None if args.keep_failures_days == "all" else float(args.keep_failures_days)


def _store_prune(path: Path, args: argparse.Namespace) -> int:
    from .engine.store.prune import prune

    keep_runs, days = _retention(args)
    done = prune(path, keep_runs=keep_runs, keep_failures_days=days, dry_run=args.dry_run)
    if args.format == "json":
        print(json.dumps({"schema": 1, **done.to_dict()}, indent=2))
        return EXIT_OK
    verb = "would remove" if done.dry_run else "removed"
    print(
        f"{path}: {verb} {_count(len(done.runs), 'run')} ({done.op_results} op results, {done.cases} cases,"
        f" {done.snapshots} input snapshots); kept {_count(done.kept_runs, 'run')}"
        + (f" and {_count(done.kept_failures, 'failing case')} of removed runs" if done.kept_failures else "")
    )
    if done.aged_out_runs:
        print(f"  failing cases of {_count(len(done.aged_out_runs), 'earlier removed run')} aged out")
    if not done.dry_run and done.runs:
        print(f"  size {done.size_before} -> {done.size_after} bytes" + (" (vacuumed)" if done.vacuumed else ""))
    for note in done.notes:
        print(f"  note: {note}")
    return EXIT_OK


def _calibrate_progress(name: str) -> Callable[[str | None, int, int], None]:
    """A one-line count of calibration's cases on a terminal (it runs for a minute and more); a ``None``
    dtype clears the line."""

    def show(dtype: str | None, done: int, total: int) -> None:
        text = "" if dtype is None else f"calibrating {name}: {dtype} {done}/{total} cases"
        sys.stderr.write("\r\x1b[2K" + text)
        sys.stderr.flush()

    return show


def cmd_lint(args: argparse.Namespace) -> int:
    from .engine.run.kernels import cache_dir, lint_entries, lint_path

    started = time.perf_counter()
    cfg: Config | None = None
    if args.workspace or args.top_workspace or not args.files:
        cfg = load_workspace(args)
    elif (found := find_workspace(Path.cwd())) is not None:
        cfg = load_config(found)
    if args.files:
        cache = cache_dir(cfg) if cfg else Path.home() / ".cache" / "gpuemu" / "lint"
        entries = []
        for f in args.files:
            if not Path(f).is_file():
                raise UsageError(f"{f}: no such file")
            entries += lint_path(Path(f), cfg, cache)
    else:
        assert cfg is not None
        names = args.kernel
        for n in names or ():
            try:
                cfg.kernel(n)
            except KeyError as exc:
                raise UsageError(str(exc.args[0])) from None
        if not cfg.kernels:
            raise UsageError(f"{cfg.path}: no [[kernels]] to lint (or pass FILE.cu)")
        entries = lint_entries(cfg, names)
    if cfg is not None:
        doc = build_document(cfg, None, kernels=entries, mode="lint")
    else:
        doc = {
            "schema": 1,
            "tool": {"name": "gpuemu-ls", "version": __version__},
            "workspace": str(Path.cwd()),
            "config": None,
            "mode": "lint",
            "seed": None,
            "run_id": None,
            "shard": None,
            "created_at": time.time(),
            "elapsed": sum(e["elapsed"] for e in entries),
            "fail_on_regression": False,
            "ops": [],
            "kernels": entries,
            "regressions": [],
        }
        doc["summary"] = summarize(entries, [])
        doc["status"] = overall_status(entries)
        doc["exit_code"] = exit_code(doc, fail_on_regression=False)
    doc["elapsed"] = round(time.perf_counter() - started, 4)  # the wall time of this lint, compiles included
    emit(render(doc, args.format, show=args.show), args.output)
    return int(doc["exit_code"])


def _store_pin(path: Path, args: argparse.Namespace) -> int:
    """``gpuemu store pin|unpin RUN``: a run retention keeps whatever its age, or judges again."""
    if not args.run:
        raise UsageError(f"`gpuemu store {args.action}` needs a run id (`gpuemu store runs` lists them)")
    if not path.exists():
        raise UsageError(f"no result store at {path} yet (gpuemu test creates it)")
    store = Store(path)
    try:
        run_id = store.resolve_run(args.run)
        if args.action == "pin":
            store.pin(run_id, args.reason)
            done = f"pinned run {run_id[:12]}: `store prune` and retention keep it until `gpuemu store unpin`"
        else:
            done = f"unpinned run {run_id[:12]}" if store.unpin(run_id) else f"run {run_id[:12]} was not pinned"
    finally:
        store.close()
    if args.format == "json":
        print(json.dumps({"schema": 1, "action": args.action, "run": run_id, "reason": args.reason}, indent=2))
    else:
        print(done)
    return EXIT_OK


def cmd_store(args: argparse.Namespace) -> int:
    """``gpuemu store check|repair|reset|runs``: works on the store even when gpuemu.toml does not load."""
    from .engine.store.maintain import check, repair, reset

    path = store_path(workspace_root(args))
    if args.action == "prune":
        return _store_prune(path, args)
    if args.action in ("pin", "unpin"):
        return _store_pin(path, args)
    if args.action == "runs":
        runs = Store(path, readonly=True).runs(limit=max(1, args.limit))
        if args.format == "json":
            print(json.dumps({"schema": 1, "store": str(path), "runs": runs}, indent=2, default=str))
            return EXIT_OK
        for r in runs:
            started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r["started_at"] or 0))
            pin = f"  [pinned{': ' + r['pinned'] if r['pinned'] else ''}]" if r.get("pinned") is not None else ""
            print(f"{r['id'][:12]}  {started}  {r['status']:12} {r['source'] or '':10} {r['mode'] or '':9} "
                  f"{r['command'] or ''}{pin}")  # fmt: skip
        print(f"{len(runs)} runs in {path}" if runs else f"no runs stored in {path}")
        return EXIT_OK
    if args.action == "check":
        found = check(path)
        if args.format == "json":
            print(json.dumps({"schema": 1, **found.to_dict()}, indent=2))
        elif not found.exists:
            print(f"no result store at {path} yet (gpuemu test creates it)")
        else:
            counts = ", ".join(f"{n if n is not None else '?'} {t}" for t, n in found.counts.items())
            runs = ", ".join(f"{n} {s}" for s, n in sorted(found.runs.items()))
            print(f"{path}: {found.size} bytes, schema {found.schema if found.schema is not None else '?'}")
            if counts:
                print(f"  rows: {counts}" + (f"; runs: {runs}" if runs else ""))
            for note in found.notes:
                print(f"  note: {note}")
            for problem in found.problems:
                print(f"  damaged: {problem}")
            print(
                "  ok"
                if found.healthy
                else "  `gpuemu store repair` recovers what can be read, `gpuemu store reset`"
                " starts empty; both keep the old file beside it"
            )
        return EXIT_OK if found.healthy else EXIT_FAIL
    force = bool(getattr(args, "force", False))
    done = repair(path, force=force) if args.action == "repair" else reset(path, force=force)
    if args.format == "json":
        print(json.dumps({"schema": 1, "action": args.action, **done.to_dict()}, indent=2))
    elif args.action == "repair" and done.kept is None:
        print(f"{path} is healthy: nothing to repair")
    else:
        if done.kept is not None:
            print(f"kept the old store as {done.kept}")
        if args.action == "repair":
            got = ", ".join(f"{n} {t}" for t, n in done.recovered.items())
            lost = sum(done.unreadable.values())
            tail = ", ".join(done.lost_tail)
            print(
                f"recovered {got}"
                + (f"; {lost} rows could not be read" if lost else "")
                + (f"; the end of {tail} could not be read" if tail else "")
            )
        print(f"{path} is ready")
    return EXIT_OK


def cmd_init(args: argparse.Namespace) -> int:
    from .engine.tools.init import write_starter

    target = Path(args.path).expanduser().resolve()
    written = write_starter(target, force=args.force)
    for f in written:
        print(f"wrote {f}")
    print(f"next: cd {shlex.quote(str(target))} && gpuemu test")
    return EXIT_OK


def cmd_attest(args: argparse.Namespace) -> int:
    from .engine.tools.attest.keys import load_signing_key
    from .engine.tools.attest.sign import attest

    key = None if args.keyless else load_signing_key(args.key)
    trust = Path(args.trust_config).expanduser() if args.trust_config else None
    signed = attest([Path(f) for f in args.files], key, args.output, trust)
    print(f"signed {', '.join(str(s['name']) for s in signed.subjects)} with {signed.signer} -> {signed.path}")
    return EXIT_OK


def cmd_verify(args: argparse.Namespace) -> int:
    from .engine.tools.attest import AttestFailed
    from .engine.tools.attest.check import check, signer_of

    given = args.workspace or args.top_workspace
    workspace = workspace_root(args) if given else find_workspace(Path.cwd())
    try:
        signer = signer_of(args.key, args.identity, args.issuer, args.trusted_root)
        done = check(Path(args.report), signer, workspace, replay=args.replay, confirm=lambda q: _trusted(q, args))
    except AttestFailed as exc:
        if args.format == "json":
            print(json.dumps({"schema": 1, "verified": False, "reason": str(exc)}, indent=2))
        print(f"gpuemu verify: NOT VERIFIED: {exc}", file=sys.stderr)
        return EXIT_FAIL
    print(json.dumps(done.to_dict(), indent=2) if args.format == "json" else "\n".join(done.lines))
    return done.exit_code


def _trusted(question: str, args: argparse.Namespace) -> bool:
    """``--yes``, else the answer on a terminal; with neither, a usage error saying how to give it."""
    if args.yes:
        return True
    if not sys.stdin.isatty():
        raise UsageError(f"{question} (no terminal to ask: pass --yes to run it)")
    return input(f"{question} [y/N] ").strip().lower() in ("y", "yes")


COMMANDS = {
    "test": cmd_test,
    "fuzz": cmd_fuzz,
    "reproduce": cmd_reproduce,
    "failures": cmd_failures,
    "ops": cmd_ops,
    "init": cmd_init,
    "ci": cmd_ci,
    "minimize": cmd_minimize,
    "calibrate": cmd_calibrate,
    "lint": cmd_lint,
    "report": cmd_report,
    "baseline": cmd_baseline,
    "store": cmd_store,
    "attest": cmd_attest,
    "verify": cmd_verify,
}


def gpuemu_main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    return guarded(f"gpuemu {args.command}", lambda: COMMANDS[args.command](args), (UsageError, FileExistsError))


def server_main(argv: Sequence[str] | None = None) -> int:
    """``gpuemu-ls``: the language server; ``gpuemu-ls --check`` is the CI gate."""
    args = list(sys.argv[1:] if argv is None else argv)
    if "--check" in args:
        from .gate import check_main

        return check_main(args)
    if "-h" in args or "--help" in args:
        return _server_help()
    from .server import serve_main

    return serve_main(args)


def _server_help() -> int:
    """``gpuemu-ls --help``: the language server's flags, then the CI gate's (``gpuemu-ls --check``)."""
    from .gate import check_parser
    from .server import serve_main

    try:
        serve_main(["--help"])
    except SystemExit:  # argparse's --help prints, then exits 0
        pass
    print("\nThe CI gate runs instead of the server when --check is given:\n")
    print(check_parser().format_help(), end="")
    return EXIT_OK


def main() -> None:  # python -m gpuemu_ls.cli
    sys.exit(gpuemu_main())


if __name__ == "__main__":
    main()
