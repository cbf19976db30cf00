"""End-to-end lint with the real nvcc/ptxas/cuobjdump on the kernels in tests/data/cuda.

Figures are those CUDA 13.0 (and 13.5, checked too) report for sm_90; they are
pinned exactly because the test kernels are small and the toolchain is fixed.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from gpuemu_ls.engine.cuda import (
    ArtifactChecks,
    KernelLintResult,
    KernelSpec,
    diff_results,
    format_text,
    lint_file,
    lint_kernel,
    parse_pattern,
    regressions,
)
from gpuemu_ls.engine.cuda.compile import compile_cuda
from gpuemu_ls.engine.cuda.result import KernelLintResult as ResultType

DATA = Path(__file__).resolve().parent.parent / "data" / "cuda"
pytestmark = pytest.mark.cuda

# (file, function, flags) -> registers, spill stores, spill loads, stack frame, shared, barriers
FIGURES = {
    ("vector_add.cu", "vector_add", ()): (12, 0, 0, 0, 0, 0),
    ("register_heavy.cu", "register_heavy", ()): (64, 0, 0, 0, 0, 0),
    ("register_heavy.cu", "register_heavy", ("-maxrregcount=32",)): (32, 784, 784, 528, 0, 0),
    ("local_array.cu", "local_array", ()): (32, 0, 0, 128, 0, 0),
    ("tiled_matmul.cu", "tiled_matmul", ()): (32, 0, 0, 0, 2048, 1),
    ("forbidden.cu", "uses_printf", ()): (24, 0, 0, 8, 0, 0),
}


def figures(r: KernelLintResult) -> tuple[int, ...]:
    res = r.resources or {}
    keys = ("registers", "spill_stores", "spill_loads", "stack_frame_bytes", "shared_memory_bytes", "barriers")
    return tuple(res[k] for k in keys)


def only(findings, code: str):
    hits = [f for f in findings if f.code == code]
    assert len(hits) == 1, [f.to_dict() for f in findings]
    return hits[0]


@pytest.mark.parametrize(("key", "expected"), list(FIGURES.items()), ids=lambda v: str(v))
def test_resource_figures(lint, key, expected) -> None:
    file, function, flags = key
    r = lint(file, function, flags=flags)
    assert r.status == "passed", format_text([r])
    assert figures(r) == expected
    assert r.tool_version and r.tool_versions["nvcc"] == r.tool_version


@pytest.mark.sass
def test_local_array_uses_local_memory_in_sass(lint) -> None:
    r = lint("local_array.cu")
    assert r.resources["local_total_bytes"] == 128
    sass = r.sass_histogram
    assert any(m.split(".")[0] == "LDL" for m in sass) and any(m.split(".")[0] == "STL" for m in sass)


@pytest.mark.sass
def test_spilling_kernel_has_spill_instructions(lint) -> None:
    r = lint("register_heavy.cu", flags=("-maxrregcount=32",))
    assert r.resources["spill_bytes"] == 1568
    assert sum(n for m, n in r.sass_histogram.items() if m.startswith(("LDL", "STL"))) > 100


@pytest.mark.sass
def test_histograms_are_per_kernel_and_skip_padding(lint) -> None:
    r = lint("vector_add.cu")
    # __restrict__ const loads become LDG.E.CONSTANT, which the pattern LDG.E also covers.
    assert r.sass_histogram["LDG.E.CONSTANT"] == 2 and r.sass_histogram["STG.E"] == 1
    assert r.sass_histogram["EXIT"] == 2 and "NOP" not in r.sass_histogram and "BRA" not in r.sass_histogram
    assert sum(parse_pattern("LDG.E").count_in_histogram(r.sass_histogram).values()) == 2
    assert r.ptx_instructions["ld.global.nc.f32"] == 2
    assert r.ptx_instructions["st.global.f32"] == 1


def test_multiple_kernels_get_separate_figures(tools, lint_cache) -> None:
    results = lint_file(DATA / "forbidden.cu", lint_cache, tools=tools)
    got = [(r.name, r.line, r.resources["registers"], r.resources["stack_frame_bytes"]) for r in results]
    assert got == [
        ("uses_printf", 4, 24, 8),
        ("volatile_load", 8, 10, 0),
        ("system_atomic", 13, 8, 0),
        ("clean_twin", 17, 10, 0),
    ]
    assert all(r.status == "passed" for r in results)
    assert len({json.dumps(r.ptx_instructions, sort_keys=True) for r in results}) >= 3


# ------------------------------------------------------------------ policies: violating and respecting twins

POLICIES = [
    # (code, checks, violating (file, function, flags), respecting twin)
    ("max-registers", {"max_registers": 48}, ("register_heavy.cu", None, ()), ("vector_add.cu", None, ())),
    (
        "max-spills",
        {"max_spills": 0},
        ("register_heavy.cu", None, ("-maxrregcount=32",)),
        ("register_heavy.cu", None, ()),
    ),
    ("max-local-memory", {"max_local_memory_bytes": 64}, ("local_array.cu", None, ()), ("vector_add.cu", None, ())),
    (
        "max-shared-memory",
        {"max_shared_memory_bytes": 1024},
        ("tiled_matmul.cu", None, ()),
        ("vector_add.cu", None, ()),
    ),
    (
        "forbidden-instruction",
        {"forbidden_instructions": ("re:vprintf",)},
        ("forbidden.cu", "uses_printf", ()),
        ("forbidden.cu", "clean_twin", ()),
    ),
    (
        "forbidden-instruction",
        {"forbidden_instructions": ("ld.volatile",)},
        ("forbidden.cu", "volatile_load", ()),
        ("forbidden.cu", "clean_twin", ()),
    ),
    (
        "forbidden-instruction",
        {"forbidden_instructions": ("atom.global.sys",)},
        ("forbidden.cu", "system_atomic", ()),
        ("forbidden.cu", "clean_twin", ()),
    ),
    (
        "required-instruction",
        {"required_instructions": ("bar.sync",)},
        ("vector_add.cu", None, ()),
        ("tiled_matmul.cu", None, ()),
    ),
]

DECL_LINES = {
    "register_heavy": 4,
    "local_array": 2,
    "tiled_matmul": 4,
    "vector_add": 2,
    "uses_printf": 4,
    "volatile_load": 8,
    "system_atomic": 13,
}


@pytest.mark.parametrize(
    ("code", "checks", "bad", "good"), POLICIES, ids=[f"{p[0]}-{i}" for i, p in enumerate(POLICIES)]
)
def test_policy_twins(lint, code, checks, bad, good) -> None:
    file, function, flags = bad
    r = lint(file, function, flags=flags, **checks)
    assert r.status == "failed", format_text([r])
    f = only(r.findings, code)
    assert f.severity == "error"
    assert Path(f.file) == DATA / file
    assert f.line == DECL_LINES[function or Path(file).stem]
    assert r.line == f.line

    file, function, flags = good
    twin = lint(file, function, flags=flags, **checks)
    assert twin.status == "passed", format_text([twin])
    assert not twin.findings


@pytest.mark.sass
@pytest.mark.parametrize(
    ("function", "pattern"),
    [("uses_printf", "CALL.ABS"), ("volatile_load", r"re:\.STRONG\.SYS\b"), ("system_atomic", r"sass:re:\.SYS\b")],
)
def test_forbidden_sass_patterns(lint, function, pattern) -> None:
    bad = lint("forbidden.cu", function, forbidden_instructions=(pattern,))
    assert bad.status == "failed"
    f = only(bad.findings, "forbidden-instruction")
    assert "SASS" in f.message and f.line == DECL_LINES[function]
    assert lint("forbidden.cu", "clean_twin", forbidden_instructions=(pattern,)).status == "passed"


@pytest.mark.sass
def test_required_sass_barrier(lint) -> None:
    assert lint("tiled_matmul.cu", required_instructions=("BAR.SYNC",)).status == "passed"
    r = lint("vector_add.cu", required_instructions=("BAR.SYNC",))
    assert r.status == "failed" and only(r.findings, "required-instruction").line == 2


def test_message_carries_value_and_limit(lint) -> None:
    r = lint("register_heavy.cu", max_registers=48)
    f = only(r.findings, "max-registers")
    assert (f.value, f.limit) == (64, 48)
    assert "64" in f.message and "48" in f.message


def test_warn_threshold(lint) -> None:
    # 2048 bytes of shared memory: within 2304, but above 80% of it.
    r = lint("tiled_matmul.cu", max_shared_memory_bytes=2304, warn_threshold=0.8)
    assert r.status == "passed"
    f = only(r.findings, "max-shared-memory")
    assert f.severity == "warning" and f.line == 4
    assert not lint("tiled_matmul.cu", max_shared_memory_bytes=4096, warn_threshold=0.8).findings


def test_invalid_pattern_is_an_error_not_a_pass(lint) -> None:
    r = lint("vector_add.cu", forbidden_instructions=("re:(oops",))
    assert r.status == "error"
    assert only(r.findings, "invalid-pattern").line == 2


# ------------------------------------------------------------------ declarations, names, selection


def test_template_kernel_pins_to_multiline_declaration(lint) -> None:
    r = lint("templates.cu", "ops::scale_n<float, 4>", max_registers=8)
    assert r.status == "failed"
    assert r.symbol == "_ZN3ops7scale_nIfLi4EEEvPT_S1_"
    f = only(r.findings, "max-registers")
    assert (f.line, f.column, f.end_line) == (5, 1, 7)  # __global__ on 5, the name on 7
    c = lint("templates.cu", "bounded_copy", max_registers=8)
    assert only(c.findings, "max-registers").line == 17


def test_ambiguous_and_missing_kernels_are_errors(lint) -> None:
    r = lint("templates.cu", "scale_n")
    assert r.status == "error" and "ambiguous" in r.message
    assert "scale_n<double, 2>" in r.message and "scale_n<float, 4>" in r.message
    missing = lint("vector_add.cu", "vector_sub")
    assert missing.status == "error"
    assert "vector_sub" in missing.message and "kernels found: vector_add" in missing.message
    assert only(missing.findings, "kernel-not-found").file == str(DATA / "vector_add.cu")


# ------------------------------------------------------------------ compiler errors


def test_syntax_error_is_pinned_to_file_line_column(lint) -> None:
    r = lint("syntax_error.cu", "broken")
    assert r.status == "error" and r.message == "compilation failed"
    err = only(r.findings, "nvcc-error")
    assert (Path(err.file), err.line, err.column) == (DATA / "syntax_error.cu", 5, 17)
    assert '"y"' in err.message
    warn = only(r.findings, "nvcc-warning")
    assert (warn.line, warn.severity) == (4, "warning")


def test_error_in_included_header(tools, lint_cache) -> None:
    (r,) = lint_file(DATA / "bad_header.cu", lint_cache, tools=tools)
    assert r.status == "error" and r.name == "uses_header" and r.line == 4
    err = only(r.findings, "nvcc-error")
    assert (Path(err.file), err.line) == (DATA / "bad_header.cuh", 4)


def test_ptxas_error_names_the_kernel(tmp_path, tools) -> None:
    src = tmp_path / "too_big.cu"
    src.write_text(
        "__global__ void small(float* x) { x[0] = 1.0f; }\n"
        "\n"
        "__global__ void too_big(float* x) {\n"
        "  __shared__ float s[60000];\n"
        "  s[threadIdx.x] = x[0];\n"
        "  x[1] = s[threadIdx.x + 3];\n"
        "}\n"
    )
    r = lint_kernel(KernelSpec("too_big", src), None, tools)
    assert r.status == "error"
    f = only(r.findings, "ptxas-error")
    assert "too much shared data" in f.message and f.line == 3
    other = lint_kernel(KernelSpec("small", src), None, tools)
    assert other.status == "error" and "too much shared data" in other.message
    assert not other.findings  # the error belongs to too_big, not to small


# ------------------------------------------------------------------ cache


def test_cache_hit_runs_no_tool_and_header_edit_invalidates(tmp_path, tools, monkeypatch) -> None:
    shutil.copy(DATA / "with_header.cu", tmp_path)
    shutil.copy(DATA / "with_header.cuh", tmp_path)
    cache = tmp_path / "cache"
    spec = KernelSpec("header_tile", tmp_path / "with_header.cu", checks=ArtifactChecks(max_shared_memory_bytes=2048))

    cold = lint_kernel(spec, cache, tools)
    assert not cold.cache_hit and cold.status == "passed"
    assert cold.resources["shared_memory_bytes"] == 1024

    class NoSubprocess:
        def __init__(self, *a, **k) -> None:
            raise AssertionError(f"a subprocess was started on a cache hit: {a}")

    with monkeypatch.context() as m:
        m.setattr(subprocess, "Popen", NoSubprocess)
        m.setenv("PATH", str(tmp_path / "nothing-here"))
        warm = lint_kernel(spec, cache, tools)
    assert warm.cache_hit and warm.status == "passed"
    assert warm.to_dict() | {"duration_ms": 0, "cache_hit": 0} == cold.to_dict() | {"duration_ms": 0, "cache_hit": 0}
    print(f"\ncold lint {cold.duration_ms:.0f} ms, cached re-lint {warm.duration_ms:.1f} ms")
    assert warm.duration_ms < 100

    # The header, not the .cu, changes: the cache must notice.
    (tmp_path / "with_header.cuh").write_text("#define TILE 32\n")
    edited = lint_kernel(spec, cache, tools)
    assert not edited.cache_hit
    assert edited.resources["shared_memory_bytes"] == 4096
    assert edited.status == "failed" and only(edited.findings, "max-shared-memory").line == 4
    assert lint_kernel(spec, cache, tools).cache_hit

    # Editing the .cu itself (here: moving the kernel down a line) is noticed too.
    src = tmp_path / "with_header.cu"
    src.write_text(src.read_text().replace("__global__", "\n__global__", 1))
    moved = lint_kernel(spec, cache, tools)
    assert not moved.cache_hit and only(moved.findings, "max-shared-memory").line == 5


def test_different_flags_or_defines_do_not_share_an_entry(lint) -> None:
    assert lint("register_heavy.cu").resources["registers"] == 64
    assert lint("register_heavy.cu", flags=("-maxrregcount=32",)).resources["registers"] == 32


def test_corrupt_cache_entries_are_ignored(tmp_path, tools) -> None:
    cache = tmp_path / "cache"
    spec = KernelSpec("vector_add", DATA / "vector_add.cu")
    assert not lint_kernel(spec, cache, tools).cache_hit
    entries = list(cache.glob("*.json"))
    assert entries
    for p in entries:
        p.write_text("{not json")
    again = lint_kernel(spec, cache, tools)
    assert again.status == "passed" and not again.cache_hit
    for p in cache.glob("*.json"):
        p.write_text(json.dumps({"schema": 1, "key": p.stem.split(".")[0], "unit": {"kernels": 3}}))
    assert lint_kernel(spec, cache, tools).status == "passed"
    assert lint_kernel(spec, cache, tools).cache_hit


@pytest.mark.sass
def test_regex_patterns_work_from_the_cache(lint) -> None:
    first = lint("forbidden.cu", "system_atomic", forbidden_instructions=(r"sass:re:\.SYS\b",))
    again = lint("forbidden.cu", "system_atomic", forbidden_instructions=(r"sass:re:\.SYS\b",))
    assert again.cache_hit and first.status == again.status == "failed"


@pytest.mark.sass
def test_lost_instruction_texts_cost_a_recompile_not_a_check(tmp_path, tools) -> None:
    checks = ArtifactChecks(forbidden_instructions=(r"sass:re:\.SYS\b",))
    spec = KernelSpec("system_atomic", DATA / "forbidden.cu", checks=checks)
    assert lint_kernel(spec, tmp_path, tools).status == "failed"
    for p in tmp_path.glob("*.texts.json"):
        p.unlink()
    r = lint_kernel(spec, tmp_path, tools)
    assert r.cache_hit and r.status == "failed"
    assert only(r.findings, "forbidden-instruction").line == 13


# ------------------------------------------------------------------ .ptx sources


@pytest.fixture(scope="module")
def vector_add_ptx(tools, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("ptx") / "vector_add.ptx"
    subprocess.run([str(tools.nvcc), "-arch=sm_90", "-ptx", str(DATA / "vector_add.cu"), "-o", str(out)], check=True)
    return out


def test_ptx_file_is_assembled(vector_add_ptx, tools) -> None:
    (r,) = lint_file(vector_add_ptx, None, ArtifactChecks(max_registers=16), tools=tools)
    assert r.status == "passed" and r.name == "vector_add"
    assert r.resources["registers"] == 12
    assert r.ptx_instructions["ld.global.nc.f32"] == 2
    text = vector_add_ptx.read_text().splitlines()
    assert ".entry vector_add" in text[r.line - 1]
    bad = lint_kernel(KernelSpec("vector_add", vector_add_ptx, checks=ArtifactChecks(max_registers=8)), None, tools)
    assert bad.status == "failed" and only(bad.findings, "max-registers").line == r.line


def test_ptx_without_tools_gives_ptx_metrics_only(vector_add_ptx, tmp_path) -> None:
    from gpuemu_ls.engine.cuda import find_toolchain

    none = find_toolchain(search_path=str(tmp_path), site_dirs=(), use_env_cuda_home=False)
    (r,) = lint_file(vector_add_ptx, None, ArtifactChecks(forbidden_instructions=("ld.volatile",)), tools=none)
    assert r.status == "passed" and r.resources is None and r.ptx_instructions["st.global.f32"] == 1
    (r,) = lint_file(vector_add_ptx, None, ArtifactChecks(max_registers=16), tools=none)
    assert r.status == "error" and only(r.findings, "artifact-unavailable")


# ------------------------------------------------------------------ no tools, reports, baselines


def test_json_and_text_reports(lint) -> None:
    r = lint("register_heavy.cu", max_registers=48)
    d = json.loads(json.dumps(r.to_dict()))
    assert d["status"] == "failed" and d["resources"]["registers"] == 64
    assert d["findings"][0]["code"] == "max-registers"
    assert ResultType.from_dict(d).to_dict() == d
    text = format_text([r, lint("vector_add.cu")])
    lines = text.splitlines()
    assert lines[0].startswith("FAIL") and "regs 64" in lines[0]
    assert lines[1].startswith("PASS")
    assert any(line.endswith("register_heavy.cu:4: error max-registers: " + r.findings[0].message) for line in lines)


def test_baseline_diff_on_real_results(lint) -> None:
    base = lint("register_heavy.cu").to_dict()
    capped = lint("register_heavy.cu", flags=("-maxrregcount=32",)).to_dict()
    bad = {c.metric for c in regressions(diff_results(base, capped))}
    assert {"spill_bytes", "local_memory_bytes"} <= bad
    assert "registers" not in bad  # fewer registers is not a regression
    assert not regressions(diff_results(base, base))


SHELLY = "ws $(touch PWNED) `touch PWNED`; echo"


def test_shell_characters_in_paths_run_nothing_and_errors_name_the_real_files(tmp_path, tools) -> None:
    """nvcc's driver runs through /bin/sh: a folder and a source named like commands compile through a
    shell-safe copy, their quoted includes resolve, and messages and deps name the user's real files."""
    root = tmp_path / SHELLY
    root.mkdir()
    (root / "two $(touch PWNED).cuh").write_text("#define TWO 2.0f\n")
    src = root / "k $(touch PWNED);.cu"
    src.write_text('#include "two $(touch PWNED).cuh"\n__global__ void scale(float* x) { x[threadIdx.x] *= TWO; }\n')
    bad = root / "bad $(touch PWNED).cu"
    bad.write_text("__global__ void broken(float* x) {\n    x[0] = y;\n}\n")
    (ok,) = lint_file(src, None, tools=tools)
    assert ok.status == "passed", [f.message for f in ok.findings]
    (err,) = lint_file(bad, None, tools=tools)
    e = only(err.findings, "nvcc-error")
    assert (Path(e.file), e.line) == (bad, 2) and '"y"' in e.message
    assert list(tmp_path.rglob("PWNED*")) == [] and not list(Path.cwd().glob("PWNED*"))


