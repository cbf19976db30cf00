"""The API suite's own workspace: client-side ops and a module op over the kit's numpy references.

Everything generic (frameworks, store readers, op sources, the CLI runner) lives in ``tests/kit``.
"""

from __future__ import annotations

from kit.ops import op_toml, project_toml

_BN = {"B": (1, 8, 4), "N": (1, 200, 64)}

#: One client-side op (no module: only reachable through run_op), one module op, one two-input op with kwargs.
CLIENT_TOML = (
    project_toml(
        "api-test",
        validation={"dtypes": ["float32", "float16", "bfloat16"], "iterations": 12},
        ci={"fuzz_iterations": 12},
    )
    + op_toml(
        "softmax",
        execution_mode="client_side",
        reference="refs:softmax",
        invariants=["shape_preserved"],
        dims=_BN,
        tables={"kwargs": {"axis": -1}},
    )
    + op_toml("softmax_mod", module="ops:softmax", reference="refs:softmax", dims=_BN)
    + op_toml(
        "add",
        execution_mode="client_side",
        reference="refs:scaled_add",
        dtypes=["float32"],
        inputs={"x": ["B", "N"], "y": ["B", "N"]},
        dims={"B": (1, 4, 2), "N": (1, 32, 8)},
        tables={"kwargs": {"alpha": 0.5}},
    )
)
