"""Bad-input catalogue, ops and references: each misbehaviour is one case, reported clearly, never fatal.

One workspace (in a folder whose name has spaces and non-ASCII letters) holds an op for each way an op
or a reference can misbehave: raise, exit non-zero (sys.exit, os._exit, a script's exit status), abort,
segfault, hang, recurse forever, print junk before its JSON, print garbage or nothing, return the
wrong shape or dtype, return NaN everywhere, return 2 GB (under ``memory_limit_mb``), write into its
inputs (or into the gaps of a strided view). It runs once through the CI gate (``gpuemu-ls --check``,
text and JSON), then case by case through one real language server (``gpuemu/runOps``).

Each case asserts: the verdict and failure kind; a message that says what happened; the file and line
(the CLI's failure line, and the server's diagnostic on the offending line, with the op's entry in
gpuemu.toml); a server that still answers; a store that passes ``PRAGMA integrity_check`` with every
earlier row intact and exactly the new rows of the run.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
import relkit
from kit.store import db_path

OPS_PY = """import os
import sys

import numpy as np


def ref(x):
    return np.asarray(x, dtype=np.float64) * 2.0


def good(x):
    return x * 2


def raises(x):
    raise ValueError("boom from the op")


def exits(x):
    sys.exit(3)


def os_exits(x):
    os._exit(4)


def aborts(x):
    os.abort()


def segfaults(x):
    import ctypes

    ctypes.string_at(0)


def hangs(x):
    while True:
        pass


def recurses(x):
    return recurses(x + 1)


def wrong_shape(x):
    return (x * 2)[..., :-1]


def wrong_dtype(x):
    return (x * 2).astype(np.float64)


def all_nan(x):
    return np.full_like(x, np.nan)


def huge(x):
    return np.ones(2**28)


def mutates(x):
    x *= 2
    return x


def mutates_gaps(x):
    buf = x.base
    buf[..., 1::2] = 0.0
    return x * 2


def ref_raises(x):
    raise RuntimeError("boom from the reference")


def ref_exits(x):
    sys.exit(5)


def ref_aborts(x):
    os.abort()


def ref_segfaults(x):
    import ctypes

    ctypes.string_at(0)


def ref_hangs(x):
    import time

    while True:
        time.sleep(0.05)


def ref_recurses(x):
    return ref_recurses(x)


def ref_huge(x):
    return np.ones(2**28)
