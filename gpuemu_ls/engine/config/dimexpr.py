"""Shape entries that are expressions of dims: ``"2*D2"`` (RoPE's head_dim), ``"H*D"``, ``"N+1"``, ``"K//2"``.

A shape entry is an integer, a dim name, or an expression of dim names and non-negative integers with
``+``, ``-``, ``*``, ``//`` and parentheses, read with :mod:`ast` and nothing else evaluated. The dims are
drawn as usual; an expression's size follows from them, so a kernel that needs ``head_dim = 2 * D2`` (an
even size) gets exactly that in every case.
"""

from __future__ import annotations

import ast
import itertools
import operator
from collections.abc import Callable, Mapping

_OPS: dict[type[ast.operator], Callable[[int, int], int]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv,
}
#: Dims an expression may name at most, so checking its sign at every corner of their ranges stays cheap.
MAX_NAMES = 6


class DimExprError(ValueError):
    """An entry that is no dim expression gpuemu reads (the message says what is wrong)."""


def is_name(entry: str) -> bool:
    return entry.isidentifier()


def _tree(entry: str) -> ast.expr:
    try:
        tree = ast.parse(entry.strip(), mode="eval").body
    except SyntaxError:
        raise DimExprError(f'{entry!r} is not a dim name or an expression such as "2*D" or "H*D"') from None
    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp) and type(node.op) not in _OPS:
            raise DimExprError(f"{entry!r}: only +, -, * and // combine dims")
        if isinstance(node, ast.Constant) and (type(node.value) is not int or node.value < 0):
            raise DimExprError(f"{entry!r}: constants are integers >= 0")
        if not isinstance(node, (ast.BinOp, ast.Name, ast.Constant, ast.Load, *_OPS)):
            raise DimExprError(f"{entry!r}: {type(node).__name__.lower()} is not allowed (dims, integers, + - * //)")
    return tree


def names(entry: str | int) -> set[str]:
    """The dim names a shape entry uses (none for an integer)."""
    if not isinstance(entry, str):
        return set()
    if is_name(entry):
        return {entry}
    return {n.id for n in ast.walk(_tree(entry)) if isinstance(n, ast.Name)}


def evaluate(entry: str | int, dims: Mapping[str, int]) -> int:
    """A shape entry's size for the drawn ``dims``; DimExprError when it comes out negative."""
    if not isinstance(entry, str):
        return int(entry)
    if is_name(entry):
        return int(dims[entry])
    value = _eval(_tree(entry), dims)
    if value < 0:
        raise DimExprError(f"shape entry {entry!r} is {value} for {dict(dims)}: a size must be >= 0")
    return value


def _eval(node: ast.expr, dims: Mapping[str, int]) -> int:
    if isinstance(node, ast.Constant):
        return int(node.value)
    if isinstance(node, ast.Name):
        return int(dims[node.id])
    assert isinstance(node, ast.BinOp)
    left, right = _eval(node.left, dims), _eval(node.right, dims)
    if isinstance(node.op, ast.FloorDiv) and right == 0:
        raise DimExprError(f"division by zero in a shape entry for {dict(dims)}")
    return _OPS[type(node.op)](left, right)


def problem(entry: str, bounds: Mapping[str, tuple[int, int]]) -> str | None:
    """Why an expression entry cannot be used with dims in ``bounds`` (name -> (min, max)), or None: unknown
    names are the caller's to report; here the syntax, the number of names and the sign at every corner."""
    try:
        used = names(entry)
    except DimExprError as exc:
        return str(exc)
    if len(used) > MAX_NAMES:
        return f"{entry!r} names {len(used)} dims; at most {MAX_NAMES}"
    known = sorted(n for n in used if n in bounds)
    for corner in itertools.product(*(bounds[n] for n in known)):
        try:
            evaluate(entry, dict(zip(known, corner)))
        except DimExprError as exc:
            return str(exc)
        except KeyError:
            return None
    return None


__all__ = ["DimExprError", "evaluate", "is_name", "names", "problem"]
