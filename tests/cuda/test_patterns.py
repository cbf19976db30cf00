"""Instruction pattern matching and the SASS/PTX readers it relies on (no CUDA tool needed)."""

from __future__ import annotations

import pytest

from gpuemu_ls.engine.cuda.instructions import Instruction
from gpuemu_ls.engine.cuda.patterns import PatternError, parse_pattern
from gpuemu_ls.engine.cuda.ptx import parse_ptx
from gpuemu_ls.engine.cuda.sass import parse_sass


def ins(text: str) -> Instruction:
    return Instruction(text.split(" ", 1)[0], text)


@pytest.mark.parametrize(
    ("pattern", "mnemonic", "expected"),
    [
        ("LDG.E", "LDG.E", True),
        ("LDG.E", "LDG.E.CONSTANT", True),
        ("LDG.E", "LDG.EX", False),
        ("LDG.E", "LDG", False),
        ("LDL", "LDL.LU", True),
        ("LDL", "LDL", True),
        ("LDL", "LDLX", False),
        ("STL", "STL.128", True),
        ("BAR.SYNC", "BAR.SYNC.DEFER_BLOCKING", True),
        ("ld.volatile", "ld.volatile.global.u32", True),
        ("ld.volatile", "ld.global.u32", False),
        ("atom.global.sys", "atom.global.sys.add.u32", True),
        ("atom.global.sys", "atom.global.add.u32", False),
    ],
)
def test_prefix_matches_whole_dot_components(pattern: str, mnemonic: str, expected: bool) -> None:
    assert parse_pattern(pattern).matches(ins(mnemonic + " R0, R1")) is expected


def test_case_selects_the_artifact() -> None:
    assert parse_pattern("LDG.E").artifact == "sass"
    assert parse_pattern("ld.global").artifact == "ptx"
    assert parse_pattern("sass:ldg.e").artifact == "sass"
    assert parse_pattern("ptx:LD.GLOBAL").artifact == "ptx"
    # Regex escapes such as \S or \d do not make a pattern SASS.
    assert parse_pattern(r"re:vprintf\S*").artifact == "ptx"
    assert parse_pattern(r"re:\.SYS\b").artifact == "sass"
    with pytest.raises(PatternError, match="prefix it"):
        parse_pattern(r"re:\d+")


def test_prefix_pattern_is_case_insensitive_within_its_artifact() -> None:
    assert parse_pattern("sass:ldg.e").matches(ins("LDG.E.CONSTANT R2, desc[UR4][R2.64]"))


def test_regex_matches_whole_instruction_text() -> None:
    p = parse_pattern(r"sass:re:\.SYS\b")
    assert p.needs_text
    assert p.matches(ins("REDG.E.ADD.STRONG.SYS desc[UR4][R2.64], R5"))
    assert not p.matches(ins("REDG.E.ADD.STRONG.GPU desc[UR4][R2.64], R5"))
    operands = parse_pattern(r"re:vprintf")
    assert operands.matches(ins("call.uni (retval0), vprintf, ( param0, param1 )"))
    anchored = parse_pattern(r"re:^LDG\.E R\d+, desc")
    assert anchored.matches(ins("LDG.E R2, desc[UR4][R2.64]"))
    assert not anchored.matches(ins("LDG.E.64 R2, desc[UR4][R2.64]"))


@pytest.mark.parametrize("bad", ["", "re:", "re:(unclosed", "LDG E", "sass:"])
def test_bad_patterns_raise(bad: str) -> None:
    with pytest.raises(PatternError):
        parse_pattern(bad)


