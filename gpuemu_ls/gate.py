"""``gpuemu-ls --check [PATH]``: the headless CI gate, the same code path as ``gpuemu ci``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from .cli import EXIT_FAIL, EXIT_USAGE, _config, _gate_flags, _Parser, run_ci
from .engine.errors import ConfigError, UsageError
from .engine.store.db import StoreError


def check_main(argv: Sequence[str]) -> int:
    parser = _Parser(prog="gpuemu-ls --check", description="Validate every op and kernel of a workspace.")
    parser.add_argument("--check", action="store_true", required=True)
    parser.add_argument("--stdio", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("path", nargs="?", default=".", help="workspace folder holding gpuemu.toml (default: here)")
    _gate_flags(parser)
    args = parser.parse_args(list(argv))
    args.workspace = str(Path(args.path))
    try:
        return run_ci(_config(args), args)
    except ConfigError as exc:
        print(str(exc), file=sys.stderr)
        return EXIT_USAGE
    except UsageError as exc:
        print(f"gpuemu-ls --check: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except StoreError as exc:
        print(f"gpuemu-ls --check: error: {exc}", file=sys.stderr)
        return EXIT_FAIL
