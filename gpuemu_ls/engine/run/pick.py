"""Which runner runs an op and which its reference: a script, an in-process callable, or, for an op with
``grad``, the same run forward and backward (:mod:`grads`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ..config.model import OpConfig
from .frameworks import get_adapter
from .grads import GradRunner, ReferenceGradRunner
from .runners import CallableRunner, Runner, ScriptRunner


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
    ``module`` maps a ``module:function`` before it is loaded. CallError (kind ``import``) if it cannot load."""
    if op.execution_mode == "script_based" or (op.module is None and op.op_script):
        assert op.op_script is not None
        strides = any(lay != "contiguous" for lay in op.layouts)
        return ScriptRunner(root, op.op_script, "op", strides=strides, isolated=isolated)
    if op.module is not None:
        adapter = get_adapter(framework or op.framework, device)
        if op.grad:
            inner = CallableRunner(root, module(op.module), op.input_names, adapter, "op", op.call)
            return GradRunner(inner, op.grad)
        return CallableRunner(root, module(op.module), op.input_names, adapter, "op", op.call, op.inplace)
    return None


def reference_runner(root: Path, op: OpConfig, *, isolated: bool, module: Callable[[str], str] = _as_is) -> Runner:
    """The op's float64 reference: its script, or its ``module:function`` called with numpy arrays."""
    assert op.reference is not None
    if op.reference_is_script:
        return ScriptRunner(root, op.reference, "reference", isolated=isolated)
    # a reference computes in float64 on the CPU, whatever device the op runs on
    adapter = get_adapter(op.reference_framework, "cpu" if op.reference_framework != "numpy" else None)
    if op.grad:
        if op.reference_grad is not None:
            return ReferenceGradRunner(
                root, module(op.reference), module(op.reference_grad), op.input_names, op.grad, op.reference_call
            )
        inner = CallableRunner(root, module(op.reference), op.input_names, adapter, "reference", op.reference_call)
        return GradRunner(inner, op.grad, reference=True)
    return CallableRunner(root, module(op.reference), op.input_names, adapter, "reference", op.reference_call)


__all__ = ["op_runner", "reference_runner"]
