"""The corpus' entry points, loaded the way benchmark harnesses of public kernel corpora load them: an op name
is looked up in ``REGISTRY`` (op name -> kernel file and function) and its kernel file is imported with
``importlib.import_module`` when the op is first called, not when this module is imported.

So this module imports neither triton nor any kernel file: ``gpuemu``'s ``cost = "auto"``, which reads an
op's module (and the workspace modules it imports) for ``import triton``, sees none here. The kernels still
run on Triton's interpreter: ``interp`` below sets TRITON_INTERPRET=1 before any kernel file imports triton.
"""

import importlib

import interp  # noqa: F401  (TRITON_INTERPRET before any kernel file imports triton)

#: op name -> "module:function" of the kernel file under kernels/ that implements it.
REGISTRY = {
    # elementwise (kernels/elementwise.py)
    "add": "kernels.elementwise:add",
    "axpy": "kernels.elementwise:axpy",
    "axpy_bug_grid_floor": "kernels.elementwise:axpy_bug_grid_floor",
    "relu": "kernels.elementwise:relu",
    "gelu": "kernels.elementwise:gelu",
    "silu": "kernels.elementwise:silu",
    "sigmoid": "kernels.elementwise:sigmoid",
    "sigmoid_bug_exp_overflow": "kernels.elementwise:sigmoid_bug_exp_overflow",
    "leaky_relu": "kernels.elementwise:leaky_relu",
    "add_relu": "kernels.elementwise:add_relu",
    "clamp": "kernels.elementwise:clamp",
    # row reductions (kernels/reductions.py)
    "row_sum": "kernels.reductions:row_sum",
    "row_sum_bug_noncontig": "kernels.reductions:row_sum_bug_noncontig",
    "row_max": "kernels.reductions:row_max",
    "row_mean": "kernels.reductions:row_mean",
    "row_mean_bug_block_div": "kernels.reductions:row_mean_bug_block_div",
    # softmax family (kernels/softmax.py; the op softmax imports it directly)
    "log_softmax": "kernels.softmax:log_softmax",
    "log_softmax_bug_tail_leak": "kernels.softmax:log_softmax_bug_tail_leak",
    # norms (kernels/norms.py)
    "layernorm": "kernels.norms:layernorm",
    "layernorm_bug_eps_outside": "kernels.norms:layernorm_bug_eps_outside",
    "rmsnorm": "kernels.norms:rmsnorm",
    "rmsnorm_bug_col_stride": "kernels.norms:rmsnorm_bug_col_stride",
    # losses, scans, gathers, copies
    "cross_entropy": "kernels.cross_entropy:cross_entropy",
    "cross_entropy_bug_no_max": "kernels.cross_entropy:cross_entropy_bug_no_max",
    "cumsum": "kernels.cumsum:cumsum",
    "embedding": "kernels.embedding:embedding",
    "transpose": "kernels.transpose:transpose",
    # batched matmul (kernels/matmul.py; the ops matmul and matmul_bug_acc_reset import it directly)
    "bmm": "kernels.matmul:bmm",
    "bmm_bug_k_floor": "kernels.matmul:bmm_bug_k_floor",
}


def load(name):
    """The kernel function registered under ``name``, its file imported now."""
    module, func = REGISTRY[name].split(":")
    return getattr(importlib.import_module(module), func)


def __getattr__(name):
    if name not in REGISTRY:
        raise AttributeError(f"module 'corpus' has no attribute {name!r}: no kernel registered under it")

    def op(*args, **kwargs):
        return load(name)(*args, **kwargs)

    op.__name__ = op.__qualname__ = name
    return op
