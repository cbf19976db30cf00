"""A forked script call, with and without a spare child set up ahead of it (real forks of this process).

What a user relies on: each call sees exactly its own request and answers exactly what it wrote, runs
only when its call comes (a spare never runs the script early or twice), starts from a fresh state, and
neither a spare nor a descendant holding the call's pipes outlives or stalls the call.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest

from gpuemu_ls.engine.run import contain, scriptfork

pytestmark = pytest.mark.skipif(not scriptfork.available() or sys.platform != "linux", reason="forks on Linux")


def _explain(exc: BaseException) -> dict[str, object]:
    return {"message": f"{type(exc).__name__}: {exc}", "file": None, "line": None}


def _script(tmp_path: Path, text: str) -> tuple[object, Path]:
    path = tmp_path / "script.py"
    path.write_text(text, encoding="utf-8")
    return compile(text, str(path), "exec"), path


@pytest.fixture(params=[False, True], ids=["fork-per-call", "spare"])
def fork(request: pytest.FixtureRequest):
    sf = scriptfork.ScriptFork()
    sf.prefork = request.param
    yield sf
    sf.close()


def _children() -> set[int]:
    return set(contain.children(os.getpid()))


def _descendants() -> set[int]:
    return set(contain.descendants(os.getpid()))


def test_each_call_answers_exactly_what_it_wrote(tmp_path: Path, fork: scriptfork.ScriptFork) -> None:
    """A long answer, then a short one: nothing of the first is left behind the second (the in-memory file is
    reused, not emptied, between calls)."""
    code, path = _script(tmp_path, "import sys\nn = int(sys.stdin.read())\nsys.stdout.write('a' * n)\n")
    for n in (100_000, 10, 0, 70_000, 3):
        ended = fork.run(code, path, [str(n).encode()], _explain, 1000)
        assert ended.error is None and ended.status == 0
        assert ended.stdout == "a" * n
    request = [b"x" * 50_000, b"y" * 7]
    code, path = _script(tmp_path, "import sys\nsys.stdout.write(sys.stdin.read())\n")
    assert fork.run(code, path, request, _explain, 1000).stdout == "x" * 50_000 + "y" * 7
    assert fork.run(code, path, [b"z"], _explain, 1000).stdout == "z"  # a shorter request replaces it whole


def test_the_script_runs_once_per_call_and_only_then(tmp_path: Path, fork: scriptfork.ScriptFork) -> None:
    """A spare is set up ahead of its call but runs nothing of the script until the call comes: a script that
    appends a line per run leaves one line per call, also after the spare is sent away."""
    log = tmp_path / "runs.log"
    code, path = _script(
        tmp_path,
        f"import os, sys\nwith open({str(log)!r}, 'a') as fh:\n"
        "    fh.write(f'{os.getpid()} {sys.stdin.read()}\\n')\n",
    )
    for i in range(4):
        fork.run(code, path, [str(i).encode()], _explain, 1000)
        time.sleep(0.05)  # a spare that ran early would have written by now
        lines = log.read_text().splitlines()
        assert [line.split()[1] for line in lines] == [str(k) for k in range(i + 1)]
    assert len({line.split()[0] for line in lines}) == 4  # a process of its own for each call
    if fork.prefork:
        assert fork.spare is not None and fork.spare.pid in _children()
    spare = fork.spare.pid if fork.spare else None
    fork.close()
    assert len(log.read_text().splitlines()) == 4
    if spare is not None:
        assert spare not in _children()
        with pytest.raises(ChildProcessError):
            os.waitpid(spare, os.WNOHANG)  # reaped, not left a zombie


def test_every_call_starts_from_a_fresh_state(tmp_path: Path, fork: scriptfork.ScriptFork) -> None:
    """Module state a call leaves (a helper's counter, __main__, builtins) is not there for the next one."""
    (tmp_path / "counter_helper.py").write_text("calls = 0\n", encoding="utf-8")
    code, path = _script(
        tmp_path,
        "import builtins, counter_helper\n"
        "counter_helper.calls += 1\n"
        "builtins.gpuemu_seen = getattr(builtins, 'gpuemu_seen', 0) + 1\n"
        "print(counter_helper.calls, builtins.gpuemu_seen)\n",
    )
    answers = [fork.run(code, path, [b""], _explain, 1000).stdout for _ in range(5)]
    assert answers == ["1 1\n"] * 5


def test_a_spare_killed_before_its_call_is_replaced(tmp_path: Path) -> None:
    """A spare that died while it waited (killed from outside) does not make the call fail: a fresh child runs it."""
    sf = scriptfork.ScriptFork()
    sf.prefork = True
    try:
        code, path = _script(tmp_path, "import sys\nprint(sys.stdin.read() * 2)\n")
        assert sf.run(code, path, [b"ab"], _explain, 1000).stdout == "abab\n"
        assert sf.spare is not None
        os.kill(sf.spare.pid, signal.SIGKILL)
        time.sleep(0.05)
        ended = sf.run(code, path, [b"cd"], _explain, 1000)
        assert (ended.status, ended.error, ended.stdout) == (0, None, "cdcd\n")
        code2, path2 = _script(tmp_path / "..", "print('other script')\n")  # a spare set up for another script
        assert sf.run(code2, path2, [b""], _explain, 1000).stdout == "other script\n"
    finally:
        sf.close()


def test_a_descendant_holding_the_pipes_does_not_stall_the_call(tmp_path: Path, fork: scriptfork.ScriptFork) -> None:
    """The call ends with its script's report, even when something it forked keeps every inherited fd open (the
    worker's pipes included); that leftover is killed with the call."""
    code, path = _script(
        tmp_path,
        "import os, sys, time\nif os.fork() == 0:\n    time.sleep(30)\n    os._exit(0)\nprint('answered')\n",
    )
    before = _descendants()
    t0 = time.monotonic()
    ended = fork.run(code, path, [b""], _explain, 1000)
    assert time.monotonic() - t0 < 10
    assert ended.stdout == "answered\n"

    def left() -> set[int]:
        return _descendants() - before - {p for p in (fork.pending, fork.spare and fork.spare.pid) if p}

    deadline = time.monotonic() + 5
    while left() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert left() == set()
