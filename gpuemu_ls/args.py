"""Command-line plumbing shared by ``gpuemu`` and the gate: exit codes, a parser that exits 2 on bad
arguments, seeds, the workspace and its configuration, and where a report goes."""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from .engine.config.keys import CONFIG_NAME, MAX_ITERATIONS, MAX_JOBS, MAX_SEED, check_budget, parse_duration
from .engine.config.load import find_workspace, load_config
from .engine.config.model import Config
from .engine.errors import ConfigError, UsageError
from .engine.replace_file import replace_file
from .engine.store.db import StoreError

EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a command ended by Ctrl-C
#: A bug in gpuemu-ls itself (sysexits' EX_SOFTWARE): never confused with a failing op (1) or bad input (2).
EXIT_INTERNAL = 70
SHOW_FAILURES = 3


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse's default is fine but must exit 2 with our prefix
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def seed_arg(text: str) -> int:
    """A seed from the command line: the range gpuemu.toml allows (the store and editors hold it exactly)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if not 0 <= value <= MAX_SEED:
        raise argparse.ArgumentTypeError(f"must be in 0..{MAX_SEED}, got {value}")
    return value


def workspace_root(args: argparse.Namespace) -> Path:
    given = getattr(args, "workspace", None) or getattr(args, "top_workspace", None)
    if given:
        root = Path(given).expanduser()
        if not os.path.lexists(root / CONFIG_NAME):
            raise UsageError(f"no {CONFIG_NAME} in {root.resolve()} (run `gpuemu init {given}`)")
        return root.resolve()
    found = find_workspace(Path.cwd())
    if found is None:
        raise UsageError(f"no {CONFIG_NAME} here or in any parent folder (run `gpuemu init` or pass -C PATH)")
    return found


def load_workspace(args: argparse.Namespace) -> Config:
    cfg = load_config(workspace_root(args))
    for w in cfg.warnings:
        print(str(w).replace(": error:", ": warning:"), file=sys.stderr)
    return cfg.strictly() if getattr(args, "strict", False) else cfg


#: ``--strict``'s help, the same for gpuemu test, fuzz, ci and gpuemu-ls --check.
REDACT_HELP = (
    "leave absolute paths and the host name out of the report (the workspace reads <workspace>): a report to "
    "share; every number stays"
)
STRICT_HELP = (
    "edge findings fail too (failures only where a product of two inputs overflows the accumulation "
    "precision, or where NaN/inf inputs propagate differently); default: each op's strict"
)


def op_names(cfg: Config, names: list[str] | None) -> list[str]:
    if not names:
        return [o.name for o in cfg.ops]
    for n in names:
        try:
            cfg.op(n)
        except KeyError as exc:
            raise UsageError(str(exc.args[0])) from None
    return names


def _bounded(what: str, top: int):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
        if not 1 <= value <= top:
            raise argparse.ArgumentTypeError(f"{what} must be in 1..{top}, got {value}")
        return value

    return parse


iterations_arg = _bounded("iterations", MAX_ITERATIONS)


#: ``--budget`` as ``gpuemu test``, ``gpuemu fuzz`` and the gate explain it.
BUDGET_HELP = (
    "wall time for the run's ops: 90s, 5m, 1m30s, or off (default: [ci] budget / [ci.quick] budget; without one, "
    "no time limit, and ops of high cost, such as Triton kernels in the CPU interpreter, run a quarter of their "
    "plan's work, half in --quick, every coverage class kept); under a time budget each op's first cases "
    "measure its cost, then every class it covers runs first"
)


def budget_arg(text: str) -> float:
    """``--budget 90s|5m|1m30s|300|off``: seconds (``math.inf`` for off), within the bounds the checker holds
    ``[ci] budget`` and an op's ``budget`` to."""
    try:
        seconds = parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    why = check_budget(seconds)
    if why:
        raise argparse.ArgumentTypeError(why)
    return seconds


def size_flags(
    p: argparse.ArgumentParser, jobs_help: str, seed_help: str | None = None, iterations_help: str | None = None
) -> None:
    """``--seed``, ``--iterations``, ``--budget`` and ``--parallel``/``--jobs``/``-j N|auto``: how much a run
    does and on how many workers, as ``gpuemu test``, ``gpuemu fuzz`` and the gate take them."""
    p.add_argument("--seed", type=seed_arg, metavar="N", help=seed_help)
    p.add_argument("--iterations", type=iterations_arg, metavar="N", help=iterations_help)
    p.add_argument("--budget", type=budget_arg, metavar="DURATION", help=BUDGET_HELP)
    p.add_argument("--parallel", "--jobs", "-j", type=jobs_arg, dest="jobs", metavar="N", help=jobs_help)


