"""Benchmarks 1-3: script throughput (warm vs cold), in-process overhead, comparison speed and memory."""

from __future__ import annotations

import gc
import subprocess
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np
from common import PYTHON, SOFTMAX_KERNEL, SOFTMAX_SCRIPT_OP, SOFTMAX_SCRIPT_REF, best_of, result, write_workspace

from gpuemu_ls.engine.cases.generate import generate_inputs
from gpuemu_ls.engine.config.load import load_config
from gpuemu_ls.engine.oracle.compare import compare_output
from gpuemu_ls.engine.run import wire
from gpuemu_ls.engine.run.validate import RunOptions, plan_op, run_validation

SCRIPT_TOML = """
[validation]
dtypes = ["float32"]
distributions = ["normal"]
[[ops]]
name = "softmax"
execution_mode = "script_based"
op_script = "ops/softmax_op.py"
reference = "refs/softmax_ref.py"
[ops.inputs.x]
shape = ["B", "N"]
[ops.dims]
B = 64
N = 1024
"""

INPROCESS_TOML = """
[validation]
dtypes = ["float32"]
distributions = ["normal"]
[[ops]]
name = "softmax"
module = "kernels:softmax"
reference = "kernels:reference"
layouts = ["contiguous"]
[ops.inputs.x]
shape = ["B", "N"]
[ops.dims]
B = 64
N = 1024
"""


def _run(root: Path, iterations: int, store: bool, jobs: int = 1) -> tuple[float, Any]:
    cfg = load_config(root)
    t0 = time.perf_counter()
    res = run_validation(
        cfg, RunOptions(mode="thorough", iterations=iterations, store=store, source="bench", jobs=jobs)
    )
    return time.perf_counter() - t0, res


def _scripts_alone(root: Path, requests: list[tuple[str, str]]) -> float:
    """Seconds per case the two scripts take by themselves (JSON, base64, numpy), run in this process on
    requests encoded beforehand: what any warm runner of these unchanged scripts must spend at least."""
    import contextlib
    import io
    import sys

    codes = [
        compile((root / p).read_text(), str(root / p), "exec") for p in ("ops/softmax_op.py", "refs/softmax_ref.py")
    ]
    sys.path.insert(0, str(root / "ops"))
    try:
        t0 = time.perf_counter()
        for op_req, ref_req in requests:
            for code, req in zip(codes, (op_req, ref_req), strict=True):
                out = io.StringIO()
                saved = sys.stdin
                sys.stdin = io.StringIO(req)
                try:
                    with contextlib.redirect_stdout(out):
                        exec(code, {"__name__": "__main__"})
                finally:
                    sys.stdin = saved
        return (time.perf_counter() - t0) / len(requests)
    finally:
        sys.path.remove(str(root / "ops"))


def script_throughput(quick: bool) -> dict[str, Any]:
    """#1: a script-based op and reference, warm workers vs one Python start per script per case."""
    cases, cold_cases = (40, 4) if quick else (200, 20)
    with tempfile.TemporaryDirectory() as tmp:
        root = write_workspace(
            Path(tmp) / "ws",
            SCRIPT_TOML,
            {
                "ops/kernels.py": SOFTMAX_KERNEL,
                "ops/softmax_op.py": SOFTMAX_SCRIPT_OP,
                "refs/softmax_ref.py": SOFTMAX_SCRIPT_REF,
            },
        )
        warm, res = _run(root, cases, store=False)
        o = res.outcomes[0]
        assert o.status == "passed" and len(o.cases) == cases, o.message
        warm2, res2 = _run(root, cases, store=False, jobs=2)
        assert res2.outcomes[0].status == "passed" and len(res2.outcomes[0].cases) == cases
        cfg = load_config(root)
        op = cfg.op("softmax")
        specs = plan_op(cfg, op, "thorough", cold_cases, None)
        requests = []
        for spec in specs:
            x = generate_inputs(op, spec).logical["x"]
            requests.append((wire.encode_request({"x": x}, {}), wire.encode_request({"x": x.astype(np.float64)}, {})))
        # the scripts' own work is a floor: the least of three passes (one pass swung 10-24 ms on a shared machine)
        alone = min(_scripts_alone(root, requests) for _ in range(3))
        t0 = time.perf_counter()
        for spec in specs:  # what gpuemu did: one `python script.py` per script per case
            x = generate_inputs(op, spec).logical["x"]
            out = subprocess.run(
                [PYTHON, str(root / "ops/softmax_op.py")],
                input=wire.encode_request({"x": x}, {}),
                capture_output=True,
                text=True,
                cwd=root,
                check=True,
            )
            ref = subprocess.run(
                [PYTHON, str(root / "refs/softmax_ref.py")],
                input=wire.encode_request({"x": x.astype(np.float64)}, {}),
                capture_output=True,
                text=True,
                cwd=root,
                check=True,
            )
            cmp = compare_output(
                "result",
                wire.decode_response(out.stdout)["result"],
                wire.decode_response(ref.stdout)["result"],
                "float32",
                1e-5,
                1e-5,
            )
            assert cmp.passed
        cold = time.perf_counter() - t0
    warm_case, cold_case = warm / cases, cold / cold_cases
    ratio = cold_case / warm_case
    return result(
        1,
        "fuzz throughput, script op + script reference, softmax [64,1024] fp32: warm workers vs one "
        "Python start per script per case",
        ratio,
        "x",
        ">= 50x",
        ratio >= 50,
        warm_ms_per_case=round(warm_case * 1e3, 2),
        cold_ms_per_case=round(cold_case * 1e3, 1),
        ratio_jobs_2=round(cold_case / (warm2 / cases), 1),
        scripts_alone_ms_per_case=round(alone * 1e3, 2),
        warm_x_scripts_alone=round(warm_case / alone, 2),  # gpuemu's whole case over the scripts' own work
        ceiling_for_these_scripts=round(cold_case / alone, 1),
        warm_cases=cases,
        cold_cases=cold_cases,
        warm_total_s=round(warm, 2),
    )


