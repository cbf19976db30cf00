"""Wiring an existing kernel library without adapters (issue 15, item 9).

`call = "positional" | "kwargs" | "dict"` says how the library's functions take their inputs (and
`reference_call` for an in-process reference); functions a module makes at import time are accepted;
candidate dims take an explicit default; a package installed in the environment is an op by
`module = "pkg.sub:fn"` with no file copied into the workspace. Each is tested with a correct op that
must pass and a buggy twin that must fail, through the real CLI and workers.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from gatekit import VENV_BIN, env, gpuemu, jdoc, out, write_files

LIB = """import numpy as np


def run_dict(inputs, alpha=1.0):
    return {"y": inputs["x"] * alpha + inputs["w"]}


def run_dict_bug(inputs, alpha=1.0):
    return {"y": inputs["x"] * alpha - inputs["w"]}


def run_kwargs(*, x, w, alpha=1.0):
    return x * alpha + w


def run_kwargs_bug(*, x, w, alpha=1.0):
    return x + w  # alpha forgotten


def reference_dict(inputs, alpha=1.0):
    return {"y": np.asarray(inputs["x"], np.float64) * alpha + np.asarray(inputs["w"], np.float64)}


def reference_positional(x, w, alpha=1.0):
    return np.asarray(x, np.float64) * alpha + np.asarray(w, np.float64)


# a registry that makes its kernels at import time, as many libraries do
def _make(sign):
    def kernel(x, w, alpha=1.0):
        return x * alpha + sign * w

    return kernel


for _name, _sign in (("generated_axpy", 1.0), ("generated_axpy_bug", -1.0)):
    globals()[_name] = _make(_sign)
"""

HEAD = """[project]
name = "wiring"

