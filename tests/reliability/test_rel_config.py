"""Bad-input catalogue, configuration and files: malformed gpuemu.toml, missing or unreadable files, odd paths.

Each case is a workspace that starts as a copy of a good one with a populated store (written by a real
``gpuemu test`` run), then breaks one thing. Each case asserts, for the CLI (``gpuemu test``) and the
CI gate (``gpuemu-ls --check``): exit 2, no traceback, a message naming the file and the line (where the
file has lines to name); for one real language server shared by the module: a ``config-error``
diagnostic on that line (for files an editor has open) and a server that still answers; and a store
that passes ``PRAGMA integrity_check`` with every row it held unchanged and nothing added.
"""

from __future__ import annotations

import asyncio
import re
import shutil
import stat
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
import relkit
from kit.store import db_path
from lsprotocol import types as lsp

BIG_OPS = 10_000


@dataclass(frozen=True)
class Case:
    name: str
    edit: Callable[[Path], tuple[int | None, str]]  # breaks the workspace; (expected line, message regex)
    editor_open: bool = True  # the server sees it as an open document (else as a workspace folder on disk)
    exit_code: int = 2
    bug: str | None = None
    server_bug: bool = False  # the bug also shows in the server (no diagnostic)


def _sub(old: str, new: str, regex: str, marker: str | None = None) -> Callable[[Path], tuple[int | None, str]]:
    """An edit replacing ``old`` by ``new`` in gpuemu.toml; the expected line is the one holding ``marker``."""

    def edit(root: Path) -> tuple[int | None, str]:
        toml = root / "gpuemu.toml"
        text = toml.read_text(encoding="utf-8")
        assert old in text, old
        toml.write_text(text.replace(old, new, 1), encoding="utf-8")
        return relkit.line_of(toml, marker or new.strip().splitlines()[-1]), regex

    return edit


def _big(root: Path) -> tuple[int | None, str]:
    """10,000 valid ops, then one with an unknown key: the error names the line near 40,000."""
    toml = root / "gpuemu.toml"
    parts = [toml.read_text(encoding="utf-8")]
    for i in range(BIG_OPS):
        parts.append(f'\n[[ops]]\nname = "op{i:05d}"\nmodule = "kern:double"\nreference = "kern:reference"\n')
    parts.append('\n[[ops]]\nname = "last"\nmodule = "kern:double"\nreference = "kern:reference"\nbogus_key = 1\n')
    toml.write_text("".join(parts), encoding="utf-8")
    return relkit.line_of(toml, "bogus_key = 1"), r"unknown key 'bogus_key' in ops\[10001\]"


def _deep(root: Path) -> tuple[int | None, str]:
    toml = root / "gpuemu.toml"
    toml.write_text("nested = " + "[" * 50_000 + "]" * 50_000 + "\n" + toml.read_text(encoding="utf-8"))
    return 1, r"(?i)nest|deep|recursion"


def _crlf(root: Path) -> tuple[int | None, str]:
    toml = root / "gpuemu.toml"
    text = toml.read_text(encoding="utf-8").replace("[ci.quick]\n", "[ci.quick]\nspeed = 3\n")
    toml.write_bytes(text.replace("\n", "\r\n").encode())
    return relkit.line_of(toml, "speed = 3"), r"unknown key 'speed' in ci.quick"


def _bom(root: Path) -> tuple[int | None, str]:
    toml = root / "gpuemu.toml"
    toml.write_bytes(b"\xef\xbb\xbf" + toml.read_bytes())
    return 1, r"TOML syntax error"


def _nul(root: Path) -> tuple[int | None, str]:
    toml = root / "gpuemu.toml"
    toml.write_bytes(toml.read_bytes().replace(b'name = "good"', b'name = "go\x00od"'))
    return 2, r"TOML syntax error.*\\x00"


def _invalid_utf8(root: Path) -> tuple[int | None, str]:
    toml = root / "gpuemu.toml"
    toml.write_bytes(toml.read_bytes().replace(b'name = "good"', b'name = "g\xff\xfed"'))
    return None, r"cannot read gpuemu\.toml.*utf-8"


