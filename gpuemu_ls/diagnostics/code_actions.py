"""Code actions and code lenses for gpuemu diagnostics."""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path
from typing import Any

from lsprotocol import types as lsp

from ..engine.config.edits import edit_op_block, pin_seed
from ..engine.config.model import Config
from ..engine.errors import UsageError
from ..session.workspace import WorkspaceSession
from .ranges import op_header_range, op_target

REPRODUCE, MINIMIZE, CALIBRATE = "gpuemu.reproduce", "gpuemu.minimize", "gpuemu.calibrate"
RUN_OP, RUN_ALL, RUN_QUICK, RUN_THOROUGH = "gpuemu.runOp", "gpuemu.runAll", "gpuemu.runQuick", "gpuemu.runThorough"
COMMANDS = (REPRODUCE, MINIMIZE, CALIBRATE, RUN_OP, RUN_ALL, RUN_QUICK, RUN_THOROUGH)


def _text_at(text: str, rng: lsp.Range) -> str | None:
    """The text a one-line range covers, or None where it spans lines or lies outside ``text``."""
    lines = text.split("\n")
    if rng.start.line != rng.end.line or rng.start.line >= len(lines):
        return None
    line = lines[rng.start.line]
    if not 0 <= rng.start.character < rng.end.character <= len(line):
        return None
    return line[rng.start.character : rng.end.character]


def did_you_mean_fix(d: lsp.Diagnostic, uri: str, text: str) -> lsp.CodeAction | None:
    """ "Change 'refrence' to 'reference'": a configuration problem's suggestion put in place of the word the
    problem names, quotes kept. Offered only where the diagnostic's range holds exactly that word (the one
    its message quotes first), so a fix never lands on anything else (a module:function, a file edited since)."""
    data = d.data if isinstance(d.data, dict) else {}
    suggestion = data.get("didYouMean")
    if d.source != "gpuemu" or not isinstance(suggestion, str) or not suggestion:
        return None
    named = re.search(r"'((?:[^'\\]|\\.)*)'|\"((?:[^\"\\]|\\.)*)\"", d.message)
    word = _text_at(text, d.range)
    if named is None or word is None:
        return None
    wrong = named.group(1) if named.group(1) is not None else named.group(2)
    quote = word[0] if len(word) >= 2 and word[0] == word[-1] and word[0] in "\"'" else ""
    if (word[1:-1] if quote else word) != wrong:
        return None
    new = f"{quote}{suggestion}{quote}" if quote or re.fullmatch(r"[A-Za-z0-9_-]+", suggestion) else f'"{suggestion}"'
    edit = lsp.WorkspaceEdit(changes={uri: [lsp.TextEdit(d.range, new)]})
    return _quick_fix(f"Change {wrong!r} to {suggestion!r}", d, edit=edit, is_preferred=True)


def code_actions(
    session: WorkspaceSession, diagnostics: list[lsp.Diagnostic], toml_text: str, uri: str | None = None
) -> list[lsp.CodeAction]:
    """Actions for the gpuemu diagnostics under the cursor. ``uri``: the client's URI of gpuemu.toml when the
    request is about it (whose text is ``toml_text``): its problems' "did you mean" fixes are offered there."""
    actions: list[lsp.CodeAction] = []
    if uri is not None:
        actions += [a for a in (did_you_mean_fix(d, uri, toml_text) for d in diagnostics) if a is not None]
    cfg = session.config
    seen: set[tuple[str, int | None]] = set()
    for d in diagnostics:
        data: dict[str, Any] = d.data if isinstance(d.data, dict) else {}
        op_name, seed = data.get("op"), data.get("seed")
        if isinstance(seed, bool) or not (seed is None or isinstance(seed, int)):
            continue  # data the client made up or mangled: not one of ours
        if d.source != "gpuemu" or not op_name or not isinstance(op_name, str) or (op_name, seed) in seen:
            continue
        seen.add((op_name, seed))
        args = [{"workspace": str(session.root), "op": op_name, "seed": seed}]
        if seed is not None:
            actions.append(
                _quick_fix(
                    f"Reproduce failure of {op_name} (seed {seed})",
                    d,
                    command=lsp.Command("Reproduce failure", REPRODUCE, arguments=args),
                    is_preferred=True,
                )
            )
            mini = data.get("minimized")
            if isinstance(mini, dict) and mini:  # `gpuemu minimize` stored a smaller case: offer it too
                shapes = " ".join(f"{k}=[{', '.join(map(str, v))}]" for k, v in mini.items() if isinstance(v, list))
                actions.append(
                    _quick_fix(
                        f"Reproduce minimized case of {op_name} (seed {seed}, {shapes})",
                        d,
                        command=lsp.Command(
                            "Reproduce minimized case", REPRODUCE, arguments=[{**args[0], "minimized": True}]
                        ),
                    )
                )
            actions.append(
                _quick_fix(
                    f"Minimize test case of {op_name} (seed {seed})",
                    d,
                    command=lsp.Command("Minimize test case", MINIMIZE, arguments=args),
                )
            )
            if cfg is not None:
                edit = _pin_edit(cfg, op_name, int(seed), data.get("plan"), toml_text)
                if edit is not None:
                    actions.append(
                        _quick_fix(
                            f"Pin seed {seed} as a regression case of {op_name}",
                            d,
                            edit=edit,
                        )
                    )
        if (data.get("failureKind") in ("mismatch", None) or seed is None) and not looks_like_bug(session, op_name):
            actions.append(
                _quick_fix(
                    f"Apply calibrated tolerance to {op_name} (only if the op is known to be correct)",
                    d,
                    command=lsp.Command(
                        "Apply calibrated tolerance",
                        CALIBRATE,
                        arguments=[{"workspace": str(session.root), "op": op_name}],
                    ),
                )
            )
    return actions


