"""Document symbols of gpuemu.toml: each ``[[ops]]`` and ``[[kernels]]`` entry by its name, from header to
its last line (its sub-tables included), read from the buffer's lines so that the outline stays while the
file is being edited into something ``tomllib`` refuses."""

from __future__ import annotations

import re

from lsprotocol import types as lsp

from .toml_context import HEADER, split_key

_NAME = re.compile(r"""^\s*name\s*=\s*(["'])(.*?)\1""")
_FIELD = re.compile(r"""^\s*(module|op_script|source)\s*=\s*(["'])(.*?)\2""")
KINDS = {"ops": lsp.SymbolKind.Function, "kernels": lsp.SymbolKind.Module}


def toml_symbols(text: str) -> list[lsp.DocumentSymbol]:
    """One symbol per op and kernel entry, in file order."""
    lines = text.split("\n")
    headers = []
    for i, line in enumerate(lines):
        m = HEADER.match(line)
        if m and len(m.group(1)) == len(m.group(3)):
            headers.append((i, split_key(m.group(2)), m.group(1) == "[["))
    out = []
    for n, (start, keys, array) in enumerate(headers):
        if not array or len(keys) != 1 or keys[0] not in KINDS:
            continue
        table = keys[0]
        end = len(lines) - 1
        for nxt, nkeys, narray in headers[n + 1 :]:
            if narray or nkeys[0] != table:  # the next entry, or another table: this entry ends before it
                end = nxt - 1
                break
        while end > start and (not lines[end].strip() or lines[end].lstrip().startswith("#")):
            end -= 1
        name, name_range, detail = None, None, ""
        for i in range(start + 1, end + 1):
            if HEADER.match(lines[i]):
                break
            m = _NAME.match(lines[i])
            if m and name is None:
                name = m.group(2)
                name_range = lsp.Range(lsp.Position(i, m.start(2)), lsp.Position(i, m.end(2)))
            f = _FIELD.match(lines[i])
            if f and not detail:
                detail = f.group(3)
        whole = lsp.Range(lsp.Position(start, 0), lsp.Position(end, len(lines[end])))
        head = lsp.Range(lsp.Position(start, 0), lsp.Position(start, len(lines[start].rstrip())))
        out.append(
            lsp.DocumentSymbol(
                name=name or f"(unnamed {table[:-1]})",
                kind=KINDS[table],
                range=whole,
                selection_range=name_range or head,
                detail=f"{table[:-1]}" + (f" · {detail}" if detail else ""),
            )
        )
    return out


def flat_symbols(symbols: list[lsp.DocumentSymbol], uri: str) -> list[lsp.SymbolInformation]:
    """The same for a client without hierarchical symbols."""
    return [  # by keyword: SymbolInformation's positional order is (location, name, kind)
        lsp.SymbolInformation(name=s.name, kind=s.kind, location=lsp.Location(uri, s.range), container_name=s.detail)
        for s in symbols
    ]