[validation]
dtypes = ["float32"]
[ci.quick]
iterations = 6
"""


def op(name: str, body: str, n: str = "N = { min = 1, max = 64, default = 16 }") -> str:
    return (
        f'\n[[ops]]\nname = "{name}"\n{body}\ninput_names = ["x", "w"]\n[ops.kwargs]\nalpha = 0.5\n'
        f'[ops.inputs.x]\nshape = ["B", "N"]\n[ops.inputs.w]\nshape = ["B", "N"]\n'
        f"[ops.dims]\nB = {{ min = 1, max = 4, default = 2 }}\n{n}\n"
    )


CASES = {
    "dict": ('module = "lib:run_dict"\nreference = "lib:reference_dict"\ncall = "dict"', "run_dict_bug"),
    "kwargs": (
        'module = "lib:run_kwargs"\nreference = "lib:reference_positional"\ncall = "kwargs"\n'
        'reference_call = "positional"',
        "run_kwargs_bug",
    ),
    "generated": ('module = "lib:generated_axpy"\nreference = "lib:reference_positional"', "generated_axpy_bug"),
}


@pytest.mark.parametrize("style", sorted(CASES))
def test_library_functions_run_as_they_are(style: str, tmp_path: Path) -> None:
    body, bug = CASES[style]
    good_fn = body.split('"lib:')[1].split('"')[0]
    toml = HEAD + op("good", body) + op("bad", body.replace(f"lib:{good_fn}", f"lib:{bug}"))
    ws = write_files(tmp_path / "ws", {"gpuemu.toml": toml, "lib.py": LIB})
    proc = gpuemu("test", "--quick", "--format", "json", cwd=ws)
    assert proc.returncode == 1, out(proc)
    verdicts = {e["name"]: e["status"] for e in jdoc(proc)["ops"]}
    assert verdicts == {"good": "passed", "bad": "failed"}, out(proc)
    if style == "generated":  # seen statically as made at import time: a warning, not an error
        assert "makes names at import time" in proc.stderr, proc.stderr
    # the standalone reproduction calls the library the same way
    seed = jdoc(proc)["ops"][1]["failures"][0]["seed"]
    rep = gpuemu("reproduce", "--op", "bad", "--seed", str(seed), cwd=ws)
    assert rep.returncode == 1, out(rep)
    script = ws / ".gpuemu" / "repro" / f"bad_{seed}.py"
    ran = subprocess.run([sys.executable, "-I", str(script)], capture_output=True, text=True, timeout=120)
    assert ran.returncode == 1 and "FAILED" in ran.stdout, ran.stdout + ran.stderr


def test_a_missing_name_is_still_an_error_in_a_static_module(tmp_path: Path) -> None:
    ws = write_files(
        tmp_path / "ws",
        {
            "gpuemu.toml": HEAD + op("typo", 'module = "plain:axpyy"\nreference = "plain:axpy"'),
            "plain.py": "def axpy(x, w, alpha=1.0):\n    return x * alpha + w\n",
        },
    )
    proc = gpuemu("test", "--quick", cwd=ws)
    assert proc.returncode == 2 and "defines no 'axpyy'" in proc.stderr and "did you mean 'axpy'" in proc.stderr, out(
        proc
    )


def test_bad_call_values_are_configuration_errors(tmp_path: Path) -> None:
    ws = write_files(
        tmp_path / "ws",
        {
            "gpuemu.toml": HEAD
            + op("x", 'module = "lib:run_dict"\nreference = "lib:reference_dict"\ncall = "mapping"'),
            "lib.py": LIB,
        },
    )
    proc = gpuemu("test", "--quick", cwd=ws)
    assert proc.returncode == 2 and "call" in proc.stderr and "dict" in proc.stderr, out(proc)


def test_candidate_dims_take_an_explicit_default(tmp_path: Path) -> None:
    n = "N = { candidates = [7, 64, 256], default = 64 }"
    toml = HEAD + op("cands", 'module = "lib:generated_axpy"\nreference = "lib:reference_positional"', n)
    ws = write_files(tmp_path / "ws", {"gpuemu.toml": toml, "lib.py": LIB})
    proc = gpuemu("test", "--iterations", "12", "--format", "json", cwd=ws)
    assert proc.returncode == 0, out(proc)
    from gpuemu_ls.engine.config.load import load_config
    from gpuemu_ls.engine.run.validate import plan_op

    cfg = load_config(ws)
    specs = plan_op(cfg, cfg.op("cands"), "thorough", 12, None)
    sizes = [s.dims["N"] for s in specs]
    assert set(sizes) <= {7, 64, 256} and 7 in sizes, sizes  # the minimum rule covers the smallest candidate
    defaults = [s.dims["N"] for s in plan_op(cfg, cfg.op("cands"), "thorough", 40, None) if s.strategy == "default"]
    assert defaults and set(defaults) == {64}, defaults  # the default shape is the declared default
    assert cfg.op("cands").dims["N"].default == 64
    bad = write_files(tmp_path / "bad", {"gpuemu.toml": toml.replace("default = 64", "default = 65"), "lib.py": LIB})
    proc = gpuemu("ops", cwd=bad)
    assert proc.returncode == 2 and "not one of the candidates" in proc.stderr, out(proc)


def test_an_installed_package_is_an_op_without_copying_files(tmp_path: Path) -> None:
    """numpy.linalg:matrix_transpose is a library function installed in the environment, not in the workspace."""
    toml = HEAD.replace('dtypes = ["float32"]', 'dtypes = ["float32", "float16"]') + (
        '\n[[ops]]\nname = "transpose"\nmodule = "numpy.linalg:matrix_transpose"\nreference = "ref:transpose"\n'
        "[ops.tolerances]\nfloat32 = { ulp = 0 }\nfloat16 = { ulp = 0 }\n"
        '[ops.inputs.x]\nshape = ["B", "M", "N"]\n[ops.dims]\nB = { min = 1, max = 3 }\nM = { min = 1, max = 40 }\n'
        "N = { min = 1, max = 40 }\n"
    )
    ref = "import numpy as np\n\n\ndef transpose(x):\n    return np.swapaxes(np.asarray(x, np.float64), -1, -2)\n"
    ws = write_files(tmp_path / "ws", {"gpuemu.toml": toml, "ref.py": ref})
    proc = gpuemu("test", "--iterations", "10", "--format", "json", cwd=ws)
    assert proc.returncode == 0, out(proc)
    assert jdoc(proc)["ops"][0]["cases"] == 10
    # its buggy twin: an installed function that is not a transpose
    bad = write_files(tmp_path / "bad", {"gpuemu.toml": toml.replace("matrix_transpose", "matrix_norm"), "ref.py": ref})
    proc = gpuemu("test", "--iterations", "4", cwd=bad)
    assert proc.returncode == 1, out(proc)
    # a workspace folder of that name is the workspace's, never silently the installed one
    shadow = write_files(tmp_path / "shadow", {"gpuemu.toml": toml, "ref.py": ref, "numpy/__init__.py": ""})
    # through the console script, as a user runs it (`python -m` would put the workspace before numpy)
    proc = subprocess.run([str(VENV_BIN / "gpuemu"), "ops"], cwd=shadow, capture_output=True, text=True, env=env())
    assert proc.returncode == 2 and "not found in the workspace" in proc.stderr, out(proc)