def test_defines_with_shell_characters_are_refused(tmp_path, tools) -> None:
    src = tmp_path / "k.cu"
    src.write_text("__global__ void scale(float* x) { x[threadIdx.x] *= 2.0f; }\n")
    out = compile_cuda(tools, src, tmp_path / "work", defines=["SCALE=$(touch PWNED)"])
    assert not out.ok and out.command == [] and "shell characters" in out.messages[0].message
    assert list(tmp_path.rglob("PWNED*")) == []


def _without_sass(tools):
    import dataclasses

    return dataclasses.replace(tools, cuobjdump=None, nvdisasm=None)


def test_a_definite_violation_fails_though_sass_cannot_be_read(tools, tmp_path) -> None:
    """Issue 29 item 5: set-up "1." has nvcc and ptxas but no cuobjdump. A kernel over its local-memory limit,
    or with a forbidden PTX instruction, is FAIL (not ERROR because an unrelated SASS pattern could not be
    read); the SASS patterns are one "not checked" finding naming the extra; a kernel whose only problem is
    an unreadable check is ERROR, never PASS."""
    no_sass = _without_sass(tools)
    checks = ArtifactChecks(max_local_memory_bytes=0, forbidden_instructions=("LDL", "STL", "re:vprintf"))
    bad = lint_kernel(KernelSpec("local_array", DATA / "local_array.cu", checks=checks), tmp_path / "c1", no_sass)
    assert bad.status == "failed", format_text([bad])
    unchecked = only(bad.findings, "artifact-unavailable")
    assert unchecked.message.startswith("not checked: forbidden SASS pattern `LDL`, forbidden SASS pattern `STL`")
    assert "install gpuemu-ls[cuda]" in unchecked.message
    assert only(bad.findings, "max-local-memory")
    printf = lint_kernel(KernelSpec("uses_printf", DATA / "forbidden.cu", checks=checks), tmp_path / "c2", no_sass)
    assert printf.status == "failed" and only(printf.findings, "forbidden-instruction")
    clean = ArtifactChecks(forbidden_instructions=("LDL",))
    ok = lint_kernel(KernelSpec("vector_add", DATA / "vector_add.cu", checks=clean), tmp_path / "c3", no_sass)
    assert ok.status == "error" and only(ok.findings, "artifact-unavailable"), format_text([ok])