"""

SCRIPTS = {
    "scripts/junk_op.py": 'import json\nimport sys\n\nreq = json.load(sys.stdin)\nprint("loading weights... done")\n'
    'print(json.dumps({"outputs": {"result": req["inputs"]["x"]}}))\n',
    "scripts/exit_op.py": "import sys\n\nsys.stdin.read()\nsys.exit(2)\n",
    "scripts/abort_op.py": "import os\nimport sys\n\nsys.stdin.read()\nos.abort()\n",
    "scripts/raise_op.py": 'import sys\n\nsys.stdin.read()\nraise KeyError("no such weight")\n',
    "scripts/junk_ref.py": 'import json\nimport sys\n\nreq = json.load(sys.stdin)\nprint("debug:", 42)\n'
    'print(json.dumps({"outputs": {"result": req["inputs"]["x"]}}))\n',
    "scripts/garbage_ref.py": 'import json\nimport sys\n\nsys.stdin.read()\nprint(json.dumps({"outputs": {"result": '
    '{"shape": [1], "dtype": "float64", "data": "!!not base64"}}}))\n',
    "scripts/silent_ref.py": "import sys\n\nsys.stdin.read()\n",
    "scripts/exit_ref.py": "import sys\n\nsys.stdin.read()\nsys.exit(1)\n",
}

HANG_TIMEOUT = 2.5


@dataclass(frozen=True)
class Case:
    name: str
    body: str  # module/reference/op_script lines of the [[ops]] entry
    status: str  # error | failed
    kinds: tuple[str, ...]
    says: str  # regex the message must match
    file: str  # the offending file, relative to the workspace
    marker: str | None = None  # text of the exact offending line (None: anywhere in ``func``/the script)
    func: str | None = None
    layouts: str = '["contiguous"]'
    cli_bug: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def _m(fn: str, ref: str = "ref") -> str:
    return f'module = "ops:{fn}"\nreference = "ops:{ref}"'


CASES = [
    Case(
        "op_raises",
        _m("raises"),
        "error",
        ("op_error",),
        r"ValueError: boom from the op",
        "ops.py",
        'raise ValueError("boom from the op")',
        "raises",
    ),
    Case("op_sys_exit", _m("exits"), "error", ("op_exit",), r"SystemExit: 3", "ops.py", "sys.exit(3)", "exits"),
    Case(
        "op_os_exit",
        _m("os_exits"),
        "error",
        ("op_crash",),
        r"exited with status 4",
        "ops.py",
        None,
        "os_exits",
    ),
    Case("op_abort", _m("aborts"), "error", ("op_crash",), r"SIGABRT", "ops.py", "os.abort()", "aborts"),
    Case(
        "op_segfault", _m("segfaults"), "error", ("op_crash",), r"SIGSEGV", "ops.py", "ctypes.string_at(0)", "segfaults"
    ),
    Case(
        "op_hang",
        _m("hangs") + f"\ntimeout = {HANG_TIMEOUT}",
        "error",
        ("op_timeout",),
        r"timed out",
        "ops.py",
        None,
        "hangs",
    ),
    Case(
        "op_recursion",
        _m("recurses"),
        "error",
        ("op_error",),
        r"RecursionError",
        "ops.py",
        "return recurses(x + 1)",
        "recurses",
    ),
    Case(
        "op_wrong_shape",
        _m("wrong_shape"),
        "failed",
        ("shape_mismatch",),
        r"shape \[\d+, \d+\]",
        "ops.py",
        None,
        "wrong_shape",
    ),
    Case(
        "op_wrong_dtype",
        _m("wrong_dtype"),
        "failed",
        ("dtype_mismatch",),
        r"float64, expected float32",
        "ops.py",
        None,
        "wrong_dtype",
    ),
    Case(
        "op_all_nan",
        _m("all_nan"),
        "failed",
        ("unexpected_nan",),
        r"NaN",
        "ops.py",
        None,
        "all_nan",
    ),
    Case(
        "op_returns_2gb", _m("huge"), "error", ("op_error",), r"MemoryError", "ops.py", "return np.ones(2**28)", "huge"
    ),
    Case(
        "op_mutates_input",
        _m("mutates"),
        "failed",
        ("input_mutation",),
        r"wrote into its input",
        "ops.py",
        None,
        "mutates",
    ),
    Case(
        "op_mutates_strided_gaps",
        _m("mutates_gaps"),
        "failed",
        ("input_mutation",),
        r"wrote into its input",
        "ops.py",
        None,
        "mutates_gaps",
        layouts='["strided"]',
    ),
    Case(
        "op_script_junk",
        'op_script = "scripts/junk_op.py"\nreference = "ops:ref"',
        "error",
        ("op_bad_output",),
        r"printed text before its JSON",
        "scripts/junk_op.py",
    ),
    Case(
        "op_script_exit",
        'op_script = "scripts/exit_op.py"\nreference = "ops:ref"',
        "error",
        ("op_exit",),
        r"exited with status 2",
        "scripts/exit_op.py",
    ),
    Case(
        "op_script_abort",
        'op_script = "scripts/abort_op.py"\nreference = "ops:ref"',
        "error",
        ("op_crash",),
        r"SIGABRT",
        "scripts/abort_op.py",
        "os.abort()",
    ),
    Case(
        "op_script_raises",
        'op_script = "scripts/raise_op.py"\nreference = "ops:ref"',
        "error",
        ("op_error",),
        r"KeyError",
        "scripts/raise_op.py",
        'raise KeyError("no such weight")',
    ),
    Case(
        "ref_raises",
        _m("good", "ref_raises"),
        "error",
        ("reference_error",),
        r"RuntimeError: boom from the reference",
        "ops.py",
        'raise RuntimeError("boom from the reference")',
        "ref_raises",
    ),
    Case(
        "ref_sys_exit",
        _m("good", "ref_exits"),
        "error",
        ("reference_exit",),
        r"SystemExit: 5",
        "ops.py",
        "sys.exit(5)",
        "ref_exits",
    ),
    Case(
        "ref_abort",
        _m("good", "ref_aborts"),
        "error",
        ("reference_crash",),
        r"SIGABRT",
        "ops.py",
        "os.abort()",
        "ref_aborts",
    ),
    Case(
        "ref_segfault",
        _m("good", "ref_segfaults"),
        "error",
        ("reference_crash",),
        r"SIGSEGV",
        "ops.py",
        "ctypes.string_at(0)",
        "ref_segfaults",
    ),
    Case(
        "ref_hang",
        _m("good", "ref_hangs") + f"\ntimeout = {HANG_TIMEOUT}",
        "error",
        ("reference_timeout",),
        r"timed out",
        "ops.py",
        None,
        "ref_hangs",
    ),
    Case(
        "ref_recursion",
        _m("good", "ref_recurses"),
        "error",
        ("reference_error",),
        r"RecursionError",
        "ops.py",
        "return ref_recurses(x)",
        "ref_recurses",
    ),
    Case(
        "ref_returns_2gb",
        _m("good", "ref_huge"),
        "error",
        ("reference_error",),
        r"MemoryError",
        "ops.py",
        "return np.ones(2**28)",
        "ref_huge",
    ),
    Case(
        "ref_script_junk",
        'module = "ops:good"\nreference = "scripts/junk_ref.py"',
        "error",
        ("reference_bad_output",),
        r"printed text before its JSON",
        "scripts/junk_ref.py",
    ),
    Case(
        "ref_script_garbage",
        'module = "ops:good"\nreference = "scripts/garbage_ref.py"',
        "error",
        ("reference_bad_output",),
        r"base64",
        "scripts/garbage_ref.py",
    ),
    Case(
        "ref_script_silent",
        'module = "ops:good"\nreference = "scripts/silent_ref.py"',
        "error",
        ("reference_bad_output",),
        r"printed nothing",
        "scripts/silent_ref.py",
    ),
    Case(
        "ref_script_exit",
        'module = "ops:good"\nreference = "scripts/exit_ref.py"',
        "error",
        ("reference_exit",),
        r"exited with status 1",
        "scripts/exit_ref.py",
    ),
]
BY_NAME = {c.name: c for c in CASES}


def _catalogue_toml() -> str:
    toml = relkit.HEADER.format(name="catalogue", validation="memory_limit_mb = 1024\n", quick=1)
    toml += relkit.op_block("control_good", _m("good"))
    for c in CASES:
        toml += relkit.op_block(c.name, c.body, layouts=c.layouts)
    return toml


def expected_lines(root: Path, case: Case) -> set[int]:
    """Lines of ``case.file`` an error report may name: the exact line, else the function's, else any."""
    path = root / case.file
    lines = path.read_text(encoding="utf-8").splitlines()
    if case.marker is not None:
        start = relkit.line_of(path, f"def {case.func}(") if case.func else 1
        for i in range(start, len(lines) + 1):
            if case.marker in lines[i - 1]:
                return {i}
        raise AssertionError(case.marker)
    if case.func is not None:
        start = relkit.line_of(path, f"def {case.func}(")
        end = next((i for i in range(start + 1, len(lines) + 1) if lines[i - 1].startswith("def ")), len(lines) + 1)
        return set(range(start, end))
    return set(range(1, len(lines) + 1))


