"""Results -> LSP diagnostics, per file, for one workspace.

Where they go: config problems at their position in gpuemu.toml; each kind of failure of an op once: on
the op function (or script), on the exact line an exception or crash came from, or on the reference when
the reference failed, with the ``[[ops]]`` entry as related information (on the entry only for an op with
no code in the workspace); lint findings and nvcc messages on their ``.cu`` lines.
``code`` is the failure kind (stable), ``data`` carries op, seed, dtype, shapes, layout and what the
code actions need.
"""

from __future__ import annotations

import ast
import json
import os
import re
import threading
import weakref
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lsprotocol import types as lsp

from ..engine.config.model import Config, OpConfig, is_callable_ref
from ..engine.config.modules import module_candidates
from ..engine.errors import Problem
from ..engine.report.lines import KIND_TEXT, replay_command, row_plan
from ..session.workspace import OpView, WorkspaceSession
from .ranges import kernel_header_range, line_range, op_header_range, op_target, problem_range, reference_target

SOURCE = "gpuemu"
NUMERIC = ("mismatch", "unexpected_nan", "unexpected_inf", "missing_nan")


def _severity(status: str) -> lsp.DiagnosticSeverity:
    """Red for what fails the op; a warning for what does not (an edge finding) or did not run."""
    return lsp.DiagnosticSeverity.Warning if status in ("not_run", "edge") else lsp.DiagnosticSeverity.Error


#: Where a view's case row keeps its parsed ``detail``: an op's diagnostics, hover and code actions read each of
#: its failing rows' detail several times, and every rebuild of the workspace's diagnostics read them all again
#: (parsing them was most of the publisher thread's time while 1,000 ops validated: benchmark 15).
_PARSED = "_detail_parsed"


def case_detail(row: dict[str, Any]) -> dict[str, Any]:
    """A stored case row's ``detail``, parsed once per row (two threads may both parse it: the same value)."""
    found = row.get(_PARSED)
    if found is None:
        found = json.loads(row.get("detail") or "{}")
        row[_PARSED] = found
    return found


def case_plan(row: dict[str, Any]) -> int | None:
    """:func:`row_plan` from the parsed detail."""
    return row_plan({"detail": case_detail(row)})


def _tier(row: dict[str, Any]) -> tuple[str | None, dict[str, Any] | None]:
    """A stored case's tier and edge record (bug-tier rows and errors: (None or "bug", None))."""
    detail = case_detail(row)
    return detail.get("tier"), detail.get("edge")


def _shapes(row: dict[str, Any]) -> dict[str, list[int]]:
    return json.loads(row.get("shapes") or "{}")


def _shape_text(shapes: dict[str, list[int]]) -> str:
    return " ".join(f"{k}={v}" for k, v in shapes.items())


def error_vs_tolerance(row: dict[str, Any]) -> str:
    """A failing case's error against its tolerance ("max abs err 0.429 vs atol=1e-05 rtol=1e-05 (4.3e+04x
    tolerance)"), or its message's first line: what the op's diagnostic and its hover's headline both say."""
    kind = row.get("kind")
    tol = json.loads(row["tolerance"]) if row.get("tolerance") else None
    if kind in NUMERIC and row.get("max_abs") is not None:
        comps = case_detail(row).get("comparisons", [])
        nan = sum(c.get("unexpected_nan", 0) for c in comps)
        inf = sum(c.get("unexpected_inf", 0) for c in comps)
        text = f"max abs err {row['max_abs']:.3g}"
        if tol:
            text += f" vs atol={tol[0]:g} rtol={tol[1]:g}"
        ratio = row.get("max_ratio")
        if isinstance(ratio, (int, float)) and 0 < ratio < 1e299:
            text += f" ({ratio:.3g}x tolerance)"
        if nan:
            text += f"; {nan} NaN where the reference is finite"
        if inf:
            text += f"; {inf} inf where the reference is finite"
        return text
    msg = (row.get("message") or "").strip().splitlines()
    return msg[0][:300] if msg else (kind or "")


