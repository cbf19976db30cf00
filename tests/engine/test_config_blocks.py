"""gpuemu.toml's ``[[ops]]`` entries found by lines (engine/config/blocks.py): an edit made on one entry gives the
text the whole-file edit gives, and an edited entry checked on its own finds its problem at its place."""

from __future__ import annotations

from pathlib import Path

import pytest
from kit.ops import op_toml, project_toml

from gpuemu_ls.engine.config.blocks import around, changed_lines, op_blocks, renumbered
from gpuemu_ls.engine.config.edits import edit_op_block, pin_seed
from gpuemu_ls.engine.config.load import load_config
from gpuemu_ls.engine.errors import ConfigError

OP_PY = "def op(x):\n    return x\n\n\ndef ref(x):\n    return x\n"


def _toml(n: int) -> str:
    dims = {"N": (1, 64, 16)}
    entries = [op_toml(f"o{i}", module="m:op", reference="m:ref", inputs={"x": ["N"]}, dims=dims) for i in range(n)]
    return project_toml(validation={"dtypes": ["float32"]}) + "# the ops\n" + "\n".join(entries)


def test_entries_and_their_sub_tables_by_lines() -> None:
    text = _toml(3) + '\n[ci]\nquick_iterations = 4\n\ndocs = """\n[[ops]]\n"""\n'
    blocks = op_blocks(text)
    assert blocks is not None and len(blocks) == 3
    lines = text.split("\n")
    for i, (start, end) in enumerate(blocks):
        assert lines[start] == "[[ops]]" and f'name = "o{i}"' in lines[start:end]
        assert any(line.startswith("[ops.") for line in lines[start:end])  # its sub-tables are its own
    assert lines[blocks[-1][1]] == "[ci]"  # the entry ends at the next table, not in the string below it
    assert op_blocks('x = """\n[[ops]]\n') is None  # an open string: lines cannot tell


@pytest.mark.parametrize("plan", [None, 3])
def test_pin_on_one_entry_equals_the_whole_file_edit(plan: int | None) -> None:
    text = _toml(4)
    start, end, new = edit_op_block(text, 2, lambda t, i: pin_seed(t, i, "o2", 17, plan))
    lines = text.split("\n")
    assert "\n".join(lines[:start]) + "\n" + new + "\n".join(lines[end:]) == pin_seed(text, 2, "o2", 17, plan)


def test_an_edited_entry_checked_on_its_own(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text(OP_PY)
    text = _toml(50)
    broken = text.replace('name = "o30"\n', 'name = "o30"\ntimeout = "soon"\n')
    part = around(broken, *changed_lines(text, broken))
    assert part is not None and part.entries == [0, 30]  # the edited entry, and the first
    with pytest.raises(ConfigError) as whole:
        load_config(tmp_path, text=broken)
    with pytest.raises(ConfigError) as alone:
        load_config(tmp_path, text=part.text)
    found = [renumbered(p, part) for p in alone.value.problems]
    where = [(p.line, p.column, p.end_line, p.end_column, p.message) for p in found]
    assert where == [(p.line, p.column, p.end_line, p.end_column, p.message) for p in whole.value.problems]
    assert "ops[30]" in found[0].message
