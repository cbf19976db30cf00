"""Readers of tool output, source scanning, names, spec merging and baseline diffs (no CUDA tool)."""

from __future__ import annotations

from pathlib import Path

from gpuemu_ls.engine.cuda import ArtifactChecks, diff_results, regressions
from gpuemu_ls.engine.cuda.compile import parse_depfile
from gpuemu_ls.engine.cuda.messages import parse_compiler_output
from gpuemu_ls.engine.cuda.names import symbol_names
from gpuemu_ls.engine.cuda.resources import parse_ptxas_verbose, parse_res_usage
from gpuemu_ls.engine.cuda.source import find_kernel_declarations, locate_kernel

# As printed by ptxas 13.0 for sm_90 (no cmem), followed by an older sm_80 style line.
PTXAS_V = """\
ptxas info    : 7 bytes gmem, 256 bytes cmem[3]
ptxas info    : Compiling entry function '_Z2prPi' for 'sm_90'
ptxas info    : Function properties for _Z2prPi
    8 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 24 registers, used 0 barriers, 8 bytes cumulative stack size
ptxas info    : Compile time = 2.347 ms
ptxas info    : Compiling entry function 'heavy' for 'sm_90'
ptxas info    : Overriding maximum register limit 256 for 'heavy' with  32 of maxrregcount option
ptxas info    : Function properties for heavy
    528 bytes stack frame, 784 bytes spill stores, 784 bytes spill loads
ptxas info    : Used 32 registers, used 1 barriers, 2048 bytes smem, 528 bytes cumulative stack size
ptxas info    : Compiling entry function 'old' for 'sm_80'
ptxas info    : Function properties for old
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 10 registers, 360 bytes cmem[0], 4 bytes cmem[2], 16 bytes lmem, 64 bytes smem
ptxas info    : Function properties for _Z6helperPfi
    72 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
"""


def test_ptxas_verbose_is_per_kernel() -> None:
    rep = parse_ptxas_verbose(PTXAS_V)
    assert rep.entries == ["_Z2prPi", "heavy", "old"]
    pr, heavy, old = (rep.functions[k] for k in rep.entries)
    assert (pr.registers, pr.stack_frame_bytes, pr.cumulative_stack_bytes, pr.barriers) == (24, 8, 8, 0)
    assert (heavy.registers, heavy.spill_stores, heavy.spill_loads, heavy.spill_bytes) == (32, 784, 784, 1568)
    assert (heavy.shared_memory_bytes, heavy.barriers, heavy.local_total_bytes) == (2048, 1, 528)
    assert old.constant_memory_bytes == {0: 360, 2: 4}
    assert (old.local_memory_bytes, old.shared_memory_bytes, old.local_total_bytes) == (16, 64, 16)
    # A callee's frame is kept apart from the entries.
    assert rep.functions["_Z6helperPfi"].stack_frame_bytes == 72
    assert "_Z6helperPfi" not in rep.entries
    assert rep.module.global_memory_bytes == 7 and rep.module.constant_memory_bytes == {3: 256}


def test_res_usage() -> None:
    text = """
Resource usage:
 Common:
  GLOBAL:0 CONSTANT[3]:256
 Function _Z3dynPf:
  REG:10 STACK:0 SHARED:1024 LOCAL:0 CONSTANT[0]:536 TEXTURE:0 SURFACE:0 SAMPLER:0
"""
    usage = parse_res_usage(text)
    assert usage == {
        "_Z3dynPf": {
            "REG": 10,
            "STACK": 0,
            "SHARED": 1024,
            "LOCAL": 0,
            "CONSTANT[0]": 536,
            "TEXTURE": 0,
            "SURFACE": 0,
            "SAMPLER": 0,
        }
    }


def test_compiler_messages(tmp_path: Path) -> None:
    src = tmp_path / "bad.cu"
    src.write_text("__global__ void k(float* x) {\n  int unused;\n  x[0] = y + 1.0f\n}\n")
    log = f"""\
bad.cu(3): error: identifier "y" is undefined
    x[0] = y + 1.0f
           ^

bad.cu(2): warning #177-D: variable "unused" was declared but never referenced
    int unused;
        ^

Remark: The warnings can be suppressed with "-diag-suppress <warning-number>"

hdr.h(1): error: expected a ";"
  inline __attribute__((device)) float g() {{ return 1.0f }}
                                                         ^

1 error detected in the compilation of "bad.cu".
{src}:1:10: fatal error: nothere.h: No such file or directory
ptxas error   : Entry function '_Z3bigPf' uses too much shared data (0x3a980 bytes, 0xc000 max)
ptxas /tmp/x.ptx, line 12; error   : Unknown symbol 'foo'
nvcc fatal   : Unsupported gpu architecture 'sm_999'
"""
    msgs = parse_compiler_output(log, tmp_path)
    got = [(m.severity, m.tool, Path(m.file).name if m.file else None, m.line, m.column) for m in msgs]
    assert got == [
        ("error", "nvcc", "bad.cu", 3, 10),
        ("warning", "nvcc", "bad.cu", 2, 7),
        ("error", "nvcc", "hdr.h", 1, None),  # echo differs from the file (macro expansion): no column
        ("error", "nvcc", "bad.cu", 1, 10),
        ("error", "ptxas", None, None, None),
        ("error", "ptxas", "x.ptx", 12, None),
        ("error", "nvcc", None, None, None),
    ]
    assert msgs[0].file == str(src.resolve())
    assert msgs[1].code == "177-D"
    assert msgs[4].function == "_Z3bigPf"


