"""SARIF 2.1.0: failures located in the user's files so code scanning annotates the diff.

Each failing op gives one result per failure kind, located at the op's function (or script), with
the op's ``[[ops]]`` entry in gpuemu.toml as a related location; lint findings sit on their ``.cu``
line. URIs are relative to ``%SRCROOT%``: the root of the git repository the workspace is in (the checkout
code scanning maps a result to, so a workspace in a subfolder gives ``kernels/ops.py``, not ``ops.py``), or
the workspace itself outside a repository. A file outside that root is an absolute ``file:`` URI.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..lines import KIND_TEXT
from .text import edge_line, failure_text

INFO_URI = "https://pypi.org/project/gpuemu-ls/"


def _loc(loc: dict[str, Any] | None, message: str | None = None, ident: int | None = None) -> dict[str, Any] | None:
    if not loc or not loc.get("file"):
        return None
    region: dict[str, Any] = {"startLine": max(1, int(loc.get("line") or 1))}
    if loc.get("column"):
        region["startColumn"] = max(1, int(loc["column"]))
    out: dict[str, Any] = {
        "physicalLocation": {
            "artifactLocation": {"uri": Path(loc["file"]).as_posix(), "uriBaseId": "%SRCROOT%"},
            "region": region,
        }
    }
    if message:
        out["message"] = {"text": message}
    if ident is not None:
        out["id"] = ident
    return out


def source_root(workspace: Path) -> Path:
    """The root of the git repository holding ``workspace`` (a ``.git`` folder, or the ``.git`` file of a
    worktree or submodule), else the workspace."""
    for folder in (workspace, *workspace.parents):
        if (folder / ".git").exists():
            return folder
    return workspace


def _rebase(artifact: dict[str, Any], workspace: Path, root: Path) -> None:
    """A workspace-relative URI made relative to ``root``; an absolute path outside it a ``file:`` URI."""
    path = Path(artifact["uri"])
    full = path if path.is_absolute() else workspace / path
    try:
        artifact["uri"] = full.resolve().relative_to(root).as_posix()
    except ValueError:
        artifact["uri"] = full.resolve().as_uri()
        artifact.pop("uriBaseId", None)


class _Rules:
    def __init__(self) -> None:
        self.rules: list[dict[str, Any]] = []
        self.index: dict[str, int] = {}

    def get(self, rule_id: str, text: str, level: str) -> int:
        if rule_id not in self.index:
            self.index[rule_id] = len(self.rules)
            self.rules.append(
                {
                    "id": rule_id,
                    "name": rule_id.split("/")[-1].replace("-", "_"),
                    "shortDescription": {"text": text},
                    "helpUri": INFO_URI,
                    "defaultConfiguration": {"level": level},
                }
            )
        return self.index[rule_id]


NOT_JUDGED = ("out_of_range", "out_of_range_cases", "suspect_nan", "suspect_cases")


def render_sarif(doc: dict[str, Any]) -> str:
    rules = _Rules()
    results: list[dict[str, Any]] = []
    for e in doc["ops"]:
        if e["status"] == "passed":
            continue
        primary = _loc(e.get("source")) or _loc(e.get("location"))
        related = [
            x
            for x in (
                _loc(e.get("location"), f"op {e['name']} in {doc.get('config', 'gpuemu.toml')}", 1),
                _loc(e.get("reference_source"), "its reference", 2),
            )
            if x
        ]
        by_kind: dict[str, list[dict[str, Any]]] = {}
        for f in e["failures"]:  # an edge finding is a warning of its own rule (an error when strict fails it)
            by_kind.setdefault("edge-finding" if f.get("tier") == "edge" else f["kind"], []).append(f)
        if not by_kind:
            kind = (
                "not-run"
                if e["status"] == "not_run"
                else "not-judged"
                if e["status"] == "not_judged"
                else (e.get("setup_error") or {}).get("kind", "error")
            )
            rid = f"gpuemu/{kind}"
            results.append(
                {
                    "ruleId": rid,
                    "ruleIndex": rules.get(
                        rid, KIND_TEXT.get(kind, kind), "warning" if e["status"] == "not_run" else "error"
                    ),
                    "level": "warning" if e["status"] == "not_run" else "error",
                    "message": {"text": f"op {e['name']}: {e.get('reason') or e.get('message', '')}"[:2000]},
                    "locations": [primary] if primary else [],
                    "relatedLocations": related,
                    "partialFingerprints": {"gpuemuOp/v1": f"{e['name']}:{kind}"},
                    "properties": {"op": e["name"], "status": e["status"]},
                }
            )
            continue
        for kind, fails in by_kind.items():
            f = fails[0]
            rid = f"gpuemu/{kind}"
            edge = kind == "edge-finding"
            level = "error" if not edge or e.get("strict") else "warning"
            what = "edge finding" if edge else KIND_TEXT.get(kind, kind)
            text = f"op {e['name']}: {what} in {len(fails)} case(s). " + failure_text(e["name"], f)
            if edge:
                text += f"\n{edge_line(e)}"
            elif e.get("diagnosis"):
                text += f"\nDiagnosis: {e['diagnosis']}"
            loc = primary
            if f.get("file") and f.get("line"):
                loc = _loc({"file": f["file"], "line": f["line"]}) or primary
            results.append(
                {
                    "ruleId": rid,
                    "ruleIndex": rules.get(rid, what, "warning" if edge else "error"),
                    "level": level,
                    "message": {"text": text[:4000]},
                    "locations": [loc] if loc else [],
                    "relatedLocations": related,
                    "partialFingerprints": {"gpuemuOp/v1": f"{e['name']}:{kind}"},
                    "properties": {
                        k: f.get(k)
                        for k in ("seed", "dtype", "shapes", "layout", "distribution", "replay", "max_abs", "tolerance")
                    }
                    | {"op": e["name"]},
                }
            )
    for k in doc["kernels"]:
        for f in k.get("findings", []):
            level = {"error": "error", "warning": "warning"}.get(f.get("severity"), "note")
            rid = f"gpuemu-lint/{f.get('code', 'finding')}"
            loc = _loc({"file": f.get("file"), "line": f.get("line"), "column": f.get("column")})
            results.append(
                {
                    "ruleId": rid,
                    "ruleIndex": rules.get(rid, f"CUDA lint: {f.get('code')}", level),
                    "level": level,
                    "message": {"text": f"kernel {k['name']}: {f.get('message')}"},
                    "locations": [loc] if loc else [],
                    "partialFingerprints": {"gpuemuKernel/v1": f"{k['name']}:{f.get('code')}"},
                    "properties": {"kernel": k["name"]},
                }
            )
        if k["status"] in ("not_run", "error") and not k.get("findings"):
            rid = f"gpuemu-lint/{k['status'].replace('_', '-')}"
            loc = _loc(k.get("source"))
            results.append(
                {
                    "ruleId": rid,
                    "ruleIndex": rules.get(rid, f"kernel {k['status']}", "warning"),
                    "level": "warning",
                    "message": {"text": f"kernel {k['name']}: {k.get('message', '')}"},
                    "locations": [loc] if loc else [],
                }
            )
    for r in doc.get("regressions", []):
        rid = "gpuemu/regression"
        level = "error" if doc.get("fail_on_regression") else "warning"
        loc = _loc(r.get("location"))
        results.append(
            {
                "ruleId": rid,
                "ruleIndex": rules.get(rid, "regression against the baseline", level),
                "level": level,
                "message": {"text": f"{r['kind']} {r['name']}: {r['reason']}"},
                "locations": [loc] if loc else [],
            }
        )
    workspace = Path(doc["workspace"]).resolve()
    root = source_root(workspace)
    done: set[int] = set()  # results share location objects (a failure without its own file is at the op's)
    for result in results:
        for loc in [*result.get("locations", []), *result.get("relatedLocations", [])]:
            artifact = loc["physicalLocation"]["artifactLocation"]
            if id(artifact) not in done:
                done.add(id(artifact))
                _rebase(artifact, workspace, root)
    root_uri = root.as_uri() + "/"
    log = {
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "gpuemu-ls",
                        "version": doc["tool"]["version"],
                        "informationUri": INFO_URI,
                        "rules": rules.rules,
                    }
                },
                "originalUriBaseIds": {"%SRCROOT%": {"uri": root_uri}},
                "results": results,
                "invocations": [
                    {
                        "executionSuccessful": doc["status"] in ("passed", "failed", "edge", "not_judged"),
                        "exitCode": int(doc.get("exit_code", 0)),
                    }
                ],
                "properties": {
                    "mode": doc.get("mode"),
                    "seed": doc.get("seed"),
                    "shard": doc.get("shard"),
                    # neither passed nor failed, shown all the same: elements out of range, suspect references
                    "notJudged": {
                        e["name"]: {k: e["stats"][k] for k in NOT_JUDGED if (e.get("stats") or {}).get(k)}
                        for e in doc["ops"]
                        if any((e.get("stats") or {}).get(k) for k in NOT_JUDGED)
                    },
                },
            }
        ],
    }
    return json.dumps(log, indent=2)
