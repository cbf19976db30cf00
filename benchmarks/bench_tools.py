"""Benchmarks 6-8: lint cache, gate scaling and parallelism, peak memory of a big output."""

from __future__ import annotations

import itertools
import json
import subprocess
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

from common import PYTHON, ROOT, best_of, result, write_workspace


def relint(quick: bool) -> dict[str, Any]:
    """#6: re-lint of an unchanged .cu file vs a cold nvcc compile."""
    from gpuemu_ls.engine.cuda.lint import lint_file

    src = ROOT / "tests" / "data" / "cuda" / "tiled_matmul.cu"
    with tempfile.TemporaryDirectory() as tmp:
        cache = Path(tmp) / "cache"
        t0 = time.perf_counter()
        cold = lint_file(src, cache)
        cold_t = time.perf_counter() - t0
        if not cold or cold[0].status == "not_run":
            return result(
                6,
                "re-lint of an unchanged .cu file vs a cold nvcc compile",
                float("nan"),
                "ms",
                "< 20 ms",
                False,
                reason="no CUDA tools found",
            )
        warm_t = best_of(20 if not quick else 5, lambda: lint_file(src, cache))
        hit = lint_file(src, cache)[0].cache_hit
    return result(
        6,
        "re-lint of an unchanged .cu file (cache hit) vs a cold nvcc compile",
        warm_t * 1e3,
        "ms",
        "< 20 ms",
        warm_t < 0.02 and hit,
        cold_ms=round(cold_t * 1e3, 1),
        cache_hit=hit,
        speedup=round(cold_t / warm_t, 1),
    )


def _ops_workspace(root: Path, n: int) -> Path:
    ops = []
    for i in range(n):
        ops.append(
            textwrap.dedent(f"""
            [[ops]]
            name = "op{i:03d}"
            module = "kern:scale"
            reference = "kern:scale_ref"
            [ops.inputs.x]
            shape = ["B", "N"]
            [ops.dims]
            B = {{ min = 1, max = 32, default = 8 }}
            N = {{ min = 1, max = 1024, default = 256 }}
            [ops.kwargs]
            k = {i + 1}
        """)
        )
    toml = '[validation]\ndtypes = ["float32", "float16", "bfloat16"]\n' + "".join(ops)
    kern = textwrap.dedent("""
        import numpy as np

        def scale(x, k):
            acc = np.zeros(x.shape, dtype=np.float32)
            for _ in range(20):  # some work per case, like a small tiled kernel
                acc += np.asarray(x, dtype=np.float32) * np.float32(k / 20)
            return acc.astype(x.dtype)

        def scale_ref(x, k):
            return x * k
    """)
    return write_workspace(root, toml, {"kern.py": kern})


def _check(root: Path, jobs: int, iterations: int) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run(
        [
            PYTHON,
            "-m",
            "gpuemu_ls",
            "ci",
            "--thorough",
            "--iterations",
            str(iterations),
            "--jobs",
            str(jobs),
            "--format",
            "json",
            "--no-progress",
        ],
        cwd=root,
        capture_output=True,
        text=True,
        check=False,
    )
    elapsed = time.perf_counter() - t0
    doc = json.loads(proc.stdout)
    assert proc.returncode == 0 and doc["status"] == "passed", proc.stdout[-2000:] + proc.stderr[-2000:]
    return elapsed