def _unreadable(root: Path) -> tuple[int | None, str]:
    (root / "gpuemu.toml").chmod(0)
    return None, r"cannot read gpuemu\.toml.*Permission denied"


def _directory(root: Path) -> tuple[int | None, str]:
    (root / "gpuemu.toml").unlink()
    (root / "gpuemu.toml").mkdir()
    return None, r"gpuemu\.toml is a folder, not a file"


def _missing_toml(root: Path) -> tuple[int | None, str]:
    (root / "gpuemu.toml").unlink()
    return None, r"no gpuemu\.toml in"


def _unreadable_module(root: Path) -> tuple[int | None, str]:
    (root / "kern.py").chmod(0)
    toml = root / "gpuemu.toml"
    return relkit.line_of(toml, 'module = "kern:double"'), r"kern\.py|cannot parse|syntax"


def _empty(root: Path) -> tuple[int | None, str]:
    (root / "gpuemu.toml").write_text("", encoding="utf-8")
    return 1, r"no \[\[ops\]\] or \[\[kernels\]\]"


def _dup(root: Path) -> tuple[int | None, str]:
    toml = root / "gpuemu.toml"
    text = toml.read_text(encoding="utf-8")
    block = text[text.index("[[ops]]") :]
    toml.write_text(text + "\n" + block, encoding="utf-8")
    lines = toml.read_text(encoding="utf-8").splitlines()
    second = [i for i, line in enumerate(lines, 1) if line == 'name = "double"'][1]
    return second, r"duplicate op name 'double'"


V = "[validation]\n"
CASES = [
    Case("syntax_unclosed_table", _sub("[[ops]]\n", "[[ops]\n", r"TOML syntax error", "[[ops]")),
    Case("syntax_unterminated_string", _sub('name = "double"', 'name = "double', r"TOML syntax error")),
    Case(
        "syntax_duplicate_key",
        _sub('dtypes = ["float32"]', 'dtypes = ["float32"]\ndtypes = ["float16"]', r"TOML syntax error"),
    ),
    Case("syntax_bom", _bom),
    Case("syntax_nul_byte", _nul),
    Case("crlf_line_endings", _crlf),
    Case("type_iterations_string", _sub(V, V + 'iterations = "many"\n', r"validation\.iterations must be an integer")),
    Case("type_dtypes_not_list", _sub('layouts = ["contiguous"]', 'layouts = "contiguous"', r"must be an array")),
    Case("type_table_expected", _sub("[ci.quick]\niterations = 2", "[ci]\nquick = 3", r"ci\.quick must be a table")),
    Case("type_bool_expected", _sub(V, V + "check_nan = 1\n", r"check_nan must be true or false")),
    Case("value_negative_timeout", _sub(V, V + "timeout = -1\n", r"timeout must be > 0")),
    Case("value_unknown_dtype", _sub('dtypes = ["float32"]', 'dtypes = ["float33"]', r"unknown dtype 'float33'")),
    Case("value_seed_too_big", _sub(V, V + "seed = 99999999999999999999999\n", r"seed"), exit_code=2),
    Case("value_timeout_nan", _sub(V, V + "timeout = nan\n", r"timeout")),
    Case("value_timeout_inf", _sub(V, V + "timeout = inf\n", r"timeout")),
    Case(
        "value_atol_inf",
        _sub(V, V + "tolerances = { float32 = { atol = inf } }\n", r"atol"),
    ),
    Case("unknown_top_key", _sub("[project]", "[projcet]", r"unknown key 'projcet'.*\n.*project")),
    Case("unknown_op_key", _sub('module = "kern:double"', 'modul = "kern:double"', r"unknown key 'modul'")),
    Case("unknown_tolerance_dtype", _sub(V, V + "tolerances = { fp32 = { atol = 1e-3 } }\n", r"'fp32' is not one")),
    Case("duplicate_op_name", _dup),
    Case("ten_thousand_ops", _big),
    Case("deeply_nested_arrays", _deep),
    Case("empty_file", _empty, exit_code=1),
    Case(
        "missing_reference_script",
        _sub(
            'reference = "kern:reference"',
            'reference = "refs/missing ref.py"',
            r"script 'refs/missing ref\.py' not found",
        ),
    ),
    Case("missing_module", _sub('module = "kern:double"', 'module = "nowhere:double"', r"module 'nowhere' not found")),
    Case("missing_function", _sub('module = "kern:double"', 'module = "kern:tripple"', r"defines no 'tripple'")),
    Case("missing_gpuemu_toml", _missing_toml, editor_open=False),
    Case("gpuemu_toml_is_a_directory", _directory, editor_open=False),
    Case("unreadable_gpuemu_toml", _unreadable, editor_open=False),
    Case("invalid_utf8_gpuemu_toml", _invalid_utf8, editor_open=False),
    Case("unreadable_module", _unreadable_module),
]


