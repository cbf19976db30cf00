"""Positions of keys and values in gpuemu.toml (what tomllib does not report)."""

from __future__ import annotations

import textwrap

import pytest

from gpuemu_ls.engine.config.tomlpos import PositionIndex, Span

DOC = textwrap.dedent('''\
    # a comment
    [project]
    name = "kern#els"   # trailing comment
    "quoted key" = 1
    'lit.key' = 2
    a.b.c = 3

    [[ops]]
    name = "softmax"
    dims = { N = { min = 1, max = 8 }, B = 4 }
    shape = [
      "B",  # first
      "N",
    ]
    doc = """
    multi
    line"""

    [ops.inputs.x]
    shape = ["B", "N"]

    [[ops]]
    name = "matmul"

    [ops.inputs.a]
    shape = ["M"]

    [ops.dims]
    M = [1, 2]

    [[ops.extra]]
    k = 1
    [[ops.extra]]
    k = 2
    ''')


@pytest.fixture(scope="module")
def index() -> PositionIndex:
    return PositionIndex(DOC)


def line_of(text: str) -> int:
    """1-based line of the first line of DOC that starts with ``text``."""
    for i, line in enumerate(DOC.splitlines(), 1):
        if line.startswith(text):
            return i
    raise AssertionError(text)


def test_table_header_span_covers_the_brackets(index: PositionIndex) -> None:
    assert index.key(("project",)) == Span(2, 1, 2, 10)
    head = index.entry(("ops", 0, "inputs", "x"))
    assert head is not None and head.value is None
    assert head.key == Span(line_of("[ops.inputs.x]"), 1, line_of("[ops.inputs.x]"), len("[ops.inputs.x]") + 1)


def test_array_of_tables_entries_are_indexed_in_order(index: PositionIndex) -> None:
    first = line_of("[[ops]]")
    second = DOC.splitlines().index("[[ops]]", first) + 1
    assert index.key(("ops", 0)) == Span(first, 1, first, 8)
    assert index.key(("ops", 1)) == Span(second, 1, second, 8)
    assert index.value(("ops", 0, "name")).line == first + 1
    assert index.value(("ops", 1, "name")).line == second + 1
    # nested arrays of tables under the latest op get their own indices
    assert index.value(("ops", 1, "extra", 0, "k")).line == line_of("k = 1")
    assert index.value(("ops", 1, "extra", 1, "k")).line == line_of("k = 2")


def test_subtables_resolve_to_the_latest_op(index: PositionIndex) -> None:
    assert index.key(("ops", 1, "inputs", "a")).line == line_of("[ops.inputs.a]")
    assert index.key(("ops", 1, "dims")).line == line_of("[ops.dims]")
    assert index.entry(("ops", 0, "inputs", "a")) is None
    assert index.entry(("ops", 0, "dims", "M")) is None
    assert index.value(("ops", 1, "dims", "M", 1)) == Span(line_of("M = [1, 2]"), 9, line_of("M = [1, 2]"), 10)


def test_value_spans_of_scalars_strings_and_comments(index: PositionIndex) -> None:
    # the '#' inside the string is not a comment; the value ends at the closing quote
    assert index.value(("project", "name")) == Span(3, 8, 3, 18)
    assert index.value(("project", "quoted key")) == Span(4, 16, 4, 17)
    assert index.value(("project", "lit.key")) == Span(5, 13, 5, 14)
    assert index.key(("project", "quoted key")).column == 1


def test_dotted_keys_get_the_full_path(index: PositionIndex) -> None:
    assert index.value(("project", "a", "b", "c")) == Span(6, 9, 6, 10)
    # an unknown deeper path falls back to the nearest known ancestor
    assert index.value(("project", "a", "b", "c", "d")) == Span(6, 9, 6, 10)


def test_inline_tables_give_positions_to_nested_keys(index: PositionIndex) -> None:
    ln = line_of("dims = {")
    assert index.value(("ops", 0, "dims", "N", "max")) == Span(ln, 31, ln, 32)
    assert index.value(("ops", 0, "dims", "B")) == Span(ln, 40, ln, 41)
    assert index.value(("ops", 0, "dims")) == Span(ln, 8, ln, 43)


def test_multiline_arrays_and_strings(index: PositionIndex) -> None:
    start = line_of("shape = [")
    assert index.value(("ops", 0, "shape")) == Span(start, 9, start + 3, 2)
    assert index.value(("ops", 0, "shape", 0)) == Span(start + 1, 3, start + 1, 6)
    assert index.value(("ops", 0, "shape", 1)) == Span(start + 2, 3, start + 2, 6)
    doc = line_of('doc = """')
    assert index.value(("ops", 0, "doc")) == Span(doc, 7, doc + 2, 8)


def test_multiline_string_holding_a_header_is_not_a_header() -> None:
    text = "[t]\nf = '''\n[not_a_table]\n'''\ng = 2\n"
    idx = PositionIndex(text)
    assert ("not_a_table",) not in idx.paths()
    assert idx.value(("t", "g")) == Span(5, 5, 5, 6)


def test_table_span_runs_from_header_to_last_key(index: PositionIndex) -> None:
    assert index.table_span(("ops", 0)) == Span(line_of("[[ops]]"), 1, line_of('shape = ["B", "N"]'), 19)
    last = len(DOC.splitlines())
    assert index.table_span(("ops", 1)) == Span(line_of('name = "matmul"') - 1, 1, last, 6)
    assert index.table_span(("nope",)) is None


def test_unknown_path_without_known_ancestor_is_none(index: PositionIndex) -> None:
    assert index.key(("nothing", "here")) is None
    assert index.value(("nothing",)) is None


def test_key_span_ends_right_after_the_key(index: PositionIndex) -> None:
    assert index.key(("project", "name")) == Span(3, 1, 3, 5)
    assert index.key(("project", "quoted key")) == Span(4, 1, 4, 13)


def test_array_of_tables_name_has_a_position() -> None:
    idx = PositionIndex('[project]\nname = "x"\n\n[[opz]]\nname = "a"\n')
    assert idx.key(("opz",)) == Span(4, 1, 4, 8)
