"""Find `__global__` declarations in CUDA source, to pin findings where the kernel is written.

A token scan, not a regex over lines, because real declarations look like::

    template <typename T, int N>
    __global__ void
    __launch_bounds__(256, 2)
    ns::my_kernel(const T* __restrict__ x, ...) { ... }

    extern "C" __global__ void __maxnreg__(64) k(float* x);

Comments, string literals and preprocessor lines are blanked first (keeping offsets),
so a `__global__` inside a comment or a `#define` does not count. The finding's
position is the `__global__` keyword; the name position is kept too for editors.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_BLANK_RE = re.compile(
    r"""//[^\n]*|/\*.*?\*/|"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*'|^[ \t]*\#(?:[^\n]*\\\n)*[^\n]*""",
    re.S | re.M,
)
_TOKEN_RE = re.compile(r"[A-Za-z_]\w*|::|\[\[|\]\]|\S")
_GLOBAL_RE = re.compile(r"\b__global__\b")
# Attribute-like macros and keywords whose parenthesised argument is not the parameter list.
_CALL_ATTRIBUTES = frozenset(
    {
        "__launch_bounds__",
        "__cluster_dims__",
        "__maxnreg__",
        "__attribute__",
        "__declspec",
        "__align__",
        "alignas",
        "__nv_register_params__",
        "decltype",
    }
)


@dataclass(frozen=True)
class KernelDeclaration:
    """Where a `__global__` function is declared (1-based lines and columns)."""

    name: str  # unqualified function name
    qualified: str  # as written, e.g. 'ns::k'
    line: int  # of the __global__ keyword
    column: int
    name_line: int
    name_column: int
    name_end_column: int  # exclusive
    is_definition: bool
    body_end_line: int | None = None  # line of the closing '}' of a definition


def blank_non_code(text: str) -> str:
    """Replace comments, literals and preprocessor lines with spaces; newlines survive."""
    return _BLANK_RE.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)


class _Locator:
    def __init__(self, text: str) -> None:
        self.starts = [0]
        for idx, c in enumerate(text):
            if c == "\n":
                self.starts.append(idx + 1)

    def pos(self, offset: int) -> tuple[int, int]:
        lo, hi = 0, len(self.starts) - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.starts[mid] <= offset:
                lo = mid
            else:
                hi = mid - 1
        return lo + 1, offset - self.starts[lo] + 1


def _skip_balanced(tokens: list[re.Match[str]], i: int, open_: str, close: str) -> int:
    """Index just past the token closing the group opened at tokens[i]."""
    depth = 0
    while i < len(tokens):
        t = tokens[i].group(0)
        if t == open_:
            depth += 1
        elif t == close:
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return i


def find_kernel_declarations(text: str) -> list[KernelDeclaration]:
    """Every `__global__` function declared or defined in `text`, in source order."""
    clean = blank_non_code(text)
    loc = _Locator(clean)
    out: list[KernelDeclaration] = []
    for g in _GLOBAL_RE.finditer(clean):
        tokens = list(_TOKEN_RE.finditer(clean, g.end(), min(len(clean), g.end() + 4000)))
        i = 0
        name_tok: re.Match[str] | None = None
        qualified: list[str] = []
        while i < len(tokens):
            t = tokens[i].group(0)
            nxt = tokens[i + 1].group(0) if i + 1 < len(tokens) else ""
            if t in _CALL_ATTRIBUTES and nxt == "(":
                i = _skip_balanced(tokens, i + 1, "(", ")")
                continue
            if t == "[[":
                i = _skip_balanced(tokens, i, "[[", "]]")
                continue
            if t == "<":
                i = _skip_balanced(tokens, i, "<", ">")
                continue
            if t == "::":
                qualified.append("::")
                i += 1
                continue
            if re.fullmatch(r"[A-Za-z_]\w*", t):
                if qualified and qualified[-1] != "::":
                    qualified = []
                qualified.append(t)
                name_tok = tokens[i]
                i += 1
                continue
            if t == "(":
                break
            if t in ("*", "&"):
                qualified = []
                i += 1
                continue
            name_tok = None  # ';', '{', '=' ... before any parameter list: not a function
            break
        if name_tok is None or i >= len(tokens):
            continue
        j = _skip_balanced(tokens, i, "(", ")")
        is_def = False
        body_end: int | None = None
        while j < len(tokens):
            t = tokens[j].group(0)
            if t == "{":
                is_def = True
                depth = 0
                for k in range(tokens[j].start(), len(clean)):
                    if clean[k] == "{":
                        depth += 1
                    elif clean[k] == "}":
                        depth -= 1
                        if depth == 0:
                            body_end = loc.pos(k)[0]
                            break
                break
            if t == ";":
                break
            j += 1
        line, col = loc.pos(g.start())
        nline, ncol = loc.pos(name_tok.start())
        out.append(
            KernelDeclaration(
                name=name_tok.group(0),
                qualified="".join(qualified),
                line=line,
                column=col,
                name_line=nline,
                name_column=ncol,
                name_end_column=ncol + len(name_tok.group(0)),
                is_definition=is_def,
                body_end_line=body_end,
            )
        )
    return out


def locate_kernel(declarations: list[KernelDeclaration], name: str) -> KernelDeclaration | None:
    """The declaration of kernel `name` (unqualified or qualified), preferring a definition."""
    short = name.rsplit("::", 1)[-1]
    hits = [d for d in declarations if d.qualified == name or d.name == short]
    for d in hits:
        if d.is_definition:
            return d
    return hits[0] if hits else None