def scaling(quick: bool) -> dict[str, Any]:
    """#7: --check thorough on generated workspaces: time per op as ops grow; --jobs 2 vs --jobs 1."""
    sizes = (5, 10, 20) if quick else (10, 30, 100)
    iterations = 10 if quick else 30
    per_op: dict[int, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for n in sizes:
            root = _ops_workspace(Path(tmp) / f"ws{n}", n)
            per_op[n] = _check(root, 1, iterations) / n
        big = Path(tmp) / f"ws{sizes[-1]}"
        one = _check(big, 1, iterations)
        two = _check(big, 2, iterations)
    # linear total = a fixed start-up plus the same cost per added op: compare the marginal cost per op
    # between consecutive sizes (the plain total / n falls as the start-up is shared by more ops)
    totals = {n: per_op[n] * n for n in sizes}
    marginal = {f"{a}->{b}": (totals[b] - totals[a]) / (b - a) for a, b in itertools.pairwise(sizes)}
    steps = list(marginal.values())
    growth = steps[-1] / steps[0]  # > 1: each op costs more as ops grow (superlinear); <= 1.25 is linear
    speedup = one / two
    return result(
        7,
        f"gpuemu-ls --check thorough ({iterations} cases/op): time per op as ops grow "
        f"{sizes[0]} -> {sizes[-1]}; --jobs 2 vs --jobs 1",
        speedup,
        "x (jobs 2 vs 1)",
        "marginal time per op flat (linear total); >= 1.7x",
        speedup >= 1.7 and growth <= 1.25,
        seconds_per_op={str(k): round(v, 3) for k, v in per_op.items()},
        marginal_seconds_per_op={k: round(v, 4) for k, v in marginal.items()},
        marginal_growth=round(growth, 2),
        jobs1_s=round(one, 2),
        jobs2_s=round(two, 2),
    )


RSS_SCRIPT = r"""
import json, sys
from pathlib import Path
import numpy as np
from gpuemu_ls.engine.config.load import load_config
from gpuemu_ls.engine.run.worker import build_context
from gpuemu_ls.engine.run.case import run_case
from gpuemu_ls.engine.cases.plan import derive_case

root = Path(sys.argv[1])
cfg = load_config(root)
op = cfg.op("outer")
ctx = build_context(root, op, cfg.validation)
spec = derive_case(op, 0)

def status_kb(key):
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1])

# a worker serves many cases: measure one in a process that has run a (small) case of the op before
import dataclasses
warm = dataclasses.replace(spec, dims={"M": 64, "N": 128}, shapes={"a": (64,), "b": (128,)})
assert run_case(ctx, warm).status == "passed"
before = status_kb("VmRSS")
result = run_case(ctx, spec)
# VmHWM, not ru_maxrss: the latter keeps the parent's high-water mark across fork + exec
peak = status_kb("VmHWM")
print(json.dumps({"before_kb": before, "peak_kb": peak, "status": result.status,
                  "elements": int(np.prod(result.comparisons[0].shape))}))
"""


def peak_rss(quick: bool) -> dict[str, Any]:
    """#8: peak RSS validating one 512 MiB float32 output (an outer product of two small vectors)."""
    n = 1 << (11 if quick else 13)  # n x 2n float32: 2**25 (128 MiB) or 2**27 (512 MiB)
    toml = f"""
    [validation]
    dtypes = ["float32"]
    distributions = ["normal"]
    [[ops]]
    name = "outer"
    module = "outer:op"
    reference = "outer:ref"
    layouts = ["contiguous"]
    [ops.inputs.a]
    shape = ["M"]
    [ops.inputs.b]
    shape = ["N"]
    [ops.dims]
    M = {n}
    N = {2 * n}
    """
    code = """
    import numpy as np

    def op(a, b):
        return np.multiply.outer(a, b)

    def ref(a, b):
        return np.multiply.outer(a, b)
    """
    with tempfile.TemporaryDirectory() as tmp:
        root = write_workspace(Path(tmp) / "ws", toml, {"outer.py": code})
        proc = subprocess.run([PYTHON, "-c", RSS_SCRIPT, str(root)], capture_output=True, text=True, check=True)
    info = json.loads(proc.stdout)
    out_bytes = info["elements"] * 4
    extra = (info["peak_kb"] - info["before_kb"]) * 1024
    ratio = extra / out_bytes
    return result(
        8,
        f"peak RSS validating one {out_bytes >> 20} MiB float32 output (beyond the process before the case)",
        ratio,
        "x the output size",
        "<= 3x",
        ratio <= 3.0,
        status=info["status"],
        extra_mib=round(extra / 2**20, 1),
        output_mib=out_bytes >> 20,
        note="floor: the op's float32 output (1x) plus the reference's float64 output (2x)",
    )


def _bugged_workspace(root: Path, n: int) -> Path:
    """``n`` cheap numpy ops, one module each, 5 % of them with a planted bug (a scale off by 1 %)."""
    files: dict[str, str] = {}
    ops = []
    for i in range(n):
        factor = "1.01 * k" if i % 20 == 0 else "k"
        files[f"k{i:04d}.py"] = (
            "import numpy as np\n\n\ndef op(x, k):\n"
            f"    return (np.asarray(x, dtype=np.float32) * np.float32({factor})).astype(x.dtype)\n"
            "\n\ndef ref(x, k):\n    return x * k\n"
        )
        ops.append(
            f'[[ops]]\nname = "op{i:04d}"\nmodule = "k{i:04d}:op"\nreference = "k{i:04d}:ref"\n'
            '[ops.inputs.x]\nshape = ["B", "N"]\n[ops.dims]\nB = { min = 1, max = 16, default = 4 }\n'
            f"N = {{ min = 1, max = 256, default = 64 }}\n[ops.kwargs]\nk = {i % 7 + 1}\n"
        )
    toml = '[validation]\ndtypes = ["float32"]\n' + "".join(ops)
    return write_workspace(root, toml, files)


def store_reads(quick: bool) -> dict[str, Any]:
    """#12: `gpuemu failures`, `ops` and `report` after a thorough run: time per op at 10x the ops."""
    small, big = (30, 300) if quick else (100, 1000)
    iterations = 10
    per_op: dict[str, dict[int, float]] = {"failures": {}, "ops": {}, "report": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for n in (small, big):
            root = _bugged_workspace(Path(tmp) / f"ws{n}", n)
            gate = [PYTHON, "-m", "gpuemu_ls", "ci", "--thorough", "--iterations", str(iterations), "--no-progress"]
            proc = subprocess.run(gate, cwd=root, capture_output=True, text=True, check=False)
            assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
            for command in per_op:
                argv = [PYTHON, "-m", "gpuemu_ls", command]

                def read(argv: list[str] = argv, root: Path = root) -> None:
                    done = subprocess.run(argv, cwd=root, capture_output=True, text=True, check=False)
                    assert done.returncode in (0, 1), done.stderr[-2000:]

                per_op[command][n] = best_of(3, read) / n
    growth = {c: round(t[big] / t[small], 2) for c, t in per_op.items()}
    worst = max(growth.values())
    return result(
        12,
        f"store reads after a thorough run ({iterations} cases/op, 5 % of ops failing): time per op at {big} ops"
        f" vs {small} ops, worst of failures/ops/report",
        worst,
        "x per op",
        "<= 1.5x",
        worst <= 1.5,
        growth=growth,
        ms_per_op={c: {str(n): round(v * 1000, 2) for n, v in t.items()} for c, t in per_op.items()},
    )


BENCHMARKS = {6: relint, 7: scaling, 8: peak_rss, 12: store_reads}
