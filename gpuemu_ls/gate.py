"""``gpuemu-ls --check [PATH]``: the headless CI gate, the same code path as ``gpuemu ci``; its arguments
live here and ``gpuemu ci`` takes them from here."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from .args import (
    REDACT_HELP,
    SHOW_FAILURES,
    STRICT_HELP,
    Parser,
    argv_text,
    emit,
    guarded,
    load_workspace,
    op_names,
    replay_prefix,
    size_flags,
)
from .console import Progress
from .engine.config.model import Config
from .engine.report.formats import FORMATS, render, render_parts
from .engine.tools.gate import GateOptions, run_gate


def gate_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--quick",
        action="store_const",
        const="quick",
        dest="mode",
        default="thorough",
        help="float32 plus a few float16/bfloat16 cases, default and boundary shapes, [ci.quick] iterations "
        "(pull requests)",
    )
    p.add_argument(
        "--thorough",
        action="store_const",
        const="thorough",
        dest="mode",
        help="the op's dtypes (default: float32, float16, bfloat16), every layout, shape and distribution, "
        "[ci] fuzz_iterations (default; nightly)",
    )
    size_flags(p, "worker processes: 1..256 or auto (default: [ci] parallel_jobs, else auto: one per usable core)")
    p.add_argument("--format", choices=FORMATS, default="text")
    p.add_argument("--redact", action="store_true", help=REDACT_HELP)
    p.add_argument("--output", metavar="FILE", help="write the report there (text still goes to stdout)")
    p.add_argument("--baseline", metavar="TAG|FILE", help="report regressions against this baseline")
    p.add_argument(
        "--fail-on-regression",
        action="store_true",
        default=None,
        help="regressions fail the gate (default: [policies] fail_on_regression)",
    )
    p.add_argument(
        "--shard",
        metavar="K/N|auto",
        help="run the K-th of N slices of ops and kernels, balanced by measured cost; auto: K/N from GPUEMU_SHARD "
        "or GitLab's CI_NODE_INDEX/CI_NODE_TOTAL (docs/ci.md)",
    )
    p.add_argument("--op", action="append", metavar="NAME", help="only this op (repeatable)")
    p.add_argument("--strict", action="store_true", help=STRICT_HELP)
    p.add_argument("--no-kernels", action="store_true", help="skip the [[kernels]] lint")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--show", type=int, default=SHOW_FAILURES, metavar="N", help="failure lines shown per op")


def run_ci(cfg: Config, args: argparse.Namespace) -> int:
    """The gate, shared by ``gpuemu ci`` and ``gpuemu-ls --check``."""
    options = GateOptions(
        mode=args.mode,
        seed=args.seed,
        iterations=args.iterations,
        budget=args.budget,
        jobs=args.jobs,
        baseline=args.baseline,
        fail_on_regression=args.fail_on_regression,
        shard=args.shard,
        ops=op_names(cfg, args.op) if args.op else None,
        kernels=not args.no_kernels,
        command=argv_text(),
    )
    progress = Progress(0, enabled=not args.no_progress and not args.output and args.format == "text")
    options.on_case = lambda op, r, i, n: progress.case(op, r.status, i, n)
    doc = run_gate(cfg, options)
    progress.close()
    plan = doc.get("shard_plan") or {}
    if args.shard is not None and args.shard.strip().lower() == "auto":
        print(f"gpuemu: --shard auto: shard {plan.get('shard')} ({plan.get('from')})", file=sys.stderr)
    text = render_parts(doc, args.format, show=args.show, replay_prefix=replay_prefix(cfg), redact=args.redact)
    emit(text, args.output)
    if args.output and args.format != "text":
        print(render(doc, "text", show=args.show, replay_prefix=replay_prefix(cfg)))
    return int(doc["exit_code"])


GATE_EXIT_CODES = (
    "exit status: 0 every op and kernel ran and passed; 1 any failure, error, op that could not run, lint "
    "violation, or regression under --fail-on-regression; 2 usage or configuration error, or a result store "
    "that cannot be used; 130 interrupted (docs/cli.md)"
)


def check_parser() -> argparse.ArgumentParser:
    """The parser of ``gpuemu-ls --check``; ``gpuemu-ls --help`` shows its help too."""
    parser = Parser(
        prog="gpuemu-ls",
        description="The CI gate (same as `gpuemu ci`): validate every op and kernel of a workspace.",
        epilog=GATE_EXIT_CODES,
    )
    parser.add_argument(
        "--check", action="store_true", required=True, help="run the CI gate instead of the language server"
    )
    parser.add_argument("--stdio", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("path", nargs="?", default=".", help="workspace folder holding gpuemu.toml (default: here)")
    gate_flags(parser)
    parser.usage = parser.format_usage().removeprefix("usage: ").strip()  # `gpuemu-ls [-h] --check ...`
    parser.prog = "gpuemu-ls --check"  # what its error messages start with
    return parser


def check_main(argv: Sequence[str]) -> int:
    args = check_parser().parse_args(list(argv))
    args.workspace = str(Path(args.path))
    return guarded("gpuemu-ls --check", lambda: run_ci(load_workspace(args), args))