SASS_LISTING = """
\tcode for sm_90
\t\tFunction : _Z4demoPf
\t.headerflags\t@"EF_CUDA_SM90 EF_CUDA_VIRTUAL_SM(EF_CUDA_SM90)"
        /*0000*/                   LDC R1, c[0x0][0x28] ;              /* 0x00000a00ff017b82 */
                                                                       /* 0x000fe40000000f00 */
        /*0010*/              @!PT LDS RZ, [RZ] ;                      /* 0x00000000fffff984 */
        /*0020*/               @P0 LDG.E.CONSTANT R2, desc[UR4][R2.64] ; /* 0x0000000402020981 */
        /*0030*/                   NOP ;                               /* 0x0000000000007918 */
        /*0040*/                   LDL.LU R3, [R1] ;                   /* 0x0000000001037983 */
        /*0050*/                   EXIT ;                              /* 0x000000000000794d */
        /*0060*/                   BRA 0x60;                           /* 0xfffffffc00fc7947 */
        /*0070*/                   NOP;                                /* 0x0000000000007918 */
        /*0080*/                   NOP;                                /* 0x0000000000007918 */
\t\t..........
"""


def test_sass_reader_drops_never_executed_code() -> None:
    fn = parse_sass(SASS_LISTING)["_Z4demoPf"]
    # @!PT (never) and the BRA-self + NOP tail after EXIT are gone; the mid-function NOP stays.
    assert fn.counts == {"EXIT": 1, "LDC": 1, "LDG.E.CONSTANT": 1, "LDL.LU": 1, "NOP": 1}
    assert fn.dropped == 4
    ldg = next(i for i in fn.instructions if i.mnemonic.startswith("LDG"))
    assert ldg.guard == "@P0" and ldg.text == "LDG.E.CONSTANT R2, desc[UR4][R2.64]"
    assert not parse_pattern("LDS").find(fn.instructions)
    assert len(parse_pattern("LDL").find(fn.instructions)) == 1


def test_sass_reader_understands_nvdisasm_labels() -> None:
    listing = """
\t.section\t.text._Z1kPf,"ax",@progbits
_Z1kPf:
        /*0000*/                   EXIT ;
.L_x_1:
        /*0010*/                   BRA `(.L_x_1);
        /*0020*/                   NOP;
"""
    assert parse_sass(listing)["_Z1kPf"].counts == {"EXIT": 1}


def test_sass_keeps_a_real_infinite_loop() -> None:
    listing = """
\t\tFunction : spin
        /*0000*/                   MOV R0, 0x1 ;
        /*0010*/                   BRA 0x10;
        /*0020*/                   NOP;
"""
    assert parse_sass(listing)["spin"].counts == {"BRA": 1, "MOV": 1}


PTX_TEXT = """
.version 9.0
.target sm_90
.address_size 64
.extern .func (.param .b32 func_retval0) vprintf ( .param .b64 vprintf_param_0, .param .b64 vprintf_param_1 );
.global .align 1 .b8 $str[4] = {104, 105, 10, 0};
.visible .entry _Z1kPi(
\t.param .u64 _Z1kPi_param_0
)
.maxntid 128, 1, 1
{
\t.reg .pred \t%p<2>;
\t.reg .b32 \t%r<3>;
\t// a comment; with a semicolon
\t.loc\t1 4 3
\tld.param.u64 \t%rd1, [_Z1kPi_param_0];
\tsetp.eq.s32 \t%p1, %r1, 0;
\t@%p1 bra \t$L__BB0_2;
$L__BB0_2:
\t{ // callseq 0, 0
\t.param .b64 param0;
\tst.param.b64 \t[param0+0], %rd3;
\tcall.uni (retval0),
\tvprintf,
\t(
\tparam0
\t);
\t} // callseq 0
\tld.volatile.global.u32 \t%r2, [%rd1];
\tret;
}
"""


def test_ptx_reader_counts_statements_per_entry() -> None:
    (entry,) = parse_ptx(PTX_TEXT)
    assert entry.name == "_Z1kPi" and entry.line == 7
    assert entry.counts == {
        "bra": 1,
        "call.uni": 1,
        "ld.param.u64": 1,
        "ld.volatile.global.u32": 1,
        "ret": 1,
        "setp.eq.s32": 1,
        "st.param.b64": 1,
    }
    bra = next(i for i in entry.instructions if i.mnemonic == "bra")
    assert bra.guard == "@%p1"
    call = next(i for i in entry.instructions if i.mnemonic == "call.uni")
    assert parse_pattern("re:vprintf").matches(call)
    assert parse_pattern("ld.volatile").find(entry.instructions)
