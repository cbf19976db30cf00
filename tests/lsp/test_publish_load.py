"""What keeps the server's diagnostics cheap while 1,000 ops validate (issue 31, benchmark 15), and still right:
each failing op's diagnostics are kept until its entry, its verdict or a file they were placed by changes; and
rebuilds after runs end are spaced, while an ask that is not a reread (a config edit) is never held back.
A real validation run, a real store and real Publisher threads."""

from __future__ import annotations

import gc
import os
import threading
import time
import weakref
from concurrent.futures import Future
from pathlib import Path

import pytest
from kit.ops import op_toml
from kit.workspace import write_ws

from gpuemu_ls.diagnostics.diagnostics import workspace_diagnostics
from gpuemu_ls.diagnostics.ranges import op_header_range
from gpuemu_ls.engine.config.load import load_config
from gpuemu_ls.engine.run.validate import RunOptions, run_validation
from gpuemu_ls.session import publisher
from gpuemu_ls.session.publisher import Publisher
from gpuemu_ls.session.workspace import WorkspaceSession

OPS = (
    "import numpy as np\n\n\ndef scaled(x):\n    return (x * np.float32(1.01)).astype(x.dtype)\n\n\n"
    "def ref(x):\n    return x\n"
)
TOML = op_toml("scaled", module="ops:scaled", reference="ops:ref", inputs={"x": ["N"]}, dims={"N": (1, 64, 8)})


def _lines_of(diags: dict[Path, list], file: Path) -> list[int]:
    return [d.range.start.line for d in diags.get(file.resolve(), [])]


def _failing_session(root: Path) -> WorkspaceSession:
    """A session of one op that fails, its run stored and read."""
    write_ws(root, TOML, {"ops.py": OPS})
    run_validation(load_config(root), RunOptions(mode="quick", iterations=4))
    s = WorkspaceSession(root)
    s.load()
    s.refresh()
    return s


def test_a_kept_diagnostic_follows_its_function_when_the_file_changes(tmp_path: Path) -> None:
    s = _failing_session(tmp_path)
    ops = tmp_path / "ops.py"
    first = workspace_diagnostics(s)
    assert _lines_of(first, ops) == [3]  # `def scaled` on line 4
    again = workspace_diagnostics(s)
    assert _lines_of(again, ops) == [3] and again[ops.resolve()][0] is first[ops.resolve()][0]  # kept, not rebuilt
    ops.write_text("# a header\n# of three\n# lines\n" + OPS)
    st = ops.stat()
    os.utime(ops, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))  # a new mtime even on a coarse clock
    assert _lines_of(workspace_diagnostics(s), ops) == [6]  # the function moved down three lines: so does its error
    s.close()


def test_a_kept_diagnostic_moves_to_a_module_that_appears(tmp_path: Path) -> None:
    """A failing op whose module was missing shows on its entry; once the module exists, on its function."""
    s = _failing_session(tmp_path)
    ops = tmp_path / "ops.py"
    ops.rename(tmp_path / "gone.py")
    assert _lines_of(workspace_diagnostics(s), ops) == []
    (tmp_path / "gone.py").rename(ops)
    assert _lines_of(workspace_diagnostics(s), ops) == [3]
    s.close()


def test_header_ranges_are_made_once_per_config_and_never_keep_it_alive(tmp_path: Path) -> None:
    """Code lenses ask for every op's header range at each refresh: made once per config, and a config the
    session let go (tens of megabytes at 1,000 ops) is not kept for them."""
    write_ws(tmp_path, TOML, {"ops.py": OPS})
    cfg = load_config(tmp_path)
    first = op_header_range(cfg, cfg.ops[0])
    header = (tmp_path / "gpuemu.toml").read_text().splitlines().index("[[ops]]")
    assert first.start.line == header and op_header_range(cfg, cfg.ops[0]) is first
    gone = weakref.ref(cfg)
    del cfg
    gc.collect()
    assert gone() is None


class _Recorder:
    def __init__(self) -> None:
        self.built: list[tuple[float, bool]] = []
        self.lock = threading.Lock()

    def deliver(self, session: WorkspaceSession, built: object, reread: bool) -> None:
        with self.lock:
            self.built.append((time.monotonic(), reread))


def test_rebuilds_after_runs_end_are_spaced_and_a_config_edit_is_not_held_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(publisher, "REREAD_INTERVAL", 3.0)
    rec = _Recorder()
    s = WorkspaceSession(tmp_path)
    pub = Publisher(lambda session: None, rec.deliver)
    try:
        pub.request(s, reread=True).result(10)  # the first after a quiet spell: at once
        start = time.monotonic()
        second: Future[None] = pub.request(s, reread=True)
        time.sleep(0.3)
        assert not second.done()  # a run ended again: held until the interval has passed
        pub.request(s).result(2.5)  # a config edit meanwhile: built now, well inside the interval
        assert [r for _, r in rec.built] == [True, True]  # ... with the held reread merged into it
        assert second.done()
        pub.request(s, reread=True).result(10)
        assert rec.built[-1][0] - rec.built[-2][0] >= 3.0 - 0.01, rec.built
        assert rec.built[1][0] - start < 2.5
    finally:
        pub.close()
