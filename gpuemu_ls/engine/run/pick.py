"""Which runner runs an op and which its reference: a script, an in-process callable, or, for an op with
``grad``, the same run forward and backward (:mod:`grads`)."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ..config.model import OpConfig
from .frameworks import get_adapter
from .grads import GradRunner, JaxGradRunner, ReferenceGradRunner
from .runners import CallableRunner, CallError, Runner, ScriptRunner


def _as_is(ref: str) -> str:
    return ref


def op_runner(
    root: Path,
    op: OpConfig,
    *,
    isolated: bool,
    framework: str | None = None,
    device: str | None = None,
    module: Callable[[str], str] = _as_is,
) -> Runner | None:
    """The op under test as gpuemu runs it: its ``op_script`` (``script_based``, or no ``module``), else its
    ``module`` called with the tensors of ``framework`` (default: the op's) on ``device``; None when nothing
    is runnable (the op runs in a client's process). ``isolated``: scripts run in a fork (in a worker);
    ``module`` maps a ``module:function`` before it is loaded. CallError (kind ``import``) if it cannot load.
    Its outputs carry the op's ``outputs`` names."""
    runner: Runner | None = None
    if op.execution_mode == "script_based" or (op.module is None and op.op_script):
        assert op.op_script is not None
        strides = any(lay != "contiguous" for lay in op.layouts)
        runner = ScriptRunner(root, op.op_script, "op", strides=strides, isolated=isolated)
    elif op.module is not None:
        adapter = get_adapter(framework or op.framework, device)
        if op.grad:
            inner = CallableRunner(root, module(op.module), op.input_names, adapter, "op", op.call)
            runner = JaxGradRunner(inner, op.grad) if hasattr(adapter, "jax") else GradRunner(inner, op.grad)
        else:
            runner = CallableRunner(
                root, module(op.module), op.input_names, adapter, "op", op.call, op.inplace, op.requires_grad
            )
    return named(runner, op.outputs) if runner is not None else None


def reference_runner(root: Path, op: OpConfig, *, isolated: bool, module: Callable[[str], str] = _as_is) -> Runner:
    """The op's float64 reference: its script, or its ``module:function`` called with numpy arrays (or float64
    torch tensors, ``reference_framework``), run backward too for ``grad``; outputs under ``outputs`` names."""
    assert op.reference is not None
    runner: Runner
    # a reference computes in float64 on the CPU, whatever device the op runs on
    adapter = get_adapter(op.reference_framework, "cpu" if op.reference_framework != "numpy" else None)
    if op.reference_is_script:
        runner = ScriptRunner(root, op.reference, "reference", isolated=isolated)
    elif op.grad and op.reference_grad is not None:
        runner = ReferenceGradRunner(
            root, module(op.reference), module(op.reference_grad), op.input_names, op.grad, op.reference_call
        )
    else:
        runner = CallableRunner(root, module(op.reference), op.input_names, adapter, "reference", op.reference_call)
        jax = getattr(adapter, "jax", None)
        if op.grad and not op.grad_by_differences:
            inner = runner
            runner = (
                JaxGradRunner(inner, op.grad, reference=True) if jax else GradRunner(inner, op.grad, reference=True)
            )
        if jax is not None:
            runner = JaxFloat64(runner, jax)
    return named(runner, op.outputs)


def named(runner: Runner, names: tuple[str, ...]) -> Runner:
    """``runner`` with its positional outputs (``result``, ``result0``, ``result1`` ...) renamed to ``names``
    (the op's ``outputs``); the runner itself when the op names none."""
    return NamedOutputs(runner, names) if names else runner


class Wrapped(Runner):
    """A runner around another: what the case sets on it (the upstream draw) reaches the inner one."""

    def __init__(self, inner: Runner) -> None:
        self.inner = inner
        self.where = inner.where
        self.inplace = inner.inplace

    @property
    def upstream(self) -> object:  # backward validation sets the case's upstream draw on the runner
        return getattr(self.inner, "upstream", None)

    @upstream.setter
    def upstream(self, value: object) -> None:
        if hasattr(self.inner, "upstream"):
            self.inner.upstream = value  # type: ignore[attr-defined]

    def call(self, inputs: dict[str, np.ndarray], kwargs: dict[str, Any]) -> dict[str, np.ndarray]:
        return self.inner.call(inputs, kwargs)


class NamedOutputs(Wrapped):
    """A runner whose tuple outputs get the names the op declares: ``outputs = ["loss", "dlogits"]`` turns a
    function's ``(loss, dlogits)`` into outputs ``loss`` and ``dlogits`` everywhere results are shown. Outputs
    that already carry names (a dict, ``grad_<input>``, a written input) keep them."""

    def __init__(self, inner: Runner, names: tuple[str, ...]) -> None:
        super().__init__(inner)
        self.names = names

    def call(self, inputs: dict[str, np.ndarray], kwargs: dict[str, Any]) -> dict[str, np.ndarray]:
        return rename_outputs(self.inner.call(inputs, kwargs), self.names)


class JaxFloat64(Wrapped):
    """A JAX reference, called with 64-bit types enabled for the call only (``jax.enable_x64``, thread-local):
    JAX computes in float32 by default, and a process-wide switch would change what the op under test computes."""

    def __init__(self, inner: Runner, jax: Any) -> None:
        super().__init__(inner)
        scope = getattr(jax, "enable_x64", None)
        if scope is None:  # jax before 0.5 kept it in jax.experimental
            scope = getattr(importlib.import_module("jax.experimental"), "enable_x64", None)
        if scope is None:
            raise CallError("import", "this jax has no scoped 64-bit mode (jax.enable_x64): upgrade jax")
        self.scope = scope

    def call(self, inputs: dict[str, np.ndarray], kwargs: dict[str, Any]) -> dict[str, np.ndarray]:
        with self.scope(True):
            return self.inner.call(inputs, kwargs)


def rename_outputs(out: dict[str, np.ndarray], names: tuple[str, ...]) -> dict[str, np.ndarray]:
    """``result`` (one output) or ``result0..resultK-1`` (K outputs) renamed to ``names`` when they match in
    number; anything else as it is (a mismatch then reads as what it is: the op's outputs, the reference's)."""
    positional = ["result"] if len(names) == 1 else [f"result{i}" for i in range(len(names))]
    if not all(p in out for p in positional) or any(_positional(k) and k not in positional for k in out):
        return out
    renamed = {n: out[p] for n, p in zip(names, positional)}
    return {**renamed, **{k: v for k, v in out.items() if k not in positional}}


def _positional(name: str) -> bool:
    return name == "result" or (name.startswith("result") and name[6:].isdigit())


__all__ = ["NamedOutputs", "named", "op_runner", "reference_runner", "rename_outputs"]
