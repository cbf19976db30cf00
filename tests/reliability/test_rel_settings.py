"""Settings and shapes that once surfaced as internal errors or as the op's fault (issue 14, item 11).

Every numeric setting has bounds in the checker (a value past them is reported at its line, exit 2), a
reference's odd return value is named for what it is, and an exception gpuemu did not expect is reported
as gpuemu's own bug (exit 70) with a short block for a ticket, never as a traceback or as the op failing.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import relkit

OUT_OF_BOUNDS = {
    # name -> (where the line goes: "validation" or "op" or "ci" or "quick", the line)
    "timeout_huge": ("op", "timeout = 1e15"),
    "validation_timeout_huge": ("validation", "timeout = 1e300"),
    "memory_tiny": ("validation", "memory_limit_mb = 1"),
    "memory_huge": ("validation", "memory_limit_mb = 99999999999"),
    "iterations_huge": ("op", "iterations = 10000000"),
    "validation_iterations_huge": ("validation", "iterations = 123456789"),
    "quick_iterations_huge": ("quick_extra", "iterations = 2000000"),
    "parallel_jobs_huge": ("ci", "parallel_jobs = 100000"),
    "fuzz_iterations_huge": ("ci", "fuzz_iterations = 99999999"),
    "thorough_timeout_huge": ("ci", "thorough_timeout = 1e20"),
    "snapshots_huge": ("validation", "max_failure_snapshots = 1000000000"),
    "dim_huge": ("dims", "N = { min = 2, max = 1099511627776, default = 8 }"),
    "atol_huge": ("validation", "tolerances.float32 = { atol = 1e305, rtol = 0.0 }"),
}


def _ws(root: Path, where: str, line: str) -> Path:
    validation = line + "\n" if where == "validation" else ""
    body = 'module = "kern:double"\nreference = "kern:reference"'
    if where == "op":
        body += "\n" + line
    dims = "B = { min = 1, max = 4, default = 2 }\n" + (
        line if where == "dims" else "N = { min = 2, max = 16, default = 8 }"
    )
    toml = relkit.HEADER.format(name="bounds", validation=validation, quick=2)
    if where == "quick_extra":
        toml = toml.replace("iterations = 2\n", line + "\n")
    toml += relkit.op_block("double", body, dims=dims)
    if where == "ci":
        toml += f"\n[ci]\n{line}\n"
    return relkit.write_ws(root, toml, {"kern.py": relkit.GOOD_PY})


@pytest.mark.parametrize("case", sorted(OUT_OF_BOUNDS))
def test_numeric_settings_out_of_bounds_are_configuration_errors(tmp_path: Path, case: str) -> None:
    relkit.record("config", cases=1)
    where, line = OUT_OF_BOUNDS[case]
    root = _ws(tmp_path / "ws", where, line)
    toml = root / "gpuemu.toml"
    at = relkit.line_of(toml, line.split(" = ")[0] + " = " + line.split(" = ", 1)[1][:6])
    for proc in (relkit.run_cli(root, "test", "--quick", "--no-progress"), relkit.run_check(root, "--quick")):
        out = proc.stdout + proc.stderr
        assert proc.returncode == 2, out
        assert f"{toml}:{at}:" in proc.stderr and "must be in [" in proc.stderr, out
        assert relkit.no_traceback(out), out


def test_bounds_admit_their_edges(tmp_path: Path) -> None:
    """The bounds are not tighter than documented: the edges themselves load and run."""
    root = _ws(tmp_path / "ws", "validation", "memory_limit_mb = 256\ntimeout = 86400")
    proc = relkit.run_cli(root, "test", "--quick", "--no-progress")
    assert proc.returncode == 0, proc.stdout + proc.stderr


ODD_REFS = """import numpy as np


def double(x):
    return x * 2


def nested_list_ref(x):
    return (np.asarray(x, dtype=np.float64) * 2.0).tolist()


def nested_list_op(x):
    return (x * 2).tolist()


def two_outputs_list_op(x):
    return [x * 2, x * 3]


def two_outputs_ref(x):
    a = np.asarray(x, dtype=np.float64)
    return (a * 2.0, a * 3.0)


def int_ref(x):
    return (np.asarray(x, dtype=np.float64) > 0).astype(np.int64)


def positive(x):
    return (x > 0).astype(x.dtype)
"""


@pytest.mark.parametrize(
    ("op", "ref", "code", "says"),
    [
        ("kern:double", "kern:nested_list_ref", 0, "passed"),  # a nested list is one array
        ("kern:nested_list_op", "kern:reference", 1, "float64"),  # one array, but of Python floats
        ("kern:two_outputs_list_op", "kern:two_outputs_ref", 0, "passed"),  # a list of arrays: two outputs
        ("kern:positive", "kern:int_ref", 1, "the reference returned int64 for a float32 case"),
    ],
)
def test_odd_return_values_are_named_for_what_they_are(tmp_path: Path, op: str, ref: str, code: int, says: str) -> None:
    toml = relkit.HEADER.format(name="odd", validation="", quick=2)
    toml += relkit.op_block("odd", f'module = "{op}"\nreference = "{ref}"')
    root = relkit.write_ws(tmp_path / "ws", toml, {"kern.py": relkit.GOOD_PY + "\n" + ODD_REFS.split("\n", 2)[2]})
    proc = relkit.run_cli(root, "test", "--quick", "--no-progress", "--format", "json")
    assert proc.returncode == code, proc.stdout + proc.stderr
    doc = json.loads(proc.stdout)
    text = json.dumps(doc["ops"][0])
    assert "output_names" not in text, text
    assert says in text or says in doc["ops"][0]["status"], text


CRASHING = """
import importlib
import sys


