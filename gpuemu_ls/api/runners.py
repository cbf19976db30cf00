"""Runners for the user's own process: the user's ``run_op`` callable, and an output already computed.

Both are :class:`~gpuemu_ls.engine.run.runners.Runner` subclasses, so the Python API goes through the very
same :func:`~gpuemu_ls.engine.run.case.run_case` as the CLI and the server: comparison, tolerances,
invariants, NaN rules, input-mutation checks and snapshots are identical.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ..engine.run.frameworks import Adapter, AutoAdapter, WriteBack
from ..engine.run.runners import CallError, Runner, as_outputs, is_library

_PACKAGE = Path(__file__).resolve().parents[1]


def user_site(tb: Any) -> tuple[str | None, int | None]:
    """The innermost traceback frame in the user's code: not gpuemu-ls, not an installed library."""
    found: tuple[str | None, int | None] = (None, None)
    for frame in traceback.extract_tb(tb):
        try:
            path = Path(frame.filename).resolve()
        except (OSError, ValueError):
            continue
        if path.is_relative_to(_PACKAGE) or is_library(frame.filename) or frame.filename.startswith("<"):
            continue
        found = (frame.filename, frame.lineno)
    return found


def _exception_text(exc: BaseException, limit: int = 12) -> str:
    return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__, limit=-limit)).strip()


def where_of(fn: Callable[..., Any]) -> str:
    code = getattr(fn, "__code__", None)
    if code is None:  # a callable object, a functools.partial...
        inner = getattr(fn, "func", None) or vars(type(fn)).get("__call__")
        code = getattr(inner, "__code__", None)
    return f"{code.co_filename}:{code.co_firstlineno}" if code else repr(fn)


class ClientRunner(Runner):
    """The op under test is the user's ``run_op(inputs, **kwargs)``, called in this process.

    ``inputs`` is a dict of the framework's tensors on the op's device, in the op's argument order
    (``input_names``). After the call, tensors that were copied to a device are copied back into the
    engine's buffers, so that a kernel writing into its inputs is caught as ``input_mutation`` there too.
    """

    def __init__(self, run_op: Callable[..., Any], order: tuple[str, ...], adapter: Adapter, who: str = "op") -> None:
        if not callable(run_op):
            raise TypeError(f"run_op must be callable, not {type(run_op).__name__}")
        self.run_op = run_op
        self.order = order
        self.adapter = adapter
        self.outputs = AutoAdapter(adapter)
        self.who = who
        self.where = where_of(run_op)

    def call(self, inputs: dict[str, np.ndarray], kwargs: dict[str, Any]) -> dict[str, np.ndarray]:
        placed: dict[str, Any] = {}
        backs: list[WriteBack] = []
        for name in self.order:
            tensor, back = self.adapter.place(inputs[name])
            placed[name] = tensor
            if back is not None:
                backs.append(back)
        try:
            value = self.run_op(placed, **kwargs)
            value = self.adapter.synchronize(value)
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # SystemExit from user code is a result too
            file, line = user_site(exc.__traceback__)
            kind = "exit" if isinstance(exc, SystemExit) else "raised"
            raise CallError(
                kind, f"{self.who} raised {type(exc).__name__}: {exc}\n{_exception_text(exc)}", file, line
            ) from None
        finally:
            for back in backs:
                back()
        return as_outputs(value, self.outputs, self.who)


class PrecomputedRunner(Runner):
    """The op already ran (``validate_op``, ``submit_output``): its output, named and converted on demand."""

    def __init__(self, output: Any, adapter: Adapter | None = None, who: str = "op") -> None:
        self.output = output
        self.adapter = AutoAdapter(adapter or Adapter())
        self.who = who
        self.where = "submitted output"

    def call(self, inputs: dict[str, np.ndarray], kwargs: dict[str, Any]) -> dict[str, np.ndarray]:
        return as_outputs(self.output, self.adapter, self.who)


__all__ = ["ClientRunner", "PrecomputedRunner", "user_site", "where_of"]