BY_NAME = {c.name: c for c in CASES}


@pytest.fixture(scope="module")
def template(module_tmp: Path) -> Path:
    """A good workspace whose store holds the rows of one real CLI run."""
    root = relkit.good_ws(module_tmp / "template")
    proc = relkit.run_cli(root, "test", "--quick", "--no-progress")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert relkit.counts(db_path(root))["cases"] == 2
    return root


@pytest.fixture(scope="module")
def cases_dir(module_tmp: Path) -> Path:
    d = module_tmp / "cases"
    d.mkdir(exist_ok=True)
    return d


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def server(module_tmp: Path) -> Any:
    """One real server (obeying file modes even when run as root) on an empty folder: it meets each case's
    workspace when the editor opens its gpuemu.toml, or when the folder is added to the editor's workspace."""
    tag = relkit.new_tag()
    home = module_tmp / "server-root"
    home.mkdir(exist_ok=True)
    client = await relkit.start_server(
        home,
        env=relkit.child_env({relkit.TAG_VAR: tag}),
        preexec_fn=relkit.drop_dac_caps,
        log_file=module_tmp / "server.log",
    )
    relkit.record("server", started=1)
    yield client
    code = await relkit.stop_server(client)
    relkit.record("server", unexpected_exits=int(code != 0))
    left = relkit.wait_gone(relkit.tagged(tag), 15)
    relkit.kill_all(left)
    assert code == 0, f"server exit code {code}"
    assert not left


def _location_pattern(config: Path, line: int | None) -> str:
    where = re.escape(str(config if config.is_file() else config.parent))
    return rf"{where}:{line}(:\d+)?:" if line is not None else where


@pytest.mark.asyncio(loop_scope="module")
@pytest.mark.parametrize("name", relkit.case_params(CASES, lambda c: c.bug))
async def test_bad_config(name: str, template: Path, cases_dir: Path, server: Any) -> None:
    case = BY_NAME[name]
    relkit.record("config", cases=1)
    root = cases_dir / name
    shutil.copytree(template, root)
    db = db_path(root)
    before = relkit.fingerprint(db)
    n_before = relkit.counts(db)
    line, regex = case.edit(root)
    config = root / "gpuemu.toml"
    try:
        # the CLI and the gate, at once (as a developer and CI would), each with file modes obeyed
        with ThreadPoolExecutor(2) as pool:
            cli_f = pool.submit(
                relkit.run_cli, root, "test", "--quick", "--no-progress", preexec_fn=relkit.drop_dac_caps
            )
            gate_f = pool.submit(relkit.run_check, root, "--quick", "--no-progress", preexec_fn=relkit.drop_dac_caps)
            cli, gate = cli_f.result(), gate_f.result()
        for who, proc in (("gpuemu test", cli), ("gpuemu-ls --check", gate)):
            out = proc.stdout + proc.stderr
            assert relkit.no_traceback(out), f"{who} crashed:\n{out[-3000:]}"
            assert proc.returncode == case.exit_code, f"{who}: exit {proc.returncode}\n{out[-3000:]}"
            assert re.search(_location_pattern(config, line), out), f"{who} names no {config}:{line}:\n{out[-2000:]}"
            assert re.search(regex, out), f"{who}: message does not match {regex!r}:\n{out[-2000:]}"
        # the server: a diagnostic at the line for an open buffer; a workspace on disk for the rest
        if case.editor_open:
            text = config.read_bytes().decode("utf-8", errors="replace")
            relkit.open_doc(server, config, text)

            def at_line() -> list[lsp.Diagnostic]:
                return [
                    d
                    for d in relkit.diags(server, config)
                    if d.source == "gpuemu"
                    and d.code in ("config-error", "config-warning")
                    and d.range.start.line + 1 == line
                    and re.search(regex, d.message)
                ]

            try:
                await relkit.wait_for(at_line, 60, f"a config diagnostic at line {line}", server)
            except AssertionError:
                if case.server_bug:
                    pytest.xfail(case.bug or "")
                raise
        else:
            server.workspace_did_change_workspace_folders(
                lsp.DidChangeWorkspaceFoldersParams(
                    lsp.WorkspaceFoldersChangeEvent(added=[lsp.WorkspaceFolder(root.as_uri(), name)], removed=[])
                )
            )
            if line is None and config.is_file():  # readable only by the server's own attempt: it must say so

                def said() -> list[lsp.Diagnostic]:
                    return [d for d in relkit.diags(server, config) if re.search(regex, d.message)]

                await relkit.wait_for(said, 60, "a diagnostic saying the file cannot be read", server)
        assert await relkit.answers(server)
    finally:
        for p in (config, root / "kern.py"):
            if p.exists() and not p.is_dir():
                p.chmod(stat.S_IRUSR | stat.S_IWUSR)
    assert relkit.integrity(db) == "ok"
    assert relkit.intact_since(db, before) == []
    assert relkit.counts(db) == n_before


