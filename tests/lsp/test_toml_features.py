"""gpuemu.toml language features from the server, so every editor has them: completion of keys by table and of
values (distributions, dtypes, module functions, reference paths), hover docs on keys, go-to-definition from
``module`` and ``reference``, document symbols; over stdio with the real server and the recorded VS Code and
Neovim capabilities. Nothing is validated here (no save, no first run)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import tomllib
from lspkit import GpuemuClient, apply_text_edits, line_of, uri_of
from lsprotocol import types as lsp

from gpuemu_ls.engine.config import keydocs
from gpuemu_ls.engine.config.keys import DISTRIBUTIONS, LAYOUTS

OP, TWIN, MATMUL = "softmax_tail_mask", "softmax_tail_mask_ok", "matmul_acc_overwrite"


async def _complete(client: GpuemuClient, toml: Path, text: str) -> list[lsp.CompletionItem]:
    """Completion at ``<|>`` in ``text`` (else at its end), sent to the server as the unsaved buffer of gpuemu.toml."""
    before = text.split("<|>")[0]
    text = text.replace("<|>", "")
    client.change(toml, text)
    lines = before.split("\n")
    got = await client.text_document_completion_async(
        lsp.CompletionParams(lsp.TextDocumentIdentifier(uri_of(toml)), lsp.Position(len(lines) - 1, len(lines[-1])))
    )
    assert got is not None, text[-80:]
    return list(got.items if isinstance(got, lsp.CompletionList) else got)


def _apply(text: str, item: lsp.CompletionItem) -> str:
    assert isinstance(item.text_edit, lsp.TextEdit), item
    return apply_text_edits(text, [item.text_edit])


@pytest.mark.asyncio
async def test_completion_of_keys_and_values(editor: Any, buggy_ws: Any) -> None:
    root = buggy_ws([OP, TWIN, MATMUL])
    toml = root / "gpuemu.toml"
    base = toml.read_text()
    client = await editor.start(root)
    assert client.init_result is not None
    provider = client.init_result.capabilities.completion_provider
    assert provider is not None and '"' in (provider.trigger_characters or [])

    # keys of an [[ops]] entry: the checker's keys of that table, with docs, not the ones already set
    op_entry = base + '\n[[ops]]\nname = "new_op"\n'
    items = await _complete(client, toml, op_entry + "dist")
    labels = {i.label for i in items}
    assert {"distributions", "layouts", "module", "reference", "invariants", "dtypes"} <= labels, labels
    assert labels <= set(keydocs.KEYS[("ops",)]), labels - set(keydocs.KEYS[("ops",)])
    assert "name" not in labels  # set already
    dist = next(i for i in items if i.label == "distributions")
    assert isinstance(dist.documentation, lsp.MarkupContent) and "distributions" in dist.documentation.value.lower()
    assert tomllib.loads(_apply(op_entry + "dist", dist) + ' = ["normal"]')["ops"][-1]["distributions"] == ["normal"]
    # ... and of another table: [validation] has check_nan, not module
    labels = {i.label for i in await _complete(client, toml, base + "\n[validation.tolerances.float32]\n")}
    assert labels == {"atol", "rtol", "ulp"}, labels
    labels = {i.label for i in await _complete(client, toml, base.replace("seed = 1234", "seed = 1234\nite<|>"))}
    assert "iterations" in labels and "timeout" in labels, labels
    assert "module" not in labels and "seed" not in labels and "check_nan" not in labels, labels  # not here / set

    # values: distributions, in the engine's order, each documented, inserted inside the open string
    text = op_entry + 'distributions = ["normal", "bo'
    items = await _complete(client, toml, text)
    assert [i.label for i in items] == list(DISTRIBUTIONS)
    boundary = next(i for i in items if i.label == "boundary")
    assert boundary.documentation is not None
    assert tomllib.loads(_apply(text, boundary) + '"]')["ops"][-1]["distributions"] == ["normal", "boundary"]
    # outside a string the value comes quoted
    text = op_entry + "layouts = "
    items = await _complete(client, toml, text)
    assert [i.label for i in items] == list(LAYOUTS)
    assert tomllib.loads(_apply(text, items[1]))["ops"][-1]["layouts"] == LAYOUTS[1]

    # module = "file:function": the top-level functions of the workspace's .py files
    text = op_entry + 'module = "softmax_t'
    items = await _complete(client, toml, text)
    labels = [i.label for i in items]
    assert f"{OP}:{OP}" in labels and f"{OP}:{TWIN}" in labels and f"{MATMUL}:reference" in labels, labels
    chosen = next(i for i in items if i.label == f"{OP}:{TWIN}")
    assert tomllib.loads(_apply(text, chosen) + '"')["ops"][-1]["module"] == f"{OP}:{TWIN}"
    # reference: functions and script paths
    labels = {i.label for i in await _complete(client, toml, op_entry + 'reference = "')}
    assert {"refs/softmax_ref.py", f"{MATMUL}:reference"} <= labels, labels
    # a table header
    labels = {i.label for i in await _complete(client, toml, base + "\n[ops.")}
    assert {"[[ops]]", "[ops.dims]", "[ops.tolerances]", "[validation]", "[ci.quick]"} <= labels, labels


@pytest.mark.asyncio
@pytest.mark.parametrize("editor", ["neovim"], indirect=True)
async def test_hover_docs_on_keys(editor: Any, buggy_ws: Any) -> None:
    root = buggy_ws([OP, MATMUL])
    toml = root / "gpuemu.toml"
    text = toml.read_text()
    client = await editor.start(root)

    async def hover(needle: str, after: str = "", offset: int = 1) -> str | None:
        line = line_of(text, needle, line_of(text, after) if after else 0)
        got = await client.hover(toml, line, text.split("\n")[line].index(needle) + offset)
        return got.contents.value if got is not None else None

    module = await hover("module", f'name = "{MATMUL}"')
    assert module is not None and keydocs.TABLES[("ops",)]["module"].split(":")[0] in module, module
    shape = await hover("shape", f'name = "{MATMUL}"')
    assert shape is not None and "`ops.inputs." in shape and "Dim names" in shape, shape
    validation = await hover("[validation]")
    assert validation is not None and "Defaults for every op" in validation, validation
    tol = await hover("float32 = {", "[validation.tolerances]")
    assert tol is not None and "Tolerance of float32 outputs" in tol, tol
    dims = await hover("N = {", f'name = "{MATMUL}"')
    assert dims is not None and "symbolic dimension" in dims, dims
    # a value with a doc of its own, and a key the checker does not know
    client.change(toml, text.replace('name = "buggy-kernels"', 'name = "buggy-kernels"\ncolour = "red"'))
    text = client.files[uri_of(toml)]
    colour = await hover("colour")
    assert colour is not None and "not a key of" in colour and "framework" in colour, colour
    text2 = text.replace('invariants = ["shape_preserved"]', 'invariants = ["finite"]', 1)
    client.change(toml, text2)
    text = text2
    finite = await hover('"finite"', offset=2)
    assert finite is not None and "no NaN or inf" in finite, finite


@pytest.mark.asyncio
@pytest.mark.parametrize("editor", ["vscode"], indirect=True)
async def test_definition_from_module_and_reference(editor: Any, buggy_ws: Any) -> None:
    root = buggy_ws([OP, MATMUL])
    toml = root / "gpuemu.toml"
    text = toml.read_text()
    client = await editor.start(root)
    assert client.init_result is not None and client.init_result.capabilities.definition_provider

    async def definition(needle: str) -> Any:
        line = line_of(text, needle)
        return await client.text_document_definition_async(
            lsp.DefinitionParams(
                lsp.TextDocumentIdentifier(uri_of(toml)),
                lsp.Position(line, text.split("\n")[line].index(needle) + len(needle) - 3),
            )
        )

    src = (root / f"{MATMUL}.py").read_text()
    got = await definition(f'module = "{MATMUL}:{MATMUL}"')
    assert isinstance(got, lsp.Location) and got.uri == uri_of(root / f"{MATMUL}.py")
    assert got.range.start.line == line_of(src, f"def {MATMUL}(")
    got = await definition(f'reference = "{MATMUL}:reference"')
    assert isinstance(got, lsp.Location) and got.range.start.line == line_of(src, "def reference(")
    got = await definition('reference = "refs/softmax_ref.py"')
    assert isinstance(got, lsp.Location) and got.uri == uri_of(root / "refs" / "softmax_ref.py")
    assert got.range.start.line == 0
    # a name that is no key of code: nothing
    assert await definition(f'name = "{OP}"') is None


@pytest.mark.asyncio
@pytest.mark.parametrize("editor", ["neovim"], indirect=True)
async def test_document_symbols_are_ops_and_kernels(editor: Any, buggy_ws: Any) -> None:
    kernel = '\n[[kernels]]\nname = "tiled_copy"\nsource = "copy.cu"\n\n[kernels.artifact_checks]\nmax_registers = 64\n'
    root = buggy_ws([OP, TWIN, MATMUL], extra=kernel)
    (root / "copy.cu").write_text("__global__ void tiled_copy(float* x) { }\n")
    toml = root / "gpuemu.toml"
    text = toml.read_text()
    client = await editor.start(root)

    async def symbols() -> list[lsp.DocumentSymbol]:
        got = await client.text_document_document_symbol_async(
            lsp.DocumentSymbolParams(lsp.TextDocumentIdentifier(uri_of(toml)))
        )
        assert got is not None and all(isinstance(s, lsp.DocumentSymbol) for s in got), got
        return list(got)  # type: ignore[arg-type]

    found = await symbols()
    assert [(s.name, s.kind) for s in found] == [
        (OP, lsp.SymbolKind.Function),
        (TWIN, lsp.SymbolKind.Function),
        (MATMUL, lsp.SymbolKind.Function),
        ("tiled_copy", lsp.SymbolKind.Module),
    ]
    lines = text.split("\n")
    matmul = found[2]
    assert lines[matmul.range.start.line] == "[[ops]]"
    assert f'name = "{MATMUL}"' in lines[matmul.selection_range.start.line]
    assert matmul.range.end.line >= line_of(text, "[ops.dims]", line_of(text, f'name = "{MATMUL}"'))
    assert matmul.range.end.line < line_of(text, "[[kernels]]")
    assert found[3].detail == "kernel · copy.cu" and found[2].detail == f"op · {MATMUL}:{MATMUL}"
    # while the buffer is being typed into something tomllib refuses, the outline stays
    client.change(toml, text.replace(f'name = "{TWIN}"', f'name = "{TWIN}"\ndist'))
    assert [s.name for s in await symbols()] == [OP, TWIN, MATMUL, "tiled_copy"]


def test_every_key_the_checker_accepts_is_documented() -> None:
    """Completion offers the checker's keys, hover shows their docs: none may lack one."""
    missing = {t: sorted(k for k in keys if not keydocs.TABLES.get(t, {}).get(k)) for t, keys in keydocs.KEYS.items()}
    assert not {t: m for t, m in missing.items() if m}, missing
    for key, (values, section) in keydocs.ENUM_VALUES.items():
        assert values, key
        if section is not None:
            assert set(keydocs.VALUE_DOCS[section]) == set(values), (key, section)


