"""docs/first-op.md is run as written (issue 15, item 4): from an empty folder, every file block is
written and every command run in order, each with the exit status the guide states (`# exit N`).

File blocks are fenced with `file=PATH` (write) or `append=PATH` (append); command blocks are `sh`, one
command per line. A `<!-- requires: mod ... -->` line skips the rest of its section where a module is
missing (the Triton part needs torch and triton).
"""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "first-op.md"
FENCE = re.compile(r"^```(\w+)?(?: (file|append)=(\S+))?\s*$")
REQUIRES = re.compile(r"^<!-- requires: (.+) -->$")


def steps(text: str) -> list[tuple[str, ...]]:
    """("write"|"append", path, content), ("run", command, expected exit), ("skip", reason) in order."""
    out: list[tuple[str, ...]] = []
    lines = text.splitlines()
    i = 0
    missing: list[str] = []
    while i < len(lines):
        line = lines[i]
        if line.startswith("## "):
            missing = []
        m = REQUIRES.match(line)
        if m:
            missing = [mod for mod in m.group(1).split() if importlib.util.find_spec(mod) is None]
        m = FENCE.match(line)
        if m and (m.group(1) or m.group(2)):
            body = []
            i += 1
            while not lines[i].startswith("```"):
                body.append(lines[i])
                i += 1
            if missing:
                out.append(("skip", f"needs {', '.join(missing)}"))
            elif m.group(2):
                out.append(("write" if m.group(2) == "file" else "append", m.group(3), "\n".join(body) + "\n"))
            elif m.group(1) == "sh":
                for cmd in body:
                    code = re.search(r"#\s*exit (\d+)", cmd)
                    out.append(("run", cmd.split("#")[0].strip(), code.group(1) if code else "0"))
        i += 1
    return out


def test_the_first_op_guide_runs_as_written(tmp_path: Path) -> None:
    todo = steps(GUIDE.read_text(encoding="utf-8"))
    runs = [s for s in todo if s[0] == "run"]
    assert len(runs) >= 8 and any(s[0] == "write" for s in todo), todo  # the parser found the guide's steps
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUEMU_", "PYTEST_"))}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["GPUEMU_USER_CONFIG"] = os.devnull + "/none.toml"
    ws = tmp_path / "first-op"
    ws.mkdir()
    log = []
    for step in todo:
        if step[0] in ("write", "append"):
            path = ws / step[1]
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "w" if step[0] == "write" else "a", encoding="utf-8") as fh:
                fh.write(step[2])
        elif step[0] == "run":
            proc = subprocess.run(
                shlex.split(step[1]), cwd=ws, env=env, capture_output=True, text=True, timeout=600, check=False
            )
            log.append(f"$ {step[1]} -> {proc.returncode}")
            assert proc.returncode == int(step[2]), "\n".join(log) + f"\n{proc.stdout}\n{proc.stderr}"
            if "--op scale_rows" in step[1]:  # a backward that ignores the upstream gradient: grad_x is wrong
                assert "(worst output grad_x)" in proc.stdout and "worst output grad_s" not in proc.stdout, proc.stdout
            elif step[1].startswith("gpuemu test --quick") and step[2] == "1" and "rowsum_triton" not in step[1]:
                assert re.search(r"fails (iff|only if) N % 64 != 0", proc.stdout), proc.stdout
                assert "replay: gpuemu reproduce --op rowsum --seed 4" in proc.stdout, proc.stdout
            if "--op rowsum_triton" in step[1] and step[2] == "1":
                assert "fails only if layout != contiguous" in proc.stdout, proc.stdout
            if step[1].startswith("gpuemu minimize"):
                assert "minimized: {'x': [1, 1]}" in proc.stdout, proc.stdout