@dataclass
class GateRun:
    root: Path
    rc: int
    stdout: str
    stderr: str
    doc: dict[str, Any]

    def block(self, op: str) -> str:
        """The text the gate printed for one op (its header line up to the next op's)."""
        lines = self.stdout.splitlines()
        start = next(i for i, line in enumerate(lines) if re.match(rf"^\S+\s+{re.escape(op)}\s", line))
        end = next((i for i in range(start + 1, len(lines)) if re.match(r"^\S", lines[i])), len(lines))
        return "\n".join(lines[start:end])

    def entry(self, op: str) -> dict[str, Any]:
        return next(e for e in self.doc["ops"] if e["name"] == op)


@pytest.fixture(scope="module")
def catalogue(module_tmp: Path) -> GateRun:
    """The catalogue workspace, run once through ``gpuemu-ls --check --quick`` (text on stdout, JSON to a file)."""
    root = relkit.write_ws(module_tmp / "op catalogue", _catalogue_toml(), {"ops.py": OPS_PY, **SCRIPTS})
    out = root.parent / "gate report.json"
    tag = relkit.new_tag()
    proc = relkit.run_check(
        root,
        "--quick",
        "--no-progress",
        "--format",
        "json",
        "--output",
        str(out),
        env=relkit.child_env({relkit.TAG_VAR: tag}),
        timeout=300,
    )
    left = relkit.wait_gone(relkit.tagged(tag), 15)
    assert not left, f"processes of the gate outlived it: {[relkit.cmdline(p) for p in left]}"
    doc = json.loads(out.read_text(encoding="utf-8")) if out.exists() else {"ops": []}
    return GateRun(root, proc.returncode, proc.stdout, proc.stderr, doc)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def server(catalogue: GateRun, module_tmp: Path) -> Any:
    tag = relkit.new_tag()
    client = await relkit.start_server(
        catalogue.root, env=relkit.child_env({relkit.TAG_VAR: tag}), log_file=module_tmp / "server.log"
    )
    relkit.record("server", started=1)
    yield client
    code = await relkit.stop_server(client)
    left = relkit.wait_gone(relkit.tagged(tag), 15)
    relkit.record("server", unexpected_exits=int(code != 0))
    relkit.kill_all(left)
    assert code == 0, f"the server did not exit cleanly after the catalogue: {code}"
    assert not left, f"processes outlived the server: {[relkit.cmdline(p) for p in left]}"