def test_kernel_declarations_are_found_robustly() -> None:
    src = """// __global__ void in_comment(
#define MAKE_KERNEL __global__ void in_macro()
namespace ops {
template <typename T, int N>
__global__ void
__launch_bounds__(256, 2)
scale_n(T* __restrict__ x, T s) {
  if (threadIdx.x < N) { x[threadIdx.x] *= s; }
}
template __global__ void scale_n<float, 4>(float*, float);
}
extern "C" __global__ void __maxnreg__(64) k(float* x);
extern "C" __global__ void k(float* x) { const char* s = "__global__ void z("; }
"""
    decls = find_kernel_declarations(src)
    assert [(d.name, d.line, d.is_definition) for d in decls] == [
        ("scale_n", 5, True),
        ("scale_n", 10, False),
        ("k", 12, False),
        ("k", 13, True),
    ]
    scale = locate_kernel(decls, "ops::scale_n")
    assert scale is not None and (scale.line, scale.name_line, scale.body_end_line) == (5, 7, 9)
    k = locate_kernel(decls, "k")
    assert k is not None and k.line == 13 and k.column == 12  # the definition wins
    assert locate_kernel(decls, "in_macro") is None


def test_symbol_names() -> None:
    n = symbol_names("_ZN3ops7scale_nIfLi4EEEvPT_S1_")
    assert n.signature == "void ops::scale_n<float, 4>(float*, float)"
    assert (n.name, n.qualified, n.base) == ("ops::scale_n<float, 4>", "ops::scale_n", "scale_n")
    for query in ("scale_n", "ops::scale_n", "ops::scale_n<float, 4>", n.symbol, n.signature):
        assert n.matches(query)
    assert not n.matches("scale")
    c = symbol_names("vector_add")
    assert c.base == "vector_add" and c.matches("vector_add")


def test_depfile(tmp_path: Path) -> None:
    text = "out.cubin : k.cu \\\n    /usr/include/stdc-predef.h \\\n    inc/my\\ header.h \\\n    k.cu\n"
    deps = parse_depfile(text, tmp_path)
    assert deps == [tmp_path / "k.cu", Path("/usr/include/stdc-predef.h"), tmp_path / "inc" / "my header.h"]


def test_checks_merge_over_defaults() -> None:
    defaults = ArtifactChecks(max_registers=128, max_spills=0, forbidden_instructions=("LDL", "re:vprintf"))
    own = ArtifactChecks(max_registers=64, forbidden_instructions=("ld.volatile", "LDL"))
    merged = own.merged_over(defaults)
    assert merged.max_registers == 64 and merged.max_spills == 0
    assert merged.max_local_memory_bytes is None
    assert merged.forbidden_instructions == ("LDL", "re:vprintf", "ld.volatile")


def test_diff_reports_growth_as_regressions() -> None:
    old = {
        "resources": {"registers": 32, "spill_stores": 0, "spill_loads": 0, "stack_frame_bytes": 0},
        "ptx_instructions": {"ld.global.f32": 10, "add.f32": 10},
        "sass_histogram": {"LDG.E": 10, "FADD": 90},
    }
    new = {
        "resources": {"registers": 40, "spill_stores": 8, "spill_loads": 8, "stack_frame_bytes": 16},
        "ptx_instructions": {"ld.global.f32": 11, "add.f32": 10},  # +5%: below threshold
        "sass_histogram": {"LDG.E": 10, "FADD": 90, "LDL": 20},  # +20%
    }
    changes = diff_results(old, new)
    bad = {c.metric for c in regressions(changes)}
    assert bad == {"registers", "spill_bytes", "local_memory_bytes", "sass_instructions"}
    assert {c.metric for c in changes if not c.regression} >= {"ptx_instructions", "sass_instructions:LDL"}
    assert not regressions(diff_results(new, old))  # shrinking is never a regression
    assert {c.metric for c in regressions(diff_results(old, new, threshold=0.01))} >= {"ptx_instructions"}