def _ten_thousand(root: Path) -> Path:
    toml = root / "gpuemu.toml"
    toml.write_text(
        toml.read_text(encoding="utf-8")
        + "".join(
            f'\n[[ops]]\nname = "op{i:05d}"\nmodule = "kern:double"\nreference = "kern:reference"\n'
            for i in range(BIG_OPS)
        ),
        encoding="utf-8",
    )
    return toml


@pytest.mark.asyncio(loop_scope="module")
async def test_ten_thousand_ops_load_and_the_server_answers(template: Path, cases_dir: Path, server: Any) -> None:
    """A valid 10,000-op workspace: the CLI lists every op, the server discovers all of them and keeps answering."""
    relkit.record("config", cases=1)
    root = cases_dir / "ten_thousand_valid"
    shutil.copytree(template, root)
    toml = _ten_thousand(root)
    proc = relkit.run_cli(root, "ops", "--format", "json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.count('"name": "op') == BIG_OPS
    relkit.open_doc(server, toml)
    t0 = time.monotonic()
    got = await relkit.request(server, "gpuemu/discoverOps", {}, timeout=60)
    ws = [w for w in got["workspaces"] if w["root"] == str(root.resolve())]
    assert ws and len(ws[0]["items"]) == BIG_OPS + 1, [len(w["items"]) for w in got["workspaces"]]
    assert time.monotonic() - t0 < 60
    assert await relkit.answers(server)


@pytest.mark.asyncio(loop_scope="module")
async def test_hover_in_a_ten_thousand_op_config_answers_quickly(template: Path, module_tmp: Path) -> None:
    """Hover over the last op of a 10,000-op gpuemu.toml answers within 5 s (a server of its own: a stuck one
    is killed afterwards)."""
    relkit.record("config", cases=1)
    root = module_tmp / "ten_thousand_hover"
    shutil.copytree(template, root)
    toml = _ten_thousand(root)
    client = await relkit.start_server(root)
    try:
        relkit.open_doc(client, toml)
        await relkit.request(client, "gpuemu/discoverOps", {}, timeout=60)
        last = len(toml.read_text(encoding="utf-8").splitlines()) - 2
        hover = await asyncio.wait_for(
            client.text_document_hover_async(
                lsp.HoverParams(lsp.TextDocumentIdentifier(toml.as_uri()), lsp.Position(last, 0))
            ),
            5,
        )
        assert hover is not None
    finally:
        await relkit.force_close(client)


GOOD_UNICODE_REF = """import numpy as np


def reference(x):
    return np.asarray(x, dtype=np.float64) * 2.0
"""

SEGV_PY = """import numpy as np


def double(x):
    return x * 2


def segfaults(x):
    import ctypes

    ctypes.string_at(0)


def reference(x):
    return np.asarray(x, dtype=np.float64) * 2.0
"""


def _unicode_ws(parent: Path) -> Path:
    root = parent / "wörk spåce ✓ ünïcode"
    toml = relkit.HEADER.format(name="unicode", validation="", quick=2)
    toml += relkit.op_block("double", 'module = "kern:double"\nreference = "réfs dir/réf ü.py"')
    toml += relkit.op_block("script_op", 'op_script = "my scripts/op ü.py"\nreference = "kern:reference"')
    return relkit.write_ws(
        root,
        toml,
        {
            "kern.py": relkit.GOOD_PY,
            "réfs dir/réf ü.py": "import json, sys\nimport numpy as np\nimport base64\n"
            "req = json.load(sys.stdin)\nx = req['inputs']['x']\n"
            "a = np.frombuffer(base64.b64decode(x['data']), dtype=x['dtype']).reshape(x['shape']) * 2.0\n"
            "print(json.dumps({'outputs': {'result': {'shape': list(a.shape), 'dtype': 'float64', "
            "'data': base64.b64encode(a.tobytes()).decode()}}}))\n",
            "my scripts/op ü.py": "import json, sys\nimport numpy as np\nimport base64\n"
            "req = json.load(sys.stdin)\nx = req['inputs']['x']\n"
            "a = np.frombuffer(base64.b64decode(x['data']), dtype=x['dtype']).reshape(x['shape'])\n"
            "a = (a * 2).astype(x['dtype'])\n"
            "print(json.dumps({'outputs': {'result': {'shape': list(a.shape), 'dtype': x['dtype'], "
            "'data': base64.b64encode(a.tobytes()).decode()}}}))\n",
        },
    )


@pytest.mark.asyncio(loop_scope="module")
async def test_unicode_and_spaces_in_paths(cases_dir: Path, server: Any) -> None:
    """A workspace, a reference script and an op script with spaces and non-ASCII letters in their paths:
    everything runs and passes (CLI, gate, server), and a config error names the non-ASCII path and line."""
    relkit.record("config", cases=1)
    root = _unicode_ws(cases_dir)
    cli = relkit.run_cli(root, "test", "--quick", "--no-progress")
    assert cli.returncode == 0, cli.stdout + cli.stderr
    got = await relkit.request(server, "gpuemu/runOps", {"workspace": str(root), "mode": "quick", "iterations": 2})
    assert sorted(r["status"] for r in got["results"]) == ["passed", "passed"], got
    toml = root / "gpuemu.toml"
    broken = toml.read_text(encoding="utf-8").replace(
        'op_script = "my scripts/op ü.py"', 'op_script = "my scripts/öp.py"'
    )
    relkit.open_doc(server, toml, broken)
    line = broken.splitlines().index('op_script = "my scripts/öp.py"') + 1

    def at_line() -> list[lsp.Diagnostic]:
        return [
            d
            for d in relkit.diags(server, toml)
            if d.code == "config-error" and d.range.start.line + 1 == line and "öp.py" in d.message
        ]

    await relkit.wait_for(at_line, 60, "the config error in the unicode workspace", server)
    toml.write_text(broken, encoding="utf-8")
    cli = relkit.run_cli(root, "test", "--quick", "--no-progress")
    assert cli.returncode == 2 and f"{toml}:{line}:" in cli.stderr and "öp.py" in cli.stderr, cli.stderr
    assert relkit.integrity(db_path(root)) == "ok"
    assert await relkit.answers(server)


def test_crash_site_in_a_unicode_workspace(cases_dir: Path) -> None:
    """A segfaulting op in a non-ASCII workspace path: the failure line names ops file and the crashing line."""
    relkit.record("config", cases=1)
    root = relkit.write_ws(
        cases_dir / "crash ✓ café",
        relkit.HEADER.format(name="c", validation="", quick=1)
        + relkit.op_block("segv", 'module = "kern:segfaults"\nreference = "kern:reference"'),
        {"kern.py": SEGV_PY},
    )
    proc = relkit.run_cli(root, "test", "--quick", "--no-progress")
    assert proc.returncode == 1 and "SIGSEGV" in proc.stdout, proc.stdout + proc.stderr
    want = relkit.line_of(root / "kern.py", "ctypes.string_at(0)")
    assert f"(kern.py:{want})" in proc.stdout, proc.stdout
