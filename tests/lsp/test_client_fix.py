"""The test client's one fix (lspkit.fixed_converter), checked on its own so that it can be dropped once
lsprotocol reads a CodeAction carrying a command correctly."""

from __future__ import annotations

from typing import Union

from lspkit import fixed_converter
from lsprotocol import converters
from lsprotocol import types as lsp

ACTION = {
    "title": "Reproduce failure of op (seed 7)",
    "kind": "quickfix",
    "isPreferred": True,
    "command": {"title": "Reproduce failure", "command": "gpuemu.reproduce", "arguments": [{"seed": 7}]},
}
COMMAND = {"title": "Run", "command": "gpuemu.runOp", "arguments": [{"op": "x"}]}
TARGET = Union[lsp.Command, lsp.CodeAction]  # noqa: UP007 - the exact type lsprotocol registers its hook for


def test_lsprotocol_alone_misreads_a_code_action_with_a_command() -> None:
    got = converters.get_converter().structure(ACTION, TARGET)
    assert isinstance(got, lsp.Command), "lsprotocol reads CodeActions right now: drop lspkit.fixed_converter's hook"
    assert got.command.startswith("{")  # the nested command, stringified


def test_fixed_converter_reads_code_actions_and_commands() -> None:
    fixed = fixed_converter()
    got = fixed.structure(ACTION, TARGET)
    assert isinstance(got, lsp.CodeAction)
    assert got.kind == lsp.CodeActionKind.QuickFix and got.is_preferred
    assert got.command is not None and got.command.command == "gpuemu.reproduce"
    assert list(got.command.arguments or []) == [{"seed": 7}]
    plain = fixed.structure(COMMAND, TARGET)
    assert isinstance(plain, lsp.Command) and plain.command == "gpuemu.runOp"
