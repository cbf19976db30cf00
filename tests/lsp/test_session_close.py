"""Shutting the server down while a store refresh runs on another thread must not crash the process.

Closing a SQLite connection that another thread is reading crashes CPython's sqlite3 module (SIGSEGV);
the session closes its connection under the lock its refreshes hold, and never reopens it afterwards.
Run in a subprocess, so a crash is an exit status, not a dead test runner.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from kit.ops import op_toml
from kit.workspace import write_ws

SCRIPT = textwrap.dedent(
    """
    import sys, threading
    from pathlib import Path
    from gpuemu_ls.engine.config.load import load_config
    from gpuemu_ls.engine.run.validate import RunOptions, run_validation
    from gpuemu_ls.session.workspace import WorkspaceSession

    root = Path(sys.argv[1])
    run_validation(load_config(root), RunOptions(mode="quick", iterations=4))  # something to read
    for _ in range(30):
        s = WorkspaceSession(root)
        s.load()
        stop = threading.Event()

        def reader():
            while not stop.is_set():
                s.refresh()

        threads = [threading.Thread(target=reader) for _ in range(2)]
        for t in threads:
            t.start()
        s.refresh()
        s.close()  # as the server's shutdown does, while the readers run
        stop.set()
        for t in threads:
            t.join()
        assert s.store() is None  # closed for good: a late refresh does not reopen it
    print("ok")
    """
)

TOML = op_toml("double", module="ops:double", reference="ops:double", inputs={"x": ["N"]}, dims={"N": (1, 64, 8)})


def test_closing_a_session_while_refreshes_read_its_store(tmp_path: Path) -> None:
    write_ws(tmp_path, TOML, {"ops.py": "def double(x):\n    return x * 2\n"})
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path)], capture_output=True, text=True, timeout=300, check=False
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", (proc.returncode, proc.stderr[-3000:])