def failure_data(session: WorkspaceSession, view: OpView, row: dict[str, Any]) -> dict[str, Any]:
    shapes = _shapes(row)
    mini = view.minimized.get(row["seed"])
    return {
        "workspace": str(session.root),
        "op": view.name,
        "kind": "op",
        "status": row["status"],
        "failureKind": row["kind"],
        "tier": _tier(row)[0],
        "seed": row["seed"],
        "plan": case_plan(row),
        "dtype": row["dtype"],
        "shapes": shapes,
        "layout": row["layout"],
        "distribution": row["distribution"],
        "strategy": row["strategy"],
        "runId": row["run_id"],
        "replay": replay_command(view.name, row["seed"], plan=case_plan(row)),
        "minimized": mini["shapes"] if mini else None,
    }


def failure_message(view: OpView, row: dict[str, Any], count: int, kinds: dict[str, int] | None = None) -> str:
    """The problem's text; ``kinds`` counts an op's edge findings by kind (they share one warning)."""
    kind = row["kind"] or row["status"]
    tier, edge = _tier(row)
    what = KIND_TEXT.get(kind, kind)
    if tier == "edge":
        what = f"edge finding ({what})"
    head = f"{view.name}: {what} [{kind}] in {count}/{view.cases} cases: {error_vs_tolerance(row)}"
    if kinds and len(kinds) > 1:
        split = ", ".join(f"{KIND_TEXT.get(k, k)} [{k}] in {n}" for k, n in kinds.items())
        head = f"{view.name}: edge findings in {count}/{view.cases} cases ({split}); first: {error_vs_tolerance(row)}"
    lines = [
        head,
        f"seed {row['seed']}: {row['dtype']} {_shape_text(_shapes(row))} layout={row['layout']} "
        f"dist={row['distribution']}",
    ]
    mini = view.minimized.get(row["seed"])
    if mini:
        lines.append(f"minimized: {_shape_text(mini['shapes'])}")
    if tier == "edge":
        strict = row["status"] == "failed"
        verdict = "failing: strict = true" if strict else "not a bug of this kernel (strict = true fails it)"
        lines.append(f"edge finding: {(edge or {}).get('text', '')}; {verdict}")
    elif view.diagnosis:
        lines.append(f"diagnosis: {view.diagnosis}")
    lines.append(f"replay: {replay_command(view.name, row['seed'], plan=case_plan(row))}")
    return "\n".join(lines)


def headline_row(view: OpView) -> dict[str, Any] | None:
    """The failing case an op's summary quotes: the first bug's (else the first edge finding's), the case of
    the op's first diagnostic. The hover's headline quotes it too, so the two never tell different errors."""
    rows = _first_per_kind(view)
    bugs = [row for row, _, kinds in rows if not kinds and _tier(row)[0] != "edge"]
    return bugs[0] if bugs else (rows[0][0] if rows else None)


def _first_per_kind(view: OpView) -> list[tuple[dict[str, Any], int, dict[str, int]]]:
    """The first failure of each kind with how many there are; an op's edge findings, whatever their kind,
    are one problem (a warning beside the bugs' errors) that counts them by kind."""
    firsts: dict[str, dict[str, Any]] = {}
    counts: dict[str, int] = defaultdict(int)
    edge_kinds: dict[str, int] = defaultdict(int)
    for row in view.failures:
        k = row["kind"] or row["status"]
        if _tier(row)[0] == "edge":
            edge_kinds[k] += 1
            k = "edge"
        counts[k] += 1
        firsts.setdefault(k, row)
    return [(row, counts[k], dict(edge_kinds) if k == "edge" else {}) for k, row in firsts.items()]


def _workspace_path(session: WorkspaceSession, file: str) -> Path:
    """A file a result names: absolute as it stands, else under the workspace's root."""
    p = Path(file)
    return p if p.is_absolute() else session.root / p


