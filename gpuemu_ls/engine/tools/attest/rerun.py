"""The child process of ``gpuemu verify --replay``: run given seeds of given ops of a workspace (a checkout of
the recorded commit), inputs regenerated from (op, seed), nothing stored, and write each case's verdict.

``python -m gpuemu_ls.engine.tools.attest.rerun REQUEST.json ANSWER.json``; the request is
``{"workspace": path, "ops": {name: {"seeds": [...], "plan": n}}}``, the answer
``{"ops": {name: {"cases": [{seed, status, kind, message}], "error": text|null}}}``. A file, not stdout,
carries the answer: an op may print whatever it likes.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from ...config.load import load_config
from ...errors import ConfigError, GpuemuError
from ...replace_file import replace_file
from ...run.validate import RunOptions, replay_spec, run_validation


def _first_line(text: str) -> str:
    lines = (text or "").strip().splitlines()
    return lines[0][:300] if lines else ""


def rerun(request: dict[str, Any]) -> dict[str, Any]:
    try:
        cfg = load_config(Path(request["workspace"]))
    except ConfigError as exc:
        return {"error": f"the recorded commit's configuration does not load: {_first_line(str(exc))}", "ops": {}}
    out: dict[str, Any] = {}
    for name, want in request["ops"].items():
        try:
            op = cfg.op(name)
        except KeyError:
            out[name] = {"error": f"no op {name!r} in the recorded commit's gpuemu.toml", "cases": []}
            continue
        if not op.runnable:
            out[name] = {"error": f"a {op.execution_mode} op runs in its client's process, not here", "cases": []}
            continue
        try:  # plan 0 (the op lists its distributions) draws alike under every plan: the current one
            plan = want.get("plan") or None
            specs = [replay_spec(cfg, op, s, None, regenerate=True, plan=plan)[0] for s in want["seeds"]]
        except GpuemuError as exc:
            out[name] = {"error": _first_line(str(exc)), "cases": []}
            continue
        options = RunOptions(mode="reproduce", ops=[name], source="replay", command="gpuemu verify --replay")
        options.store = False
        outcome = run_validation(cfg, options, specs_by_op={name: specs}).outcomes[0]
        cases = [
            {"seed": c.seed, "status": c.status, "kind": c.kind, "message": _first_line(c.message)}
            for c in outcome.cases
        ]
        out[name] = {"error": None if cases else _first_line(outcome.message) or outcome.status, "cases": cases}
    return {"error": None, "ops": out}


def main(argv: list[str]) -> int:
    request = json.loads(Path(argv[0]).read_text(encoding="utf-8"))
    replace_file(argv[1], json.dumps(rerun(request)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
