"""Map mangled kernel symbols (`_Z5scaleIfEvPT_S0_i`) to the names people write.

`cu++filt` is not shipped by the CUDA wheels (nvidia-cuda-cuxxfilt only carries a
static library), so demangling uses libstdc++'s `__cxa_demangle` through ctypes,
which every Linux host compiler brings along. Without it, a small Itanium-ABI
reader still recovers the qualified function name, which is all matching needs.
"""

from __future__ import annotations

import ctypes
import functools
import re
from dataclasses import dataclass

_LIBSTDCXX_CANDIDATES = ("libstdc++.so.6", "libc++abi.so.1", "libc++.1.dylib", "libstdc++.6.dylib")


@functools.lru_cache(maxsize=1)
def _cxa_demangle() -> tuple[object, object] | None:
    """(__cxa_demangle, free) from a loaded C++ runtime, or None (no subprocess: no find_library)."""
    for name in _LIBSTDCXX_CANDIDATES:
        try:
            lib = ctypes.CDLL(name)
            fn = lib.__cxa_demangle
            libc = ctypes.CDLL(None)
            free = libc.free
        except (OSError, AttributeError):
            continue
        fn.restype = ctypes.c_void_p
        fn.argtypes = [
            ctypes.c_char_p,
            ctypes.c_char_p,
            ctypes.POINTER(ctypes.c_size_t),
            ctypes.POINTER(ctypes.c_int),
        ]
        free.argtypes = [ctypes.c_void_p]
        free.restype = None
        return fn, free
    return None


@functools.lru_cache(maxsize=4096)
def demangle(symbol: str) -> str:
    """Full demangled signature, e.g. 'void scale<float>(float*, float, int)'; unmangled names as is."""
    if not symbol.startswith("_Z"):
        return symbol
    api = _cxa_demangle()
    if api is not None:
        fn, free = api
        status = ctypes.c_int(0)
        ptr = fn(symbol.encode(), None, None, ctypes.byref(status))  # type: ignore[operator]
        if ptr and status.value == 0:
            try:
                return ctypes.string_at(ptr).decode("utf-8", "replace")
            finally:
                free(ptr)  # type: ignore[operator]
    qualified = _fallback_qualified_name(symbol)
    return f"{qualified}(...)" if qualified else symbol


def _fallback_qualified_name(symbol: str) -> str | None:
    """Qualified name of an Itanium-mangled function, template arguments and parameters dropped."""
    s = symbol[2:]
    i = 0
    if s.startswith("L"):
        i = 1
    parts: list[str] = []
    nested = s[i : i + 1] == "N"
    if nested:
        i += 1
        while i < len(s) and s[i] in "rVKRO":
            i += 1
    while i < len(s):
        if s.startswith("St", i):
            parts.append("std")
            i += 2
            continue
        m = re.match(r"\d+", s[i:])
        if not m:
            break
        n = int(m.group(0))
        i += len(m.group(0))
        ident = s[i : i + n]
        i += n
        parts.append("(anonymous namespace)" if ident.startswith("_GLOBAL__N") else ident)
        if s[i : i + 1] == "I":  # template args: skip to the matching E
            depth = 0
            while i < len(s):
                if s[i] in "INXL":
                    depth += 1
                elif s[i] == "E":
                    depth -= 1
                    if depth == 0:
                        i += 1
                        break
                i += 1
        if not nested or s[i : i + 1] == "E":
            break
    return "::".join(parts) or None


def matching_bracket(text: str, at: int, step: int = 1) -> int | None:
    """Index of the bracket that closes (``step=1``) or opens (``step=-1``) the one at ``at``, or None.

    Brackets of the same kind as ``text[at]`` nest; other characters are skipped.
    """
    pairs = {"(": ")", "{": "}", "<": ">", "[": "]"}
    mine = text[at]
    other = pairs.get(mine) or next(k for k, v in pairs.items() if v == mine)
    depth = 0
    idx = at
    while 0 <= idx < len(text):
        if text[idx] == mine:
            depth += 1
        elif text[idx] == other:
            depth -= 1
            if depth == 0:
                return idx
        idx += step
    return None


def _strip_params(signature: str) -> str:
    """'void ns::f<int>(int*, float)' -> 'void ns::f<int>' (parameter list removed, balanced)."""
    if not signature.endswith(")"):
        return signature
    start = matching_bracket(signature, len(signature) - 1, step=-1)
    return signature if start is None else signature[:start]


def _last_top_level_token(text: str) -> str:
    """Drop a leading return type: the name is the last space-separated token outside <...>/(...)."""
    depth = 0
    start = 0
    for idx, c in enumerate(text):
        if c in "<(":
            depth += 1
        elif c in ">)":
            depth -= 1
        elif c == " " and depth == 0:
            start = idx + 1
    return text[start:]


def _strip_template_args(name: str) -> str:
    """'ns::f<int, 4>' -> 'ns::f'; also inside qualifiers ('A<int>::f' -> 'A::f')."""
    out: list[str] = []
    depth = 0
    for c in name:
        if c == "<":
            depth += 1
        elif c == ">":
            depth -= 1
        elif depth == 0:
            out.append(c)
    return "".join(out)


@dataclass(frozen=True)
class SymbolNames:
    """The names one compiled kernel answers to."""

    symbol: str  # as in the PTX/cubin: '_Z5scaleIfEvPT_S0_i' or 'vector_add'
    signature: str  # 'void scale<float>(float*, float, int)'
    name: str  # 'scale<float>' (template arguments kept, namespaces kept)
    qualified: str  # 'scale' or 'ns::scale'
    base: str  # 'scale': what a __global__ declaration in the source is called

    def matches(self, query: str) -> bool:
        """True if `query` names this kernel by symbol, signature, or (qualified) source name."""
        q = query.strip()
        return q in {self.symbol, self.signature, self.name, self.qualified, self.base} or (
            "(" in q and q.replace(" ", "") == self.signature.replace(" ", "")
        )


@functools.lru_cache(maxsize=4096)
def symbol_names(symbol: str) -> SymbolNames:
    """All the names of a kernel symbol (cheap; memoised)."""
    signature = demangle(symbol)
    if signature == symbol and not symbol.startswith("_Z"):
        return SymbolNames(symbol, symbol, symbol, symbol, symbol)
    name = _last_top_level_token(_strip_params(signature))
    qualified = _strip_template_args(name)
    base = qualified.rsplit("::", 1)[-1]
    return SymbolNames(symbol, signature, name, qualified, base)
