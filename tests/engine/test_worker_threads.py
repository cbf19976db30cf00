"""Workers share the machine's cores with their framework (issue 27): torch's default of every core per
worker makes workers that run side by side spin against each other (on 2 cores with -j 2, a matmul-heavy
torch op ran 1.28x slower). Each worker lets torch use its share, available cores // jobs."""

from __future__ import annotations

from pathlib import Path

import pytest
from kit.cli import gpuemu, jdoc, out
from kit.ops import op_toml, project_toml
from kit.workspace import write_ws

from gpuemu_ls.engine.run.cpus import available_cpus

pytest.importorskip("torch")

OPS = """
import numpy as np
import torch


def threads(x, expected):
    return x * 0 + torch.get_num_threads()  # what the worker lets torch use


def expected(x, expected):
    return np.zeros_like(x) + expected
"""


@pytest.mark.parametrize("jobs", [1, 2])
def test_each_worker_lets_torch_use_its_share_of_the_cores(tmp_path: Path, jobs: int) -> None:
    share = max(1, available_cpus() // jobs)
    toml = project_toml(project={"name": "t", "framework": "pytorch"}, validation={"iterations": 4})
    for name in ("a", "b"):
        toml += op_toml(
            name,
            module="ops:threads",
            reference="ops:expected",
            dtypes=["float32"],
            distributions=["normal"],
            dims={"B": (1, 4, 2), "N": (1, 8, 4)},
            tables={"kwargs": {"expected": share}},
        )
    root = write_ws(tmp_path, toml, {"ops.py": OPS})
    proc = gpuemu("test", "-j", str(jobs), "--format", "json", cwd=root)
    assert {o["status"] for o in jdoc(proc)["ops"]} == {"passed"}, out(proc)
