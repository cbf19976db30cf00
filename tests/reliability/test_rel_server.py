"""Server findings made deterministic: sequences the protocol fuzzer and the config catalogue ran into.

Each test replays one such sequence against a real server and states what a user must see.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import relkit


@pytest.mark.asyncio
async def test_opening_a_config_changed_on_disk_shows_its_errors(tmp_path: Path) -> None:
    relkit.record("config", cases=1)
    root = relkit.good_ws(tmp_path / "ws")
    client = await relkit.start_server(root)  # watch off: the server learns of the file when it is opened
    relkit.record("server", started=1)
    try:
        got = await relkit.request(client, "gpuemu/discoverOps", {})
        assert [len(w["items"]) for w in got["workspaces"]] == [1]
        toml = root / "gpuemu.toml"
        broken = toml.read_text().replace('name = "double"', 'name = "double"\nbogus = 1')
        toml.write_text(broken)
        relkit.open_doc(client, toml, broken)
        line = relkit.line_of(toml, "bogus = 1")
        await relkit.wait_for(
            lambda: [
                d for d in relkit.diags(client, toml) if d.code == "config-error" and d.range.start.line + 1 == line
            ],
            5,
            "the config error of the opened file",
            client,
        )
    finally:
        code = await relkit.stop_server(client)
        relkit.record("server", unexpected_exits=int(code != 0))


@pytest.mark.asyncio
async def test_minimize_of_a_passing_case_answers_with_a_clear_error(tmp_path: Path) -> None:
    root = relkit.good_ws(tmp_path / "ws")
    client = await relkit.start_server(root)
    relkit.record("server", started=1)
    try:
        try:
            res = await relkit.execute(client, "gpuemu.minimize", {"workspace": str(root), "op": "double", "seed": 0})
        except Exception as exc:  # a JSON-RPC error response
            res = {"internal": str(exc)}
        assert await relkit.answers(client, root)
        assert isinstance(res, dict) and "passes" in str(res.get("error", "")), res
    finally:
        code = await relkit.stop_server(client)
        relkit.record("server", unexpected_exits=int(code != 0))


@pytest.mark.asyncio
async def test_cancelled_run_request_is_answered_and_stops_its_workers(tmp_path: Path) -> None:
    """$/cancelRequest of gpuemu/runOps: the request is still answered, the run's worker is killed, the server
    answers, and the next run works."""
    root = relkit.write_ws(
        tmp_path / "ws",
        relkit.HEADER.format(name="c", validation="timeout = 60\n", quick=3)
        + relkit.op_block("slow", 'module = "kern:slow"\nreference = "kern:reference"'),
        {"kern.py": relkit.GOOD_PY + "\n\ndef slow(x):\n    import time\n    time.sleep(30)\n    return x * 2\n"},
    )
    tag = relkit.new_tag()
    client = await relkit.start_server(root, env=relkit.child_env({relkit.TAG_VAR: tag}))
    relkit.record("server", started=1)
    try:
        fut = asyncio.ensure_future(
            client.protocol.send_request_async("gpuemu/runOps", {"ids": ["op:slow"]}, msg_id="to-cancel")
        )
        await relkit.wait_for(lambda: relkit.worker_pids(client.server_pid), 60, "a worker", client)
        workers = relkit.worker_pids(client.server_pid)
        from lsprotocol import types as lsp

        client.cancel_request(lsp.CancelParams(id="to-cancel"))
        try:
            got = await asyncio.wait_for(fut, 60)
        except (asyncio.TimeoutError, TimeoutError):
            raise AssertionError("the cancelled request was never answered") from None
        except Exception as exc:  # RequestCancelled is an answer
            got = {"error": str(exc)}
        assert got is not None
        assert relkit.wait_gone(workers, 15) == [], "the cancelled run's worker is still running"
        assert await relkit.answers(client, root)
        code = await relkit.stop_server(client)
    finally:
        await relkit.force_close(client)
    relkit.record("server", unexpected_exits=int(code != 0))
    assert code == 0
    assert relkit.wait_gone(relkit.tagged(tag), 15) == []