def test_completion_past_the_file_cap_says_it_is_incomplete_and_narrows_by_what_is_typed(tmp_path: Path) -> None:
    """Issue 31: `module = "` completion over a tree of more .py files than it lists (2,000) used to stop there
    silently: a module past the cap could never be completed. Now the list says it is incomplete, so the editor
    asks again as the user types, and holds the files matching what is typed."""
    from gpuemu_ls.features.toml_completion import MAX_FILES, toml_completion_list

    (tmp_path / "gpuemu.toml").write_text("")
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    for i in range(MAX_FILES + 100):
        (pkg / f"m{i:04d}.py").write_text("def f(x):\n    return x\n")
    (tmp_path / "zz").mkdir()
    (tmp_path / "zz" / "target_kernel.py").write_text("def wanted(x):\n    return x\n")  # walked last
    head = '[[ops]]\nname = "o"\nmodule = "'

    def complete(typed: str) -> lsp.CompletionList:
        text = head + typed
        return toml_completion_list(text, 2, len(text.split("\n")[2]), tmp_path)

    everything = complete("")
    labels = {i.label for i in everything.items}
    assert everything.is_incomplete and len(labels) <= MAX_FILES and "zz.target_kernel:wanted" not in labels
    narrowed = complete("zz.tar")
    assert narrowed.is_incomplete and [i.label for i in narrowed.items] == ["zz.target_kernel:wanted"]
    paths = toml_completion_list('[[kernels]]\nname = "k"\nsource = "zz/', 2, len('source = "zz/'), tmp_path)
    assert not paths.is_incomplete and paths.items == []  # no .cu files: nothing cut, nothing to offer
    small = tmp_path / "small"
    small.mkdir()
    (small / "ops.py").write_text("def op(x):\n    return x\n")
    text = head
    got = toml_completion_list(text, 2, len(text.split("\n")[2]), small)
    assert not got.is_incomplete and [i.label for i in got.items] == ["ops:op"]