def _pin_edit(cfg: Config, op_name: str, seed: int, plan: Any, toml_text: str) -> lsp.WorkspaceEdit | None:
    """The edit that pins ``seed`` in the op's entry, made on that entry's lines alone (a 1,000-op gpuemu.toml
    parsed whole took seconds); None where it changes nothing or cannot be made."""
    try:
        op = cfg.op(op_name)
        pinned_plan = plan if isinstance(plan, int) and op.plan_bound else None
        start, end, new = edit_op_block(
            toml_text, op.index, lambda text, index: _pinned(text, index, op.name, seed, pinned_plan)
        )
    except (KeyError, UsageError, Exception):
        return None
    lines = toml_text.split("\n")
    old = "\n".join(lines[start:end]) + ("\n" if end < len(lines) else "")
    if new == old:
        return None
    stop = lsp.Position(end, 0) if end < len(lines) else lsp.Position(len(lines) - 1, len(lines[-1]))
    return lsp.WorkspaceEdit(changes={cfg.path.as_uri(): [lsp.TextEdit(lsp.Range(lsp.Position(start, 0), stop), new)]})


@lru_cache(maxsize=64)  # an editor asks again at each move of the cursor over the diagnostic
def _pinned(text: str, index: int, name: str, seed: int, plan: int | None) -> str:
    return pin_seed(text, index, name, seed, plan)


def _quick_fix(title: str, d: lsp.Diagnostic, **what: Any) -> lsp.CodeAction:
    """A quick fix of diagnostic ``d``: its ``command`` or ``edit`` (and ``is_preferred``) in ``what``."""
    return lsp.CodeAction(title, kind=lsp.CodeActionKind.QuickFix, diagnostics=[d], **what)


LENS_ICON = {"passed": "✓", "failed": "✗", "edge": "⚠", "not_judged": "?", "error": "!", "not_run": "○"}


def code_lenses(session: WorkspaceSession, path: Path, running: dict[str, str]) -> list[lsp.CodeLens]:
    """A status line above each op entry in gpuemu.toml and above each op function.

    Asked for again at every lens refresh (once a second while runs end): the file is resolved once, and a
    module's ops come from the op-by-file index, not from placing all 1,000 (65 ms for gpuemu.toml and 126 ms
    for one module before, on the thread that answers the editor)."""
    cfg = session.config
    if cfg is None:
        return []
    here = path.resolve()
    in_toml = here == cfg.path.resolve()
    in_file = set() if in_toml else set(session.ops_by_file(cfg).get(here, ()))
    lenses = []
    for op in cfg.ops:
        if in_toml:
            rng = op_header_range(cfg, op)
        else:
            if op.name not in in_file:
                continue
            target = op_target(cfg, op)
            if target is None or target[0].resolve() != here:
                continue
            rng = target[1]
        view = session.view("op", op.name)
        if op.name in running:
            title = f"● gpuemu {op.name}: {running[op.name]}"
        elif view is None:
            title = f"○ gpuemu {op.name}: not run yet, run"
        else:
            title = f"{LENS_ICON.get(view.status, '?')} gpuemu {op.name}: {view.message} (run again)"
        lenses.append(
            lsp.CodeLens(
                lsp.Range(rng.start, rng.start),
                lsp.Command(title, RUN_OP, arguments=[{"workspace": str(session.root), "op": op.name}]),
            )
        )
    return lenses


def looks_like_bug(session: WorkspaceSession, op_name: str) -> bool:
    """Whether the op's last failures are a bug rather than rounding (calibration's refusal rule): then no
    tolerance action is offered at all."""
    from ..engine.tools.calibrate import BUG_CONDITIONS, NONFINITE

    view = session.view("op", op_name)
    if view is None:
        return False
    cond = (view.detail or {}).get("condition") or {}
    if cond.get("confirmed") and set(str(cond.get("kind", "")).split("+")) & set(BUG_CONDITIONS):
        return True
    return any(f.get("kind") in NONFINITE for f in view.failures)