def jobs_arg(text: str) -> int | str:
    """``-j N`` (1..MAX_JOBS) or ``-j auto``: a worker per core this process may use (cgroup and affinity)."""
    if text.strip().lower() == "auto":
        return "auto"
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 1 <= value <= MAX_JOBS:
        raise argparse.ArgumentTypeError(f"jobs must be in 1..{MAX_JOBS}, got {text} (or auto)")
    return value


def emit(text: str | Iterable[str], output: str | None) -> None:
    """Print ``text`` (or its parts, one after the other), or write it to ``output`` ending in a newline; a file
    that cannot be written is a usage error (exit 2)."""
    parts = (text,) if isinstance(text, str) else text
    if output:
        try:  # all or nothing: a report that fails half-way never replaces the previous one
            replace_file(output, _ended(parts))
        except OSError as exc:
            raise UsageError(f"cannot write --output {output}: {exc.strerror or exc}") from None
    else:
        for part in parts:
            sys.stdout.write(part)
        print()


def _ended(parts: Iterable[str]) -> Iterator[str]:
    """``parts``, then a newline unless they end in one (a report's text never ends half a line)."""
    last = ""
    for part in parts:
        if part:
            last = part
            yield part
    if not last.endswith("\n"):
        yield "\n"


def replay_prefix(cfg: Config) -> str:
    """``-C path`` for replay commands when the user is not in the workspace folder."""
    cwd = Path.cwd().resolve()
    if cwd == cfg.root:
        return ""
    try:
        return f"-C {shlex.quote(str(cfg.root.relative_to(cwd)))}"
    except ValueError:
        return f"-C {shlex.quote(str(cfg.root))}"


def argv_text() -> str:
    return shlex.join(["gpuemu", *sys.argv[1:]])


def quiet_stdout() -> None:
    """After a reader left the pipe (``| head -1``): point stdout at /dev/null so that the interpreter's final
    flush does not fail again, and no traceback reaches the user."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def internal_error(prog: str, exc: BaseException) -> int:
    """Report an exception gpuemu did not expect as gpuemu's own bug: one short block to paste into a bug
    ticket on stderr, the full traceback in a file (no traceback on the terminal, no blame on the op)."""
    import platform
    import tempfile
    import traceback

    from ._version import __version__

    text = "".join(traceback.format_exception(exc))
    where = ""
    tb = traceback.extract_tb(exc.__traceback__)
    if tb:
        last = tb[-1]
        where = f" at {Path(last.filename).name}:{last.lineno} in {last.name}"
    saved = "(could not be saved)"
    try:
        fd, name = tempfile.mkstemp(prefix="gpuemu-internal-error-", suffix=".txt")
        with os.fdopen(fd, "w", encoding="utf-8", errors="backslashreplace") as fh:
            fh.write(f"{argv_text()}\n{text}")
        saved = name
    except OSError:
        pass
    first = (str(exc).splitlines() or [""])[0][:300]
    print(
        f"{prog}: internal error: this is a bug in gpuemu-ls, not in your op or configuration\n"
        f"  {type(exc).__name__}: {first}{where}\n"
        f"  please report it with this block and the traceback saved in {saved}\n"
        f"  gpuemu-ls {__version__}, Python {platform.python_version()}, {platform.platform(terse=True)}\n"
        f"  command: {argv_text()}",
        file=sys.stderr,
    )
    return EXIT_INTERNAL


def guarded(prog: str, call: Callable[[], int], usage: tuple[type[Exception], ...] = (UsageError,)) -> int:
    """``call()``'s exit status, or the exit status of what it raised, said on stderr as ``gpuemu`` and the gate
    say it: a configuration error by its own message, ``usage`` exceptions and the store's errors after
    ``prog: error:`` (2), an interrupt (130), a reader that left the pipe (1), anything else as gpuemu's bug."""
    for stream in (sys.stdout, sys.stderr):  # text never depends on what the terminal's encoding holds: a lone
        reconfigure = getattr(stream, "reconfigure", None)  # surrogate or a character it lacks is escaped
        if reconfigure is not None:
            try:
                reconfigure(errors="backslashreplace")
            except (ValueError, OSError):
                pass
    try:
        return call()
    except ConfigError as exc:
        print(str(exc), file=sys.stderr)
        return EXIT_USAGE
    except usage as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except StoreError as exc:  # damaged, read-only, newer or on a full disk: the message says what to do
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # `gpuemu test | head -1`: the reader left; no traceback, as a shell tool exits
        quiet_stdout()
        return EXIT_FAIL
    except Exception as exc:  # anything else is gpuemu's own bug: say so, never blame the user's op
        return internal_error(prog, exc)