def broken(*args, **kwargs):
    raise ZeroDivisionError("injected: a bug inside gpuemu")


owner = importlib.import_module({module!r})
for part in {path!r}:
    owner = getattr(owner, part)
setattr(owner, {name!r}, broken)
from gpuemu_ls.{face} import {main}

sys.exit({main}({argv!r}))
"""


@pytest.mark.parametrize(
    ("face", "main", "target", "argv"),
    [
        ("cli", "gpuemu_main", "gpuemu_ls.cli:render_parts", ["test", "--quick", "--no-progress"]),
        ("cli", "gpuemu_main", "gpuemu_ls.engine.store.db:Store.latest_op_results", ["ops"]),
        ("gate", "check_main", "gpuemu_ls.gate:render_parts", ["--check", "--quick"]),
    ],
)
def test_an_internal_error_is_reported_as_gpuemus_bug(
    tmp_path: Path, face: str, main: str, target: str, argv: list[str]
) -> None:
    """Fault injection in a real subprocess: one function of gpuemu replaced by one that raises."""
    root = relkit.good_ws(tmp_path / "ws")
    module, _, attr = target.partition(":")
    *path, name = attr.split(".")
    script = CRASHING.format(module=module, path=path, name=name, face=face, main=main, argv=argv)
    proc = subprocess.run(
        [relkit.PY, "-c", script], cwd=root, capture_output=True, text=True, timeout=relkit.LONG, env=relkit.child_env()
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 70, out
    assert "internal error: this is a bug in gpuemu-ls" in proc.stderr, out
    assert "ZeroDivisionError: injected" in proc.stderr and "command: gpuemu" in proc.stderr, out
    assert relkit.no_traceback(out), out
    saved = Path(proc.stderr.split("traceback saved in ", 1)[1].split()[0])
    text = saved.read_text()
    saved.unlink()
    assert "Traceback" in text and "injected" in text, text


GREEDY_PY = """import numpy as np

from gpuemu_ls.engine.run.worker import default_memory_mb


def greedy(x):
    # more private memory than the default allows: refused at allocation, without touching a page
    block = np.empty(int(default_memory_mb() * 1.25) * 2**20, dtype=np.uint8)
    return x * 2 + block[:1].astype(x.dtype) * 0


def reference(x):
    return np.asarray(x, dtype=np.float64) * 2.0
"""


@pytest.mark.parametrize("no_zygote", [False, True])
def test_workers_have_a_default_memory_limit(tmp_path: Path, no_zygote: bool) -> None:
    """Without memory_limit_mb, a case that asks for more than half the machine's memory gets a MemoryError
    (reported at the op's line), not a machine brought down: without the limit this allocation succeeds,
    as Linux overcommits untouched pages below the machine's size."""
    toml = relkit.HEADER.format(name="greedy", validation="", quick=1)
    toml += relkit.op_block("greedy", 'module = "kern:greedy"\nreference = "kern:reference"')
    root = relkit.write_ws(tmp_path / "ws", toml, {"kern.py": GREEDY_PY})
    proc = relkit.run_cli(
        root, "test", "--quick", "--no-progress", "--format", "json", env=relkit.child_env(no_zygote=no_zygote)
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    failure = json.loads(proc.stdout)["ops"][0]["failures"][0]
    assert failure["kind"] == "op_error" and "MemoryError" in failure["message"], failure
    assert failure["line"] == relkit.line_of(root / "kern.py", "block = np.empty"), failure


@pytest.mark.asyncio
async def test_a_50_mb_edit_of_gpuemu_toml_keeps_the_server_answering(tmp_path: Path) -> None:
    """A huge unsaved buffer (a paste gone wrong) is refused by size at once, not parsed for a minute while
    hovers wait (issue 14, item 14): the hover answers within 3 s and the buffer gets one clear error."""
    import asyncio
    import time

    from lsprotocol import types as lsp

    root = relkit.good_ws(tmp_path / "ws")
    toml = root / "gpuemu.toml"
    kern = root / "kern.py"
    client = await relkit.start_server(root)
    try:
        relkit.open_doc(client, toml)
        relkit.open_doc(client, kern)
        await relkit.request(client, "gpuemu/discoverOps", {}, timeout=60)
        line = toml.read_text()
        huge = line + "\n".join(f"# padding line {i:09d} " + "x" * 80 for i in range(50 * 2**20 // 100)) + "\n"
        assert len(huge) > 50 * 2**20
        relkit.change_doc(client, toml, huge, 2)
        started = time.monotonic()
        await asyncio.wait_for(
            client.text_document_hover_async(
                lsp.HoverParams(lsp.TextDocumentIdentifier(kern.resolve().as_uri()), lsp.Position(3, 5))
            ),
            30,
        )
        assert time.monotonic() - started < 3.0
        got = await relkit.wait_for(
            lambda: [d for d in relkit.diags(client, toml) if "MB, more than the 16 MB" in d.message],
            30,
            "the size diagnostic",
            client,
        )
        assert got[0].range.start.line == 0
    finally:
        await relkit.force_close(client)


def test_an_oversized_gpuemu_toml_is_a_configuration_error(tmp_path: Path) -> None:
    root = relkit.good_ws(tmp_path / "ws")
    toml = root / "gpuemu.toml"
    with toml.open("a") as fh:
        fh.write(("# " + "y" * 98 + "\n") * (17 * 2**20 // 100))
    proc = relkit.run_cli(root, "ops")
    assert proc.returncode == 2 and "more than the 16 MB" in proc.stderr and f"{toml}:1" in proc.stderr, proc.stderr
