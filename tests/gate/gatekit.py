"""Helpers of the gate acceptance tests: run the real CLI faces as subprocesses, copy workspaces, read files.

Everything here drives the product from outside: `python -m gpuemu_ls ...` (the `gpuemu` CLI), the
`gpuemu-ls --check` gate through `server_main`, real worker processes and the real CUDA toolchain.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

from kit.cli import NO_USER_CONFIG, VENV_BIN, check, env, gpuemu, jdoc, out
from kit.ops import kernel_toml, op_toml, project_toml
from kit.workspace import EXAMPLES, copy_example, copy_workspace, load_toml, write_files
from kit.workspace import REPO as ROOT

CUDA_DATA = ROOT / "tests" / "data" / "cuda"

#: the nine bug classes of examples/buggy (each op X has a twin X_ok)
BUGGY_OPS = (
    "softmax_tail_mask",
    "matmul_acc_overwrite",
    "softmax_online_rescale",
    "attention_missing_scale",
    "rowscale_strides",
    "softmax_no_max",
    "rmsnorm_fp16_acc",
    "masked_softmax_nan",
    "variance_empty_split",
)


def shell(script: str, cwd: Path, timeout: float = 600, **extra: str) -> subprocess.CompletedProcess:
    """A CI step: ``bash -e -c SCRIPT`` (GitHub's default shell for `run:`) with the venv on PATH."""
    return subprocess.run(
        ["bash", "-e", "-c", script],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env=env(**extra),
    )


def standalone(python: Path, script: Path, cwd: Path) -> subprocess.CompletedProcess:
    """Run a standalone reproduction the way a colleague would: isolated interpreter, another folder."""
    return subprocess.run(
        [str(python), "-I", str(script)], cwd=cwd, capture_output=True, text=True, timeout=300, check=False
    )


def op_table(ws: Path, name: str) -> dict[str, Any]:
    for op in load_toml(ws).get("ops", []):
        if op["name"] == name:
            return op
    raise KeyError(name)


def line_of(path: Path, pattern: str, after: int = 0) -> int:
    """1-based number of the first line (after line ``after``) matching the regex ``pattern``."""
    rx = re.compile(pattern)
    for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if i > after and rx.search(line):
            return i
    raise AssertionError(f"no line matching {pattern!r} in {path}")


def ops_header_line(ws: Path, name: str) -> int:
    """The line of the `[[ops]]` header of op ``name`` in gpuemu.toml."""
    toml = ws / "gpuemu.toml"
    name_line = line_of(toml, rf'^name\s*=\s*"{re.escape(name)}"\s*$')
    lines = toml.read_text(encoding="utf-8").splitlines()
    for i in range(name_line - 1, 0, -1):
        if lines[i - 1].strip() == "[[ops]]":
            return i
    raise AssertionError(f"no [[ops]] above op {name}")


def swap_module(ws: Path, op: str, module: str) -> None:
    """Point op ``op`` of ws/gpuemu.toml at ``module`` (exactly one `module = ...` line changes)."""
    toml = ws / "gpuemu.toml"
    old = op_table(ws, op)["module"]
    text = toml.read_text(encoding="utf-8")
    new, n = re.subn(rf'(?m)^module = "{re.escape(old)}"$', f'module = "{module}"', text)
    assert n == 1, f"expected one module line {old!r} in {toml}, found {n}"
    toml.write_text(new, encoding="utf-8")
    assert op_table(ws, op)["module"] == module


def normalized(doc: Any) -> Any:
    """A results document without what differs between two runs of the same thing."""
    volatile = {"run_id", "created_at", "elapsed", "finished_at", "duration_ms", "timing", "full_estimate", "model"}
    volatile |= {"date"}  # the provenance's: when the run ended
    if isinstance(doc, dict):
        return {k: normalized(v) for k, v in doc.items() if k not in volatile}
    if isinstance(doc, list):
        return [normalized(v) for v in doc]
    return doc


def numel(shapes: dict[str, list[int]]) -> int:
    total = 0
    for shape in shapes.values():
        n = 1
        for d in shape:
            n *= d
        total += n
    return total


def have_nvcc() -> bool:
    from gpuemu_ls.engine.cuda.toolchain import find_toolchain

    return find_toolchain().nvcc is not None


# --- a workspace with every verdict: passed, failed, error, not_run ops and lint-checked kernels ----

MIXED_OPS_PY = '''"""Four ops over one float64 reference: correct, wrong on odd N, raising, and not runnable here."""

import numpy as np


def reference(x):
    return x * 2.0


def double_ok(x):
    return x * np.asarray(2, dtype=x.dtype)


def double_bad(x):
    out = x * np.asarray(2, dtype=x.dtype)
    if x.shape[-1] % 2:
        out[..., -1] += 1  # the tail element is off by one
    return out


def double_raises(x):
    raise RuntimeError("kernel launch failed: too many resources requested")
'''

#: gate acceptance tests: one op of each verdict and two kernels
MIXED_TOML = (
    "# gate acceptance tests: one op of each verdict and two kernels\n"
    + project_toml("mixed", validation={"dtypes": ["float32"]}, ci_quick={"iterations": 12})
    + "".join(
        op_toml(f"double_{v}", module=f"ops:double_{v}", reference="ops:reference", inputs={})
        for v in ("ok", "bad", "raises")
    )
    + op_toml("double_remote", execution_mode="client_side", reference="ops:reference", inputs={})
    + kernel_toml("vector_add", "kernels/vector_add.cu")
    + kernel_toml("uses_printf", "kernels/forbidden.cu", {"forbidden_instructions": ["re:vprintf"]})
)


def add_lint_kernels(root: Path) -> Path:
    """Copy the lint examples (tests/data/cuda's vector_add.cu and forbidden.cu) into ``root/kernels``."""
    (root / "kernels").mkdir(exist_ok=True)
    for f in ("vector_add.cu", "forbidden.cu"):
        shutil.copy(CUDA_DATA / f, root / "kernels" / f)
    return root


def make_mixed_workspace(root: Path) -> Path:
    return add_lint_kernels(write_files(root, {"gpuemu.toml": MIXED_TOML, "ops.py": MIXED_OPS_PY}))


# --- schema validation ----------------------------------------------------------------------------


def validate_junit(xml_text: str, xsds: list[Path]) -> None:
    """Validate against every given junit-10.xsd (xmlschema raises with the offending path)."""
    import pytest

    xmlschema = pytest.importorskip("xmlschema", reason="xmlschema validates JUnit XML (pip install xmlschema)")
    assert xsds, "no junit-10.xsd"
    for xsd in xsds:
        xmlschema.XMLSchema(str(xsd)).validate(xml_text)


def validate_sarif(log: dict[str, Any], schema_file: Path) -> None:
    import jsonschema

    schema = json.loads(schema_file.read_text(encoding="utf-8"))
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    errors = sorted(cls(schema, format_checker=cls.FORMAT_CHECKER).iter_errors(log), key=lambda e: list(e.path))
    assert not errors, "\n".join(f"{list(e.path)}: {e.message[:300]}" for e in errors[:10])


__all__ = [
    "BUGGY_OPS",
    "CUDA_DATA",
    "EXAMPLES",
    "NO_USER_CONFIG",
    "ROOT",
    "VENV_BIN",
    "check",
    "copy_example",
    "copy_workspace",
    "env",
    "gpuemu",
    "have_nvcc",
    "jdoc",
    "line_of",
    "load_toml",
    "make_mixed_workspace",
    "normalized",
    "numel",
    "op_table",
    "ops_header_line",
    "out",
    "shell",
    "standalone",
    "swap_module",
    "validate_junit",
    "validate_sarif",
    "write_files",
]
