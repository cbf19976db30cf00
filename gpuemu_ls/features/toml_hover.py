"""Hover docs on every key of gpuemu.toml (and on the names a key takes), from the server, so that every
editor has them; the ``[[ops]]`` and ``[[kernels]]`` entries themselves show their results instead
(:mod:`gpuemu_ls.diagnostics.hover`). Text from the buffer is escaped like every hover
(:func:`gpuemu_ls.diagnostics.hover.md`)."""

from __future__ import annotations

from lsprotocol import types as lsp

from ..diagnostics.hover import code, md, own_links_only
from ..engine.config.keydocs import ENUM_VALUES, FREE_DOCS, FREE_TABLES, KEYS, VALUE_DOCS, key_doc, schema_path
from .toml_context import analyze, split_key, word_at


def toml_key_hover(text: str, line: int, character: int) -> lsp.Hover | None:
    """The doc of the key (or table, or enum value) under the cursor; None elsewhere."""
    lines = text.split("\n")
    if line >= len(lines):
        return None
    found = word_at(lines[line], character)
    if found is None:
        return None
    word, a, b = found
    spot = analyze(text, line, b)
    rng = lsp.Range(lsp.Position(line, a), lsp.Position(line, b))
    if spot.kind == "header":
        keys = split_key(spot.prefix)
        if not keys or keys[-1] != word:
            return None
        return _key_text(tuple(keys[:-1]), word, f"[{'.'.join(keys)}]", rng)
    if spot.kind == "key" and spot.prefix.strip("\"'") == word:
        shown = ".".join([*spot.table, word]) if spot.table else word
        return _key_text(spot.table, word, shown, rng)
    if spot.kind == "value" and spot.in_string and spot.key in ENUM_VALUES:
        table = spot.schema
        values, section = ENUM_VALUES[spot.key]
        if table is None or key_doc(table, spot.key) is None or word not in values:
            return None
        doc = VALUE_DOCS.get(section or "", {}).get(word, "")
        body = f"{code(word)}: a value of {code(spot.key)}" + (f": {md(doc)}" if doc else "")
        return _hover(body, rng)
    return None


def _key_text(parent: tuple[str, ...], key: str, shown: str, rng: lsp.Range) -> lsp.Hover | None:
    table = schema_path(parent)
    if table is None:
        return None
    if table in FREE_TABLES:  # a name of the user's: say what it stands for
        return _hover(f"{code(shown)}\n\n{md(FREE_DOCS.get(table, ''))}", rng)
    doc = key_doc(table, key)
    if doc is None:
        where = f"[{'.'.join(table)}]" if table else "the top level"
        known = ", ".join(sorted(KEYS.get(table, ())))
        return _hover(f"{code(shown)}: not a key of {md(where)} (known: {md(known)})", rng)
    body = f"{code(shown)}\n\n{md(doc)}"
    if key in ENUM_VALUES:
        values, _ = ENUM_VALUES[key]
        body += "\n\nValues: " + ", ".join(code(v) for v in values)
    return _hover(body, rng)


def _hover(markdown: str, rng: lsp.Range) -> lsp.Hover:
    return lsp.Hover(lsp.MarkupContent(lsp.MarkupKind.Markdown, own_links_only(markdown)), rng)