def test_gate_survives_the_catalogue(catalogue: GateRun) -> None:
    """The gate runs every case, exits 1 (not 2, not a crash), passes the control op, stores everything."""
    assert catalogue.rc == 1, catalogue.stderr[-3000:]
    assert relkit.no_traceback(catalogue.stdout + catalogue.stderr), catalogue.stderr[-3000:]
    assert catalogue.entry("control_good")["status"] == "passed"
    assert {e["name"] for e in catalogue.doc["ops"]} == {"control_good", *BY_NAME}
    db = db_path(catalogue.root)
    assert relkit.integrity(db) == "ok"
    stored = dict(relkit.store_rows(db, "SELECT op, count(*) FROM cases GROUP BY op"))
    assert all(stored.get(name, 0) >= 1 for name in ["control_good", *BY_NAME]), stored


@pytest.mark.parametrize("name", [c.name for c in CASES])
def test_gate_verdict_and_message(catalogue: GateRun, name: str) -> None:
    """The JSON verdict: not passed, the expected kind, a message that says what happened."""
    case = BY_NAME[name]
    relkit.record("ops", cases=1)
    entry = catalogue.entry(name)
    assert entry["status"] == case.status, entry
    assert entry["failures"], entry
    kinds = {f["kind"] for f in entry["failures"]}
    assert kinds <= set(case.kinds), (kinds, entry["failures"][0]["message"])
    text = catalogue.block(name)
    assert re.search(case.says, text + entry["failures"][0]["message"]), text
    assert relkit.no_traceback(text)


@pytest.mark.parametrize("name", relkit.case_params(CASES, lambda c: c.cli_bug))
def test_gate_failure_line_names_file_and_line(catalogue: GateRun, name: str) -> None:
    """The failure line of the gate's text output names the offending file and line."""
    case = BY_NAME[name]
    text = catalogue.block(name)
    failure_lines = [line for line in text.splitlines() if line.strip().startswith(("FAIL ", "ERROR "))]
    assert failure_lines, text
    wanted = expected_lines(catalogue.root, case)
    named = {int(m) for line in failure_lines for m in re.findall(rf"\({re.escape(case.file)}:(\d+)\)", line)}
    assert named, f"no {case.file}:LINE in the failure line:\n{text}"
    assert named <= wanted, (named, wanted)


@pytest.mark.asyncio(loop_scope="module")
@pytest.mark.parametrize("name", [c.name for c in CASES])
async def test_server_reports_case(server: Any, catalogue: GateRun, name: str) -> None:
    """Through the language server: the verdict, one diagnostic on the offending line with the op's entry in
    gpuemu.toml as related information, a server that still answers, and a store with every earlier row intact
    plus this run's."""
    case = BY_NAME[name]
    root = catalogue.root
    db = db_path(root)
    before, n_before = relkit.fingerprint(db), relkit.counts(db)
    got = await relkit.request(server, "gpuemu/runOps", {"ids": [f"op:{name}"], "mode": "quick", "iterations": 1})
    results = got["results"]
    assert [r["status"] for r in results] == [case.status], got
    target = root / case.file
    wanted = expected_lines(root, case)

    def on_target() -> list[Any]:
        return [d for d in relkit.diags(server, target) if isinstance(d.data, dict) and d.data.get("op") == name]

    found = await relkit.wait_for(on_target, 60, f"a diagnostic of {name} on {case.file}", server)
    lines = {d.range.start.line + 1 for d in found}
    assert lines & wanted, (lines, wanted, [d.message for d in found])
    assert any(d.code in case.kinds for d in found), [d.code for d in found]
    assert any(re.search(case.says, d.message) for d in found), [d.message for d in found]
    toml = root / "gpuemu.toml"
    header = relkit.line_of(toml, f'name = "{name}"')
    # one diagnostic per failure (issue 13): the op's gpuemu.toml entry is its related information, not a second one
    related = [
        r.location for d in found for r in d.related_information or [] if r.location.uri == toml.resolve().as_uri()
    ]
    assert any(loc.range.start.line + 1 in (header - 1, header) for loc in related), related
    entry_diags = [d for d in relkit.diags(server, toml) if isinstance(d.data, dict) and d.data.get("op") == name]
    assert entry_diags == [], entry_diags
    assert await relkit.answers(server, root)
    assert relkit.integrity(db) == "ok"
    assert relkit.intact_since(db, before) == []
    n_after = relkit.counts(db)
    assert n_after["cases"] == n_before["cases"] + 1, (n_before, n_after)
    assert n_after["op_results"] == n_before["op_results"] + 1
    relkit.record("rows", written=1, lost=n_before["cases"] + 1 - n_after["cases"])