def _in_workspace(session: WorkspaceSession, file: str | None) -> Path | None:
    if not file:
        return None
    p = _workspace_path(session, file)
    try:
        return p.resolve() if p.resolve().is_relative_to(session.root) and p.exists() else None
    except OSError:
        return None


def _related(path: Path, rng: lsp.Range, text: str) -> list[lsp.DiagnosticRelatedInformation]:
    return [lsp.DiagnosticRelatedInformation(lsp.Location(path.as_uri(), rng), text)]


def _place(
    cfg: Config, op: OpConfig, target: tuple[Path, lsp.Range] | None
) -> tuple[Path, lsp.Range, list[lsp.DiagnosticRelatedInformation]]:
    """Where one failure's diagnostic goes, with the other place as related information: the code when there
    is some (its ``[[ops]]`` entry related), else the entry (the reference related, where there is one).
    One place only, so a failure is one problem, not two."""
    toml_range = op_header_range(cfg, op)
    if target is not None and target[0].resolve() != cfg.path.resolve():
        return target[0].resolve(), target[1], _related(cfg.path, toml_range, f"op {op.name} in {cfg.path.name}")
    ref = reference_target(cfg, op)
    if ref is not None and ref[0].resolve() != cfg.path.resolve():
        return cfg.path, toml_range, _related(ref[0], ref[1], f"reference of {op.name}")
    return cfg.path, toml_range, []


def _op_diagnostics(
    session: WorkspaceSession, cfg: Config, op: OpConfig, view: OpView, out: dict[Path, list[lsp.Diagnostic]]
) -> None:
    """One diagnostic per kind of failure of the op: on the line an exception came from, on the reference for
    a failing reference, else on the op's function (or script); on its ``[[ops]]`` entry only when it has no
    code in the workspace (a setup problem, a client-side op)."""
    if view.status in ("not_run", "not_judged") or (view.status == "error" and not view.failures):
        setup = view.detail.get("setup_error") or {}
        msg = f"{op.name}: {view.status.replace('_', ' ')}: {view.message}"
        data = {"workspace": str(session.root), "op": op.name, "kind": "op", "status": view.status}
        code = str(setup.get("kind", view.status))
        where = _in_workspace(session, setup.get("file"))
        if where is not None and where != cfg.path.resolve():
            path, rng = where, line_range(where, setup.get("line") or 1)
            related = _related(cfg.path, op_header_range(cfg, op), f"op {op.name} in {cfg.path.name}")
        else:
            path, rng, related = cfg.path, op_header_range(cfg, op), []
        out[path].append(
            lsp.Diagnostic(
                rng,
                msg,
                _severity(view.status),
                code=code,
                source=SOURCE,
                data=data,
                related_information=related or None,
            )
        )
        return
    for row, count, kinds in _first_per_kind(view):
        data = failure_data(session, view, row)
        message = failure_message(view, row, count, kinds)
        code = row["kind"] or row["status"]
        if _tier(row)[0] == "edge":
            code = "edge-finding"
        detail = case_detail(row)
        at = _in_workspace(session, detail.get("file"))
        if at is not None and detail.get("line"):  # an exception or crash: the line it came from
            target: tuple[Path, lsp.Range] | None = (at, line_range(at, int(detail["line"])))
        else:
            target = reference_target(cfg, op) if (code or "").startswith("reference_") else op_target(cfg, op)
        if target is not None and not target[0].exists():
            target = None  # a module that is not there: the entry says so
        path, rng, related = _place(cfg, op, target)
        out[path].append(
            lsp.Diagnostic(
                rng,
                message,
                _severity(row["status"]),
                code=code,
                source=SOURCE,
                data=data,
                related_information=related or None,
            )
        )