def inprocess_overhead(quick: bool) -> dict[str, Any]:
    """#2: in-process op and module:function reference vs the bare numpy cost on the same inputs."""
    cases = 50 if quick else 500
    with tempfile.TemporaryDirectory() as tmp:
        root = write_workspace(Path(tmp) / "ws", INPROCESS_TOML, {"kernels.py": SOFTMAX_KERNEL})
        cfg = load_config(root)
        op = cfg.op("softmax")
        specs = plan_op(cfg, op, "thorough", cases, None)
        inputs = [generate_inputs(op, s).logical["x"] for s in specs]
        ns: dict[str, Any] = {}
        exec(compile(SOFTMAX_KERNEL, "kernels", "exec"), ns)
        softmax, reference = ns["softmax"], ns["reference"]

        def bare() -> None:
            for x in inputs:
                y = softmax(x)
                r = reference(x.astype(np.float64))
                assert bool(np.all(np.abs(y - r) <= 1e-5 + 1e-5 * np.abs(r)))

        bare_t = best_of(3, bare)
        t0 = time.perf_counter()
        for s in specs:
            generate_inputs(op, s)
        generation_t = time.perf_counter() - t0
        engine_t = min(_run(root, cases, store=True)[0] for _ in range(2))
        engine2_t = min(_run(root, cases, store=True, jobs=2)[0] for _ in range(2))
    ratio = engine_t / bare_t
    return result(
        2,
        "in-process op + module:function reference, softmax [64,1024] fp32: whole run (workers, "
        "generation, store) vs bare numpy op + reference + comparison",
        ratio,
        "x",
        "<= 1.5x",
        ratio <= 1.5,
        engine_ms_per_case=round(engine_t / cases * 1e3, 2),
        bare_ms_per_case=round(bare_t / cases * 1e3, 2),
        generation_ms_per_case=round(generation_t / cases * 1e3, 2),
        ratio_jobs_2=round(engine2_t / bare_t, 2),
        cases=cases,
    )


def comparison(quick: bool) -> dict[str, Any]:
    """#3: comparing two 2**27-element fp32 tensors vs one np.subtract pass; extra memory."""
    n = 1 << (22 if quick else 27)
    rng = np.random.default_rng(0)
    a = rng.standard_normal(n, dtype=np.float32)
    b = (a + a * np.float32(1e-7)).astype(np.float32)
    sub_t = best_of(3, lambda: np.subtract(a, b))
    cmp_t = best_of(3, lambda: compare_output("result", a, b, "float32", 1e-5, 1e-5))
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    cmp = compare_output("result", a, b, "float32", 1e-5, 1e-5)
    peak = tracemalloc.get_traced_memory()[1] - base
    tracemalloc.stop()
    assert cmp.passed
    speed = sub_t / cmp_t
    extra = peak / a.nbytes
    return result(
        3,
        f"comparison of two 2^{n.bit_length() - 1}-element fp32 tensors vs one np.subtract pass",
        speed,
        "x of np.subtract's speed",
        ">= 0.5x and extra memory <= 1x one tensor",
        speed >= 0.5 and extra <= 1.0,
        compare_s=round(cmp_t, 3),
        subtract_s=round(sub_t, 3),
        extra_memory_mb=round(peak / 2**20, 1),
        extra_memory_x_tensor=round(extra, 4),
    )


BENCHMARKS = {1: script_throughput, 2: inprocess_overhead, 3: comparison}
