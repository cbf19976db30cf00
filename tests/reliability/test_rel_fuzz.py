"""Protocol fuzzing: randomized LSP traffic against one real server per test, bounded for CI.

Hypothesis generates lists of actions: edits of gpuemu.toml and of the op and reference sources (valid,
broken, random text), saves that start validations, opens/closes/changes out of order and of files
that do not exist or lie outside the workspace, hovers/code lenses/code actions at random positions,
run requests with random ids and options (some cancelled right away), commands with random arguments,
configuration and watched-file events, and malformed JSON-RPC (bodies that are not JSON, not objects,
lack ``jsonrpc``, name unknown methods, carry parameters of the wrong shape, cancel unknown ids). After
every example the server must still answer; at the end it must answer a hover and ``discoverOps``, shut
down cleanly, leave no process behind and leave a store that passes ``PRAGMA integrity_check``.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
from pathlib import Path
from typing import Any

import pytest
import relkit
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from kit.ops import DOUBLE_REF_SCRIPT
from kit.store import db_path
from lsprotocol import types as lsp

#: Bounded for CI and derandomized, so the figures are stable; GPUEMU_FUZZ_EXAMPLES=500 GPUEMU_FUZZ_RANDOM=1
#: explores further.
MAX_EXAMPLES = int(os.environ.get("GPUEMU_FUZZ_EXAMPLES", "25"))
RANDOM = bool(os.environ.get("GPUEMU_FUZZ_RANDOM"))
MAX_ACTIONS = 12
STEP_TIMEOUT = 90.0

REF_PY = DOUBLE_REF_SCRIPT


def fuzz_ws(root: Path) -> Path:
    toml = relkit.HEADER.format(name="fuzz", validation="timeout = 10\n", quick=2)
    toml += relkit.op_block("double", 'module = "kern:double"\nreference = "kern:reference"')
    toml += relkit.op_block("scripted", 'module = "kern:double"\nreference = "refs/ref.py"')
    return relkit.write_ws(root, toml, {"kern.py": relkit.GOOD_PY, "refs/ref.py": REF_PY})


class Harness:
    """One server for a whole hypothesis run; its client lives on an event loop in a thread of its own."""

    def __init__(self, root: Path, log: Path) -> None:
        self.root = root
        self.tag = relkit.new_tag()
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="fuzz-loop", daemon=True)
        self.thread.start()
        opts = {**relkit.QUIET, "onSave": True, "runOnOpen": "quick", "iterations": 2}  # opening runs ops
        self.client = self.run(
            relkit.start_server(root, opts, env=relkit.child_env({relkit.TAG_VAR: self.tag}), log_file=log)
        )
        self.pid = self.client.server_pid
        self.versions: dict[str, int] = {}
        self.steps = 0
        self.examples = 0
        self.raw_id = 10_000
        self.pending: list[Any] = []
        relkit.record("server", started=1)

    def run(self, coro: Any, timeout: float = STEP_TIMEOUT) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> int | None:
        try:
            code = self.run(relkit.stop_server(self.client))
        except Exception:
            code = None
            self.run(relkit.force_close(self.client))
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        return code


@pytest.fixture
def harness(tmp_path: Path) -> Any:
    h = Harness(fuzz_ws(tmp_path / "fuzz ws"), tmp_path / "server.log")
    yield h
    alive_before_close = relkit.alive(h.pid)
    if alive_before_close and h.client._server.returncode is None:  # the final checks, on a live server
        h.run(relkit.answers(h.client, h.root))
    code = h.close()
    relkit.record("fuzz", steps=h.steps, examples=h.examples)
    relkit.record("server", unexpected_exits=int(not alive_before_close or code != 0))
    left = relkit.wait_gone(relkit.tagged(h.tag), 15)
    relkit.kill_all(left)
    assert alive_before_close, "the server died during fuzzing"
    assert code == 0, f"the server did not shut down cleanly after fuzzing: {code}"
    assert left == [], "processes outlived the fuzzed server"
    db = db_path(h.root)
    if db.exists():
        assert relkit.integrity(db) == "ok"


# --- what the fuzzer sends -------------------------------------------------------------------------
FILES = ["gpuemu.toml", "kern.py", "refs/ref.py", "new_module.py", "../outside.py", "sub dir/ünï.py", "kernel.cu"]

TOML_VARIANTS = [
    None,  # the original
    "[[ops]\nname = ",
    "[project]\nname = 3\n",
    '[validation]\niterations = "x"\n',
    '[[ops]]\nname = "double"\nmodule = "kern:nothing"\nreference = "kern:reference"\n',
    '[[ops]]\nname = "a"\nmodule = "kern:double"\nreference = "../outside.py"\n',
    "x = " + "[" * 200 + "]" * 200 + "\n",
    "\ufeff[project]\n",
    "",
]
PY_VARIANTS = [
    None,
    "def double(x):\n    return x * 3\n",
    "def double(x)\n    return",
    "import os\nos.abort()\n",
    "raise SystemExit(3)\n",
    "while True: pass\n",
    "\x00\x01\x02",
]

texts = st.one_of(st.sampled_from(TOML_VARIANTS + PY_VARIANTS), st.text(max_size=120))
positions = st.tuples(st.integers(0, 60), st.integers(0, 120))
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 10**12) | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=8), c, max_size=3),
    max_leaves=8,
)
run_params = st.fixed_dictionaries(
    {},
    optional={
        "ids": st.lists(st.sampled_from(["op:double", "op:scripted", "op:nope", "kernel:k", "", "double"]), max_size=3),
        "mode": st.sampled_from(["quick", "thorough", "fast", 3]),
        "iterations": st.sampled_from([1, 2, 0, -1, "x", None]),
        "workspace": st.sampled_from(["", "/nonexistent", "."]),
    },
)
commands = st.sampled_from(
    [
        "gpuemu.runOp",
        "gpuemu.runAll",
        "gpuemu.runQuick",
        "gpuemu.reproduce",
        "gpuemu.minimize",
        "gpuemu.calibrate",
        "gpuemu.nothing",
    ]
)
command_args = st.one_of(
    st.fixed_dictionaries(
        {
            "op": st.sampled_from(["double", "scripted", "nope"]),
            "seed": st.sampled_from([0, 1, -1, "x", 10**20]),
            "iterations": st.sampled_from([1, 2]),
        }
    ),
    json_values,
)
MALFORMED = [
    b"this is not json",
    b"[1, 2, 3]",
    b'"a string"',
    b'{"id": 1, "method": "textDocument/hover"}',
    b'{"jsonrpc": "2.0", "id": 77, "method": "gpuemu/doesNotExist", "params": {}}',
    b'{"jsonrpc": "2.0", "id": 78, "method": "textDocument/hover", "params": "nonsense"}',
    b'{"jsonrpc": "2.0", "id": {"weird": true}, "method": "gpuemu/discoverOps", "params": {}}',
    b'{"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {"textDocument": 5}}',
    b'{"jsonrpc": "2.0", "method": "textDocument/didChange", "params": {"textDocument": {"uri": "file:///nope"},'
    b' "contentChanges": [{"text": 1}]}}',
    b'{"jsonrpc": "2.0", "method": "$/cancelRequest", "params": {"id": 123456}}',
    b'{"jsonrpc": "2.0", "id": 424242, "result": {"unexpected": "response"}}',
    b'{"jsonrpc": "2.0", "method": "gpuemu/opState", "params": null}',
    b'{"jsonrpc": "2.0", "id": 79, "method": "gpuemu/runOps", "params": [1, 2]}',
    b'{"jsonrpc": "2.0", "id": 80, "method": "textDocument/hover", "params": {"textDocument": {"uri": "file:///x"},'
    b' "position": {"line": -5, "character": -1}}}',
    b'{"jsonrpc": "2.0", "method": "workspace/didChangeConfiguration", "params": {"settings": {"gpuemu": '
    b'{"trusted": "yes", "jobs": -3, "mode": 7}}}}',
    b'{"jsonrpc": "2.0", "id": 81, "method": "workspace/executeCommand", "params": {"command": "gpuemu.reproduce",'
    b' "arguments": [{"op": "double"}]}}',
    b'{"jsonrpc": "2.0", "method": "textDocument/didSave", "params": {"textDocument": {"uri": "untitled:x"}}}',
    b'{"jsonrpc": "2.0", "id": 82, "method": "gpuemu/discoverOps", "params": {"pad": "' + b"x" * 300_000 + b'"}}',
    b'{"jsonrpc": "2.0", "id": 83, "method": "textDocument/hover", "params": {}}',
    b'{"jsonrpc": "2.0", "id": 84, "method": "textDocument/hover", "params": {"textDocument": {"uri": "not a uri"},'
    b' "position": {"line": 0, "character": 0}}}',
    b'{"jsonrpc": "2.0", "id": 85, "method": "textDocument/codeAction", "params": {"textDocument": {"uri":'
    b' "file:///x.py"}, "range": null, "context": {"diagnostics": []}}}',
    b'{"jsonrpc": "2.0", "id": 86, "method": "gpuemu/runOps", "params": []}',
    b'{"jsonrpc": "2.0", "id": 87, "method": "gpuemu/runOps", "params": {"mode": "bogus", "iterations": 10000000}}',
    b'{"jsonrpc": "2.0", "id": 88, "method": "initialize", "params": {"capabilities": {},'
    b' "initializationOptions": {"trusted": false, "hover": false}}}',
]

actions = st.one_of(
    st.tuples(st.just("open"), st.sampled_from(FILES), texts),
    st.tuples(st.just("change"), st.sampled_from(FILES), texts),
    st.tuples(st.just("save"), st.sampled_from(FILES), texts, st.booleans()),
    st.tuples(st.just("close"), st.sampled_from(FILES)),
    st.tuples(st.just("hover"), st.sampled_from(FILES), positions),
    st.tuples(st.just("lens"), st.sampled_from(FILES)),
    st.tuples(st.just("action"), st.sampled_from(FILES), positions, json_values),
    st.tuples(st.just("discover")),
    st.tuples(st.just("run"), run_params, st.sampled_from(["wait", "cancel", "cancel-later"])),
    st.tuples(st.just("command"), commands, command_args, st.booleans()),
    st.tuples(st.just("config"), json_values),
    st.tuples(st.just("watched"), st.sampled_from(FILES), st.sampled_from([1, 2, 3])),
    st.tuples(st.just("folders"), st.sampled_from(["add", "remove"]), st.sampled_from(["ws", "/nonexistent", "sub"])),
    st.tuples(st.just("progress-cancel"), st.sampled_from(["gpuemu-1", "gpuemu-2", "nope", 7])),
    st.tuples(st.just("raw"), st.sampled_from(MALFORMED)),
    st.tuples(st.just("sleep"), st.sampled_from([0.0, 0.05, 0.3])),
)


def _uri(h: Harness, rel: str) -> str:
    return (h.root / rel).resolve().as_uri()


def _text(h: Harness, rel: str, text: str | None) -> str:
    if text is not None:
        return text
    p = h.root / rel
    return p.read_text(encoding="utf-8", errors="replace") if p.is_file() else ""


async def _send_raw(h: Harness, body: bytes) -> None:
    h.client.protocol.writer.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)


async def _request(h: Harness, coro: Any, timeout: float = 60.0) -> Any:
    """A well-formed request must be answered (a result or a JSON-RPC error), never left hanging."""
    try:
        return await asyncio.wait_for(coro, timeout)
    except (asyncio.TimeoutError, TimeoutError):
        raise AssertionError("the server left a request unanswered") from None
    except Exception as exc:  # an error response is an answer
        if "unanswered" in str(exc) or h.client._server.returncode is not None:
            raise
        return exc


async def _cancelled(h: Harness, method: str, params: Any, delay: float) -> None:
    """Send a request and ``$/cancelRequest`` for it after ``delay``; it must still be answered (checked at the
    end of the example)."""
    h.raw_id += 1
    msg_id = f"fuzz-{h.raw_id}"
    h.pending.append(asyncio.ensure_future(h.client.protocol.send_request_async(method, params, msg_id=msg_id)))
    await asyncio.sleep(delay)
    h.client.cancel_request(lsp.CancelParams(id=msg_id))


async def act(h: Harness, action: tuple[Any, ...]) -> None:
    c = h.client
    kind = action[0]
    if kind in ("open", "change", "save"):
        rel, text = action[1], _text(h, action[1], action[2])
        uri = _uri(h, rel)
        if kind == "open" or (kind == "change" and uri not in h.versions and len(text) % 2):
            h.versions[uri] = 1
            c.text_document_did_open(
                lsp.DidOpenTextDocumentParams(
                    lsp.TextDocumentItem(uri=uri, language_id="plaintext", version=1, text=text)
                )
            )
        elif kind == "change":  # also for a document never opened (out of order)
            h.versions[uri] = h.versions.get(uri, 0) + 1
            c.text_document_did_change(
                lsp.DidChangeTextDocumentParams(
                    lsp.VersionedTextDocumentIdentifier(uri=uri, version=h.versions[uri]),
                    [lsp.TextDocumentContentChangeWholeDocument(text=text)],
                )
            )
        else:
            path = (h.root / rel).resolve()
            if action[3] and path.is_relative_to(h.root.resolve()) and path.suffix in (".py", ".toml", ".cu"):
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(text, encoding="utf-8", errors="replace")
            c.text_document_did_save(lsp.DidSaveTextDocumentParams(lsp.TextDocumentIdentifier(uri), text=None))
    elif kind == "close":
        uri = _uri(h, action[1])
        h.versions.pop(uri, None)
        c.text_document_did_close(lsp.DidCloseTextDocumentParams(lsp.TextDocumentIdentifier(uri)))
    elif kind == "hover":
        await _request(
            h,
            c.text_document_hover_async(
                lsp.HoverParams(lsp.TextDocumentIdentifier(_uri(h, action[1])), lsp.Position(*action[2]))
            ),
        )
    elif kind == "lens":
        await _request(
            h, c.text_document_code_lens_async(lsp.CodeLensParams(lsp.TextDocumentIdentifier(_uri(h, action[1]))))
        )
    elif kind == "action":
        line, ch = action[2]
        diag = lsp.Diagnostic(
            lsp.Range(lsp.Position(line, 0), lsp.Position(line, ch)),
            "fuzz",
            source="gpuemu",
            code="mismatch",
            data=action[3] if isinstance(action[3], dict) else {"op": "double", "seed": 1},
        )
        await _request(
            h,
            c.text_document_code_action_async(
                lsp.CodeActionParams(
                    lsp.TextDocumentIdentifier(_uri(h, action[1])), diag.range, lsp.CodeActionContext([diag])
                )
            ),
        )
    elif kind == "discover":
        await _request(h, relkit.request(c, "gpuemu/discoverOps", {}))
    elif kind == "run":
        params, how = action[1], action[2]
        if params.get("workspace") == ".":
            params = {**params, "workspace": str(h.root)}
        if how == "wait":
            await _request(h, c.protocol.send_request_async("gpuemu/runOps", params), STEP_TIMEOUT)
        else:
            await _cancelled(h, "gpuemu/runOps", params, 0.0 if how == "cancel" else 0.4)
    elif kind == "command":
        args = action[2] if not isinstance(action[2], dict) else {**action[2], "workspace": str(h.root)}
        params = lsp.ExecuteCommandParams(command=action[1], arguments=[args])
        if action[3]:
            await _request(h, c.workspace_execute_command_async(params), STEP_TIMEOUT)
        else:
            await _cancelled(h, lsp.WORKSPACE_EXECUTE_COMMAND, params, 0.1)
    elif kind == "config":
        c.workspace_did_change_configuration(
            lsp.DidChangeConfigurationParams(
                settings={"gpuemu": action[1]} if isinstance(action[1], dict) else action[1]
            )
        )
    elif kind == "watched":
        c.workspace_did_change_watched_files(
            lsp.DidChangeWatchedFilesParams([lsp.FileEvent(uri=_uri(h, action[1]), type=lsp.FileChangeType(action[2]))])
        )
    elif kind == "folders":
        target = {"ws": h.root, "/nonexistent": Path("/nonexistent"), "sub": h.root / "sub dir"}[action[2]]
        folder = lsp.WorkspaceFolder(uri=target.as_uri(), name=target.name or "root")
        event = lsp.WorkspaceFoldersChangeEvent(
            added=[folder] if action[1] == "add" else [], removed=[folder] if action[1] == "remove" else []
        )
        c.workspace_did_change_workspace_folders(lsp.DidChangeWorkspaceFoldersParams(event))
    elif kind == "progress-cancel":
        c.window_work_done_progress_cancel(lsp.WorkDoneProgressCancelParams(token=action[1]))
    elif kind == "raw":
        await _send_raw(h, action[1])
    elif kind == "sleep":
        await asyncio.sleep(action[1])


async def still_answers(h: Harness) -> None:
    """The server is alive, answered every cancelled request, and answers a new one."""
    assert h.client._server.returncode is None, f"the server exited with {h.client._server.returncode}"
    pending, h.pending = h.pending, []
    if pending:
        done, left = await asyncio.wait(pending, timeout=STEP_TIMEOUT)
        assert not left, f"{len(left)} cancelled request(s) never answered"
        for f in done:
            f.exception()  # an error response (RequestCancelled) is an answer
    got = await relkit.request(h.client, "gpuemu/discoverOps", {}, timeout=STEP_TIMEOUT)
    assert isinstance(got, dict) and "workspaces" in got


FUZZ = settings(
    max_examples=MAX_EXAMPLES,
    deadline=None,
    phases=(Phase.explicit, Phase.generate),
    derandomize=not RANDOM,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
    print_blob=True,
)


@FUZZ
@given(steps=st.lists(actions, min_size=3, max_size=MAX_ACTIONS))
def test_random_lsp_traffic_never_kills_the_server(harness: Harness, steps: list[tuple[Any, ...]]) -> None:
    harness.examples += 1
    for step in steps:
        harness.run(act(harness, step))
        harness.steps += 1
    harness.run(still_answers(harness))
    assert relkit.alive(harness.pid)


@FUZZ
@given(
    steps=st.lists(
        st.one_of(
            st.tuples(st.just("raw"), st.sampled_from(MALFORMED)),
            st.tuples(
                st.just("raw"),
                st.binary(max_size=200).map(
                    lambda b: json.dumps(
                        {"jsonrpc": "2.0", "method": "textDocument/didChange", "params": b.decode("latin-1")}
                    ).encode()
                ),
            ),
            st.tuples(st.just("discover")),
            st.tuples(st.just("hover"), st.sampled_from(FILES), positions),
        ),
        min_size=1,
        max_size=MAX_ACTIONS,
    )
)
def test_malformed_json_rpc_never_kills_the_server(harness: Harness, steps: list[tuple[Any, ...]]) -> None:
    harness.examples += 1
    for step in steps:
        harness.run(act(harness, step))
        harness.steps += 1
    harness.run(still_answers(harness))


# --- params of the wrong shape, for every request the server handles -------------------------------------
INVALID_PARAMS, INVALID_REQUEST, INTERNAL_ERROR = -32602, -32600, -32603
#: Shapes no request of this server takes (each is sent to every request, and to every command as its
#: argument list): not an object, an empty or half object, a document that is no document, a URI that is
#: no URI, null where an object must be, negative positions.
POS = {"line": 0, "character": 0}
RNG = {"start": POS, "end": POS}
WRONG_SHAPES: list[Any] = [
    [],
    [1, 2],
    5,
    "text",
    True,
    {},
    {"textDocument": 5, "position": POS},
    {"textDocument": {"uri": "not a uri"}, "position": POS, "range": RNG, "context": {"diagnostics": []}},
    {"textDocument": {"uri": None}, "position": POS},
    {"textDocument": {"uri": "{toml}"}, "position": {"line": -5, "character": -1}},
    {"textDocument": {"uri": "{toml}"}, "range": None, "context": {"diagnostics": []}},
    {"textDocument": {"uri": "{toml}"}, "range": RNG, "context": None},
    {"textDocument": {"uri": "{toml}"}, "range": RNG, "context": {"diagnostics": [{"range": None}]}},
    {"textDocument": {"uri": "{toml}"}, "position": "0:0"},
]
#: Shapes of a known request's own keys that are wrong (runOps, discoverOps, executeCommand).
OWN_WRONG: dict[str, list[Any]] = {
    "gpuemu/runOps": [
        {"mode": "bogus"},
        {"mode": 3},
        {"iterations": 10**7},
        {"iterations": 0},
        {"iterations": -1},
        {"iterations": "many"},
        {"iterations": 2.5},
        {"ids": "op:double"},
        {"ids": [1, 2]},
        {"ops": {"double": True}},
        {"workspace": 5},
        {"workspace": ""},
    ],
    "workspace/executeCommand": [
        {"command": 5},
        {"command": "gpuemu.nothing", "arguments": []},
        {"command": "gpuemu.runOp", "arguments": 5},
        {"arguments": [{}]},
    ],
}
#: Argument lists of the wrong shape for each command (and WRONG_SHAPES as the one argument).
COMMAND_WRONG: list[list[Any]] = [
    [{}, {}],
    [{"op": 5}],
    [{"op": ""}],
    [{"op": "double", "seed": "x"}],
    [{"op": "double", "seed": -1}],
    [{"op": "double", "seed": 2**60}],
    [{"op": "double", "seed": True}],
    [{"op": "double", "mode": "bogus"}],
    [{"op": "double", "iterations": 0}],
    [{"op": "double", "iterations": 10**7}],
    [{"op": ["double"], "seed": 1}],
    [{"workspace": 7, "op": "double", "seed": 1}],
]
#: Requests a wrong shape must get InvalidParams for, whatever else (the cases the outside pass found).
MUST_BE_INVALID_PARAMS = [
    ("textDocument/hover", {}),
    ("textDocument/hover", {"textDocument": {"uri": "not a uri"}, "position": POS}),
    ("textDocument/codeAction", {"textDocument": {"uri": "{toml}"}, "range": None, "context": {"diagnostics": []}}),
    ("gpuemu/runOps", []),
    ("gpuemu/runOps", {"mode": "bogus"}),
    ("gpuemu/runOps", {"iterations": 10**7}),
    ("workspace/executeCommand", {"command": "gpuemu.runOp", "arguments": [5]}),
    ("workspace/executeCommand", {"command": "gpuemu.runAll", "arguments": [[]]}),
]


def handled_requests() -> tuple[set[str], set[str]]:
    """The requests and commands the server handles, read from the server itself (every feature it can
    register, pygls' built-in ones included), so a request added later is covered or this test fails."""
    from gpuemu_ls.features.registration import register_optional_features
    from gpuemu_ls.server import create_server

    server = create_server()
    server.protocol.client_capabilities = relkit.CAPS  # the client the live servers of this suite have
    register_optional_features(server)  # default options: every optional feature
    fm = server.protocol.fm
    requests = set()
    for method in {*fm.features, *fm.builtin_features}:
        types = lsp.METHOD_TO_TYPES.get(method)
        if (types is None and method.startswith("gpuemu/")) or (types is not None and types[1] is not None):
            requests.add(method)
    return requests, set(fm.commands)


class RawRequests:
    """Requests written as raw JSON-RPC (so any params at all can be sent), their answers read back."""

    def __init__(self, client: Any, toml_uri: str) -> None:
        self.client = client
        self.toml_uri = toml_uri
        self.n = 0
        self.sent: list[tuple[str, Any]] = []

    def fill(self, value: Any) -> Any:
        return json.loads(json.dumps(value).replace('"{toml}"', json.dumps(self.toml_uri)))

    async def send(self, method: str, params: Any, timeout: float = 30.0) -> tuple[str, Any]:
        """("result", value) or ("error", code); an AssertionError when no answer comes."""
        from concurrent.futures import Future

        from pygls.exceptions import JsonRpcException

        self.n += 1
        msg_id = f"shape-{self.n}"
        future: Future[Any] = Future()
        self.client.protocol._request_futures[msg_id] = future
        body = json.dumps({"jsonrpc": "2.0", "id": msg_id, "method": method, "params": self.fill(params)}).encode()
        self.client.protocol.writer.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        self.sent.append((method, params))
        try:
            return "result", await asyncio.wait_for(asyncio.wrap_future(future), timeout)
        except JsonRpcException as exc:
            return "error", exc.code
        except (asyncio.TimeoutError, TimeoutError):
            raise AssertionError(f"{method} with params {params!r} was never answered") from None


@pytest.mark.asyncio
async def test_every_request_answers_params_of_the_wrong_shape(tmp_path: Path) -> None:
    """Every request the server handles (LSP features, pygls built-ins, gpuemu/*, every executeCommand
    command), sent params of many wrong shapes, gets a response: a result or InvalidParams, never silence and
    never an internal error; nothing runs, and the server stays alive. A second ``initialize`` is refused;
    after ``shutdown`` every request is answered with an error, and ``exit`` still ends the process."""
    root = fuzz_ws(tmp_path / "ws")
    tag = relkit.new_tag()
    client = await relkit.start_server(root, env=relkit.child_env({relkit.TAG_VAR: tag}))
    relkit.record("server", started=1)
    raw = RawRequests(client, (root / "gpuemu.toml").resolve().as_uri())
    requests, commands = handled_requests()
    assert {"textDocument/hover", "gpuemu/runOps", "workspace/executeCommand", "shutdown"} <= requests, requests
    answers: dict[str, int] = {"result": 0, "error": 0}
    try:
        for method in sorted(requests - {"shutdown"}):
            for params in WRONG_SHAPES + OWN_WRONG.get(method, []):
                if params == {} and method.startswith("gpuemu/"):
                    continue  # no parameters at all: a valid discoverOps, a valid "run everything"
                kind, value = await raw.send(method, params)
                answers[kind] += 1
                if kind == "error":
                    allowed = (INVALID_PARAMS, INVALID_REQUEST) if method == "initialize" else (INVALID_PARAMS,)
                    assert value in allowed, f"{method} {params!r}: error {value}, not InvalidParams"
                else:
                    assert method not in ("gpuemu/runOps", "initialize"), f"{method} {params!r} was accepted"
        for command in sorted(commands):
            for args in [[shape] for shape in WRONG_SHAPES if shape != {}] + COMMAND_WRONG:
                kind, value = await raw.send(lsp.WORKSPACE_EXECUTE_COMMAND, {"command": command, "arguments": args})
                answers[kind] += 1
                assert (kind, value) == ("error", INVALID_PARAMS), f"{command} {args!r}: {kind} {value}"
        for method, params in MUST_BE_INVALID_PARAMS:
            assert await raw.send(method, params) == ("error", INVALID_PARAMS), (method, params)
        # a second initialize, even a well-formed one, is refused
        again = {"capabilities": {}, "initializationOptions": {"trusted": True}, "rootUri": raw.toml_uri}
        assert await raw.send("initialize", again) == ("error", INVALID_REQUEST)
        # requests without "jsonrpc", or of another version, are answered too
        for body in (
            {"id": "v1", "method": "textDocument/hover", "params": {}},
            {"jsonrpc": "1.0", "id": "v2", "method": "gpuemu/discoverOps", "params": {}},
        ):
            from concurrent.futures import Future

            future: Future[Any] = Future()
            client.protocol._request_futures[body["id"]] = future
            data = json.dumps(body).encode()
            client.protocol.writer.write(b"Content-Length: %d\r\n\r\n" % len(data) + data)
            with pytest.raises(Exception) as err:
                await asyncio.wait_for(asyncio.wrap_future(future), 30)
            assert getattr(err.value, "code", None) == INVALID_REQUEST, err.value
        assert await relkit.answers(client, root)
        assert relkit.alive(client.server_pid)
        assert relkit.worker_pids(client.server_pid) == [], "a request of the wrong shape started a run"
        assert not db_path(root).exists(), "a request of the wrong shape ran an op"
        # shutdown with params of a wrong shape: answered; afterwards every request gets an error; exit ends it
        kind, _ = await raw.send("shutdown", [1, 2])
        assert kind in ("result", "error")
        if kind == "error":
            assert await raw.send("shutdown", None) == ("result", None)
        hover = {"textDocument": {"uri": "{toml}"}, "position": POS}
        for method, params in (("textDocument/hover", hover), ("gpuemu/discoverOps", {}), ("gpuemu/runOps", {})):
            assert await raw.send(method, params) == ("error", INVALID_REQUEST), method
        client.exit(None)
        await asyncio.wait_for(client._server.wait(), 10)
        code = client._server.returncode
    finally:
        await relkit.force_close(client)
    total = sum(answers.values())
    relkit.record("fuzz", steps=total + len(MUST_BE_INVALID_PARAMS) + 6, examples=1)
    relkit.clean_exit(code)
    assert relkit.wait_gone(relkit.tagged(tag), 10) == []
    assert answers["error"] > 0 and total >= 100, answers


@pytest.mark.asyncio
@pytest.mark.parametrize("weird_id", [{"weird": True}, [1, 2], True], ids=["object", "array", "boolean"])
async def test_a_request_whose_id_is_no_string_or_number_is_answered_with_a_null_id(
    tmp_path: Path, weird_id: Any
) -> None:
    """JSON-RPC 2.0: ids are strings or numbers; an id that cannot be one is answered with ``"id": null``
    (InvalidRequest), never echoed back (a client keys its pending requests by id: a dict id crashed
    pytest-lsp's reader) and never left unanswered. The server keeps serving."""
    from concurrent.futures import Future

    from pygls.exceptions import JsonRpcException

    root = fuzz_ws(tmp_path / "ws")
    client = await relkit.start_server(root, {**relkit.QUIET, "onOpen": False})
    try:
        future: Future[Any] = Future()
        client.protocol._request_futures[None] = future  # the answer to an unreadable id
        body = json.dumps({"jsonrpc": "2.0", "id": weird_id, "method": "gpuemu/discoverOps", "params": {}}).encode()
        client.protocol.writer.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        with pytest.raises(JsonRpcException) as err:
            await asyncio.wait_for(asyncio.wrap_future(future), 30)
        assert err.value.code == INVALID_REQUEST
        assert relkit.alive(client.server_pid)
        found = await client.protocol.send_request_async("gpuemu/discoverOps", {})
        assert [w["root"] for w in found["workspaces"]] == [str(root.resolve())]
    finally:
        assert await relkit.stop_server(client) == 0