def _kernel_diagnostics(
    session: WorkspaceSession, cfg: Config, index: int, view: OpView, out: dict[Path, list[lsp.Diagnostic]]
) -> None:
    entry = view.detail or {}
    name = view.name
    data = {"workspace": str(session.root), "kernel": name, "kind": "kernel", "status": view.status}
    for f in entry.get("findings", []):
        file = _in_workspace(session, f.get("file"))
        if file is None:
            continue
        line = int(f.get("line") or 1)
        rng = line_range(file, line)
        if f.get("column"):
            start = int(f["column"]) - 1
            end = int(f.get("end_column") or f["column"]) - 1
            rng = lsp.Range(
                lsp.Position(line - 1, start), lsp.Position(int(f.get("end_line") or line) - 1, max(end, start + 1))
            )
        sev = lsp.DiagnosticSeverity.Error if f.get("severity") == "error" else lsp.DiagnosticSeverity.Warning
        out[file].append(
            lsp.Diagnostic(
                rng,
                f"{name}: {f.get('message')}",
                sev,
                code=f.get("code"),
                source=SOURCE,
                data={**data, "finding": f.get("code")},
            )
        )
    if view.status != "passed":
        msg = f"kernel {name}: {view.status.replace('_', ' ')}: {entry.get('message') or view.message}"
        errors = [f for f in entry.get("findings", []) if f.get("severity") == "error"]
        if errors:
            msg += f" ({len(errors)} lint error(s), first: {errors[0].get('message')})"
        out[cfg.path].append(
            lsp.Diagnostic(
                kernel_header_range(cfg, index), msg, _severity(view.status), code=view.status, source=SOURCE, data=data
            )
        )


_DID_YOU_MEAN = re.compile(r"^did you mean ('(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\")\?$")


def did_you_mean(hint: str | None) -> str | None:
    """The suggestion of a checker hint "did you mean 'reference'?" (the checker writes it with repr), else None."""
    m = _DID_YOU_MEAN.match(hint or "")
    if m is None:
        return None
    try:
        value = ast.literal_eval(m.group(1))
    except (ValueError, SyntaxError):
        return None
    return value if isinstance(value, str) else None


def _config_diagnostic(p: Any, severity: lsp.DiagnosticSeverity, code: str) -> lsp.Diagnostic:
    """A configuration problem at its position; a "did you mean" suggestion goes in ``data`` for its quick fix."""
    hint = f"\nhint: {p.hint}" if p.hint else ""
    suggestion = did_you_mean(p.hint)
    return lsp.Diagnostic(
        problem_range(p),
        p.message + hint,
        severity,
        code=code,
        source=SOURCE,
        data={"didYouMean": suggestion} if suggestion is not None else None,
    )


CONFIG_CODES = ("config-error", "config-warning")


def config_diagnostics(
    config_path: Path, problems: Sequence[Problem], warnings: Sequence[Problem] = ()
) -> dict[Path, list[lsp.Diagnostic]]:
    """The configuration's problems (codes ``CONFIG_CODES``), by the file each is in."""
    out: dict[Path, list[lsp.Diagnostic]] = defaultdict(list)
    for found, severity, code in (
        (problems, lsp.DiagnosticSeverity.Error, CONFIG_CODES[0]),
        (warnings, lsp.DiagnosticSeverity.Warning, CONFIG_CODES[1]),
    ):
        for p in found:
            out[Path(p.file).resolve() if p.file else config_path].append(_config_diagnostic(p, severity, code))
    return out


_Kept = tuple[Config, OpConfig, OpView, tuple[tuple[str, int], ...], list[tuple[Path, lsp.Diagnostic]]]


class _OpMemo:
    """Each failing op's diagnostics, kept until its config entry, its verdict or a file they were placed
    by changes: while 1,000 ops validate the workspace's diagnostics are rebuilt as often as runs end, and
    placing every failing op's again (resolving and reading its files) was most of the publisher thread's
    CPU, which the editor's requests wait behind for the GIL (benchmark 15)."""

    def __init__(self) -> None:
        #: op name -> (config, op entry, view, files with their stamps, the op's diagnostics by file)
        self.kept: dict[str, _Kept] = {}
        self.lock = threading.Lock()
        self.pruned_for: Config | None = None  # the config whose ops alone are kept

    def prune(self, cfg: Config) -> None:
        """Forget the ops a new config no longer has (renamed, removed), once per config."""
        if self.pruned_for is cfg:
            return
        names = {op.name for op in cfg.ops}
        with self.lock:
            self.kept = {name: kept for name, kept in self.kept.items() if name in names}
            self.pruned_for = cfg

    def op_diagnostics(
        self, session: WorkspaceSession, cfg: Config, op: OpConfig, view: OpView, out: dict[Path, list[lsp.Diagnostic]]
    ) -> None:
        with self.lock:
            kept = self.kept.get(op.name)
        if (
            kept is not None
            and kept[0] is cfg
            and kept[1] is op
            and kept[2] is view
            and all(_stamp(f) == st for f, st in kept[3])
        ):
            for path, diag in kept[4]:
                out[path].append(diag)
            return
        mine: dict[Path, list[lsp.Diagnostic]] = defaultdict(list)
        _op_diagnostics(session, cfg, op, view, mine)
        files = _placed_by(session, cfg, op, view, mine)
        for path, diags in mine.items():
            out[path].extend(diags)
        placed = [(path, d) for path, diags in mine.items() for d in diags]
        with self.lock:
            self.kept[op.name] = (cfg, op, view, tuple((f, _stamp(f)) for f in files), placed)


def _stamp(file: str) -> int:
    """What says a file changed (or appeared, or went): its modification time in ns, -1 where there is none."""
    try:
        return os.stat(file).st_mtime_ns
    except OSError:
        return -1


def _placed_by(
    session: WorkspaceSession, cfg: Config, op: OpConfig, view: OpView, placed: dict[Path, list[lsp.Diagnostic]]
) -> list[str]:
    """Every file whose presence or text decided where the op's diagnostics went (both places a module may be,
    so a new ``a/b.py`` beside ``a/b/__init__.py`` counts)."""
    files: set[str] = {str(p) for p in placed}
    for ref in (op.module, op.reference):
        if ref and is_callable_ref(ref):
            files |= {str(p) for p in module_candidates(cfg.root, ref.partition(":")[0])}
        elif ref:
            files.add(str(cfg.resolve(ref)))
    if op.op_script:
        files.add(str(cfg.resolve(op.op_script)))
    named = [case_detail(row).get("file") for row in view.failures]
    named.append(((view.detail or {}).get("setup_error") or {}).get("file"))
    files |= {str(_workspace_path(session, name)) for name in named if name}
    return sorted(files)


_MEMOS: weakref.WeakKeyDictionary[WorkspaceSession, _OpMemo] = weakref.WeakKeyDictionary()
_MEMOS_LOCK = threading.Lock()


def _memo_of(session: WorkspaceSession) -> _OpMemo:
    with _MEMOS_LOCK:
        memo = _MEMOS.get(session)
        if memo is None:
            memo = _MEMOS[session] = _OpMemo()
        return memo


def workspace_diagnostics(session: WorkspaceSession, *, trusted: bool = True) -> dict[Path, list[lsp.Diagnostic]]:
    """Every diagnostic of a workspace, by absolute file path (files without any get an empty list)."""
    config_path = session.config_path
    out = config_diagnostics(config_path, session.problems, session.warnings)
    cfg = session.config
    if cfg is None:
        return out
    if not trusted:
        out[config_path].append(
            lsp.Diagnostic(
                lsp.Range(lsp.Position(0, 0), lsp.Position(0, 1)),
                "gpuemu: this workspace is not trusted, so its ops are not run (configuration is still checked)",
                lsp.DiagnosticSeverity.Information,
                code="untrusted",
                source=SOURCE,
            )
        )
        return out
    memo = _memo_of(session)
    memo.prune(cfg)
    for op in cfg.ops:
        view = session.view("op", op.name)
        if view is not None and view.status != "passed":
            memo.op_diagnostics(session, cfg, op, view, out)
    for i, k in enumerate(cfg.kernels):
        view = session.view("kernel", k.name)
        if view is not None:
            _kernel_diagnostics(session, cfg, i, view, out)
    return out
