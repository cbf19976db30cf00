"""Running on request: ``gpuemu/runOps`` and the ``gpuemu.*`` commands of ``workspace/executeCommand``
(run, reproduce, minimize, calibrate), each a job with work-done progress, its answer a JSON object."""

from __future__ import annotations

import asyncio
import logging
import traceback
import uuid
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any

from lsprotocol import types as lsp

from ..diagnostics.code_actions import CALIBRATE, MINIMIZE, REPRODUCE, RUN_ALL, RUN_OP, RUN_QUICK, RUN_THOROUGH
from ..engine.config.keys import CONFIG_NAME
from ..engine.config.model import Config, OpConfig
from ..engine.errors import GpuemuError
from ..session.jobs import Job
from ..session.workspace import WorkspaceSession
from . import Server
from .params import command_params
from .test_explorer import item_id

log = logging.getLogger("gpuemu-ls")


def select(ls: Server, params: dict[str, Any]) -> list[tuple[WorkspaceSession, list[str], list[str]]]:
    """Which (workspace, ops, kernels) a run request names; everything when it names nothing."""
    wanted = params.get("ids", params.get("ops"))
    roots = [Path(params["workspace"]).resolve()] if params.get("workspace") else list(ls.sessions)
    out = []
    for root in roots:
        s = ls.sessions.get(root) or (ls.add_session(root) if (root / CONFIG_NAME).is_file() else None)
        if s is None or s.config is None:
            continue
        ops = [o.name for o in s.config.ops]
        kernels = [k.name for k in s.config.kernels]
        if wanted is not None:  # an empty list names nothing (absent: everything)
            names = {w.split(":", 1)[-1] for w in wanted if not w.startswith("kernel:")}
            knames = {w.split(":", 1)[-1] for w in wanted if w.startswith("kernel:")} | (names & set(kernels))
            ops = [o for o in ops if o in names]
            kernels = [k for k in kernels if k in knames]
        out.append((s, ops, kernels))
    return out


async def run_requested(ls: Server, params: dict[str, Any]) -> dict[str, Any]:
    if not ls.options.trusted:
        return {"error": "workspace not trusted: nothing runs", "results": []}
    mode = params.get("mode") or ls.options.mode
    jobs: list[Job] = []
    for s, ops, kernels in select(ls, params):
        jobs += ls.validate(s, ops, kernels, "run request", mode=mode, iterations=params.get("iterations"))
    try:
        await asyncio.gather(*(asyncio.wrap_future(j.future) for j in jobs if j.future is not None))
    except asyncio.CancelledError:
        for j in jobs:
            j.cancel.set()
        raise
    sessions = {j.session.root: j.session for j in jobs}.values()
    for s in sessions:  # one reread of each store, off the loop, and its diagnostics sent before the answer
        await asyncio.wrap_future(ls.publish(s, reread=True))
    results = []
    for j in jobs:
        view = j.session.view("kernel" if j.kind == "lint" else "op", j.name)
        results.append(
            {
                "id": item_id(j.kind, j.name),
                "name": j.name,
                "workspace": str(j.session.root),
                "status": "cancelled" if j.cancel.is_set() else (view.status if view else "not_run"),
                "message": view.message if view else "",
                "diagnosis": view.diagnosis if view else "",
            }
        )
    return {"results": results}


def command_handler(name: str) -> Any:
    async def handler(ls: Server, *args: Any) -> Any:
        return await _command(ls, name, command_params(name, args))

    handler.__name__ = name.replace(".", "_")
    return handler


async def _command(ls: Server, name: str, params: dict[str, Any]) -> Any:
    if name in (RUN_OP, RUN_ALL, RUN_QUICK, RUN_THOROUGH):
        mode = {RUN_QUICK: "quick", RUN_THOROUGH: "thorough"}.get(name, params.get("mode"))
        sel = {"workspace": params.get("workspace"), "ids": [params["op"]] if "op" in params else None, "mode": mode}
        return await run_requested(ls, sel)
    if not ls.options.trusted:
        ls.message("gpuemu: this workspace is not trusted, so its code does not run", lsp.MessageType.Warning)
        return {"error": "not trusted"}
    root = Path(params.get("workspace") or next(iter(ls.sessions), Path.cwd())).resolve()
    s = ls.sessions.get(root)
    if s is None or s.config is None:
        ls.message(f"gpuemu: no usable gpuemu.toml in {root}", lsp.MessageType.Error)
        return {"error": "no workspace"}
    op_name = params["op"]
    if op_name not in {o.name for o in s.config.ops}:
        return {"error": f"no op {op_name!r} in {s.config_path}"}
    token = params.get("workDoneToken")
    what = f"{name.removeprefix('gpuemu.')} {op_name}"
    try:
        if name == REPRODUCE:
            return await _reproduce(ls, s, op_name, params["seed"], minimized=params.get("minimized", False))
        if name == MINIMIZE:
            return await _minimize(ls, s, op_name, params["seed"])
        if name == CALIBRATE:
            return await _calibrate(ls, s, op_name, params.get("iterations", 100), token)
    except Cancelled:  # the user stopped it (the progress's Cancel): nothing to tell them
        ls.log_line(f"{what}: cancelled")
        return {"error": "cancelled", "cancelled": True}
    except Exception as exc:  # the engine call failed: one message and an answer, never a server error
        ls.message(f"gpuemu: {what}: {exc}", lsp.MessageType.Warning)
        if isinstance(exc, GpuemuError):  # the engine's own refusal or usage error: it says what to do
            ls.log_line(f"{what}: {exc}", lsp.MessageType.Warning)
        else:  # a bug of ours: the traceback, at error level, where a report can copy it from
            trace = "".join(traceback.format_exception(exc))
            ls.log_line(f"{what} failed: {type(exc).__name__}: {exc}\n{trace}", lsp.MessageType.Error)
        return {"error": str(exc)}
    return None


Report = Callable[[str, "int | None"], None]


class Cancelled(RuntimeError):
    """A task job that was cancelled (work-done progress cancelled, or the server exiting)."""


async def _with_progress(ls: Server, s: WorkspaceSession, title: str, fn: Any, token: str | int | None = None) -> Any:
    """Run ``fn(job, report)`` as a task job with work-done progress, awaiting its result; ``report(message,
    percentage)`` may be called from the job's thread. ``token``: the client's own progress token (it shows
    the progress where it chose, say a notification with Cancel); else one is created when the client can."""
    if token is None and ls.supports("window", "work_done_progress"):
        token = f"gpuemu-task-{uuid.uuid4().hex}"
        await ls.work_done_progress.create_async(token)
    if token is not None:
        ls.work_done_progress.begin(token, lsp.WorkDoneProgressBegin(title=title, cancellable=True, percentage=0))

    def report(message: str, percentage: int | None = None) -> None:
        if token is not None:
            params = lsp.WorkDoneProgressReport(message=message, percentage=percentage, cancellable=True)
            ls.post(ls.work_done_progress.report, token, params)

    job = ls.jobs.task(s, title, lambda j: fn(j, report))
    if token is not None:
        ls.token_jobs[token] = job
    try:
        assert job.future is not None
        out = await asyncio.wrap_future(job.future)
        if job.cancel.is_set():  # first: what a stopped run concluded from part of its cases is moot
            raise Cancelled("cancelled")
        if job.error is not None:
            raise job.error
        return out
    finally:
        if token is not None:
            ls.work_done_progress.end(token, lsp.WorkDoneProgressEnd(message="done"))
            ls.token_jobs.pop(token, None)


def _config_op(s: WorkspaceSession, op_name: str) -> tuple[Config, OpConfig]:
    """The session's configuration (a command runs only once it loaded) and its op ``op_name``."""
    cfg = s.config
    assert cfg is not None
    return cfg, cfg.op(op_name)


async def _reproduce(
    ls: Server, s: WorkspaceSession, op_name: str, seed: int, *, minimized: bool = False
) -> dict[str, Any]:
    from ..engine.cases.generate import generate_inputs
    from ..engine.run.validate import RunOptions, replay_spec, run_validation
    from ..engine.store.db import Store
    from ..engine.tools.repro import write_repro

    cfg, op = _config_op(s, op_name)

    def work(job: Job, _report: Report) -> dict[str, Any]:
        with closing(Store(s.store_file)) as store:
            if minimized:  # the case `gpuemu minimize` stored (its shapes), as `gpuemu reproduce --minimized`
                found = store.find_minimized(op.name, seed)
                if found is None:
                    raise ValueError(f"no minimized case for op {op.name!r} seed {seed}: minimize it first")
                (spec, snap), source = found, "minimized snapshot"
            else:
                spec, snap, source = replay_spec(cfg, op, seed, store)
            result = run_validation(
                cfg,
                RunOptions(mode="reproduce", ops=[op.name], source="server", cancel=job.cancel),
                store=store,
                specs_by_op={op.name: [spec]},
                snapshots={op.name: {seed: snap}} if snap is not None else None,
            )
        case = result.outcomes[0].cases[0] if result.outcomes and result.outcomes[0].cases else None
        inputs = snap if snap is not None else generate_inputs(op, spec).logical
        repro = write_repro(cfg, op, spec, inputs, case, label="_min" if minimized else "")
        return {
            "repro": str(repro),
            "case": spec.to_dict(),
            "status": case.status if case else "not_run",
            "source": source,
            "kind": case.kind if case else None,
            "message": (case.message if case else "")[:2000],
            "report": "\n".join(c.report() for c in case.comparisons) if case else "",
        }

    out = await _with_progress(ls, s, f"gpuemu: reproduce {op_name} seed {seed}", work)
    await _show(ls, Path(out["repro"]))
    verdict = "still fails" if out["status"] != "passed" else "passes now"
    ls.message(f"gpuemu: {op_name} seed {seed} {verdict} ({out['source']}); reproduction: {out['repro']}")
    return out


async def _show(ls: Server, path: Path) -> None:
    if ls.supports("window", "show_document", "support"):
        try:
            await ls.window_show_document_async(lsp.ShowDocumentParams(uri=path.as_uri(), take_focus=True))
        except Exception as exc:
            log.warning("showDocument failed: %s", exc)


async def _minimize(ls: Server, s: WorkspaceSession, op_name: str, seed: int) -> dict[str, Any]:
    from ..engine.store.db import Store
    from ..engine.tools.minimize import describe, minimize, store_minimized
    from ..engine.tools.repro import write_repro

    cfg, op = _config_op(s, op_name)

    def work(job: Job, _report: Report) -> dict[str, Any]:
        with closing(Store(s.store_file)) as store:
            res = minimize(cfg, op, seed, store, cancel=job.cancel)
            store_minimized(store, cfg, res, command="gpuemu-ls minimize")
        repro = write_repro(cfg, op, res.minimized.spec, res.minimized_inputs, res.minimized, label="_min")
        return {**describe(res), "repro": str(repro)}

    out = await _with_progress(ls, s, f"gpuemu: minimize {op_name} seed {seed}", work)
    await asyncio.wrap_future(ls.publish(s, reread=True))
    shapes = " ".join(f"{k}={v}" for k, v in out["minimized"]["shapes"].items())
    ls.message(f"gpuemu: {op_name} seed {seed} minimized to {shapes} in {out['trials']} trials")
    return out


async def _calibrate(
    ls: Server, s: WorkspaceSession, op_name: str, iterations: int, token: str | int | None = None
) -> dict[str, Any]:
    """Calibrate with progress (cases run per dtype), then show the edit and ask before applying it; a
    calibration that would hide a bug is refused: one warning with its reasons (an answer, not an error of the
    server: no traceback, nothing logged as an error), and nothing to apply."""
    from ..engine.tools.calibrate import CalibrationRefused, calibrate, tolerance_text

    cfg, op = _config_op(s, op_name)

    def work(job: Job, report: Report) -> list[Any]:
        dtypes = list(op.dtypes)
        step = max(1, iterations // 20)  # about 20 reports per dtype, not one per case

        def on_progress(dtype: str, done: int, total: int) -> None:
            if done % step == 0 or done == total:
                share = (dtypes.index(dtype) + done / max(total, 1)) / len(dtypes) if dtype in dtypes else None
                report(f"{dtype}: {done} of {total} cases", None if share is None else int(100 * share))

        return calibrate(cfg, op, iterations=iterations, on_progress=on_progress, first_refusal=True, cancel=job.cancel)

    try:
        proposals = await _with_progress(ls, s, f"gpuemu: calibrate {op_name}", work, token)
    except CalibrationRefused as exc:
        ls.message(f"gpuemu: {exc}", lsp.MessageType.Warning)
        ls.log_line(f"calibrate {op_name}: {exc.heading}: {'; '.join(exc.reasons)}")
        return {"refused": exc.reasons, "applied": False, "message": str(exc)}
    text = ls._toml_text(s)
    new = tolerance_text(cfg, op, proposals, text)
    change = "; ".join(
        f"{p.dtype}: atol {p.current[0]:g} -> {p.atol:.2g}, rtol {p.current[1]:g} -> {p.rtol:.2g}" for p in proposals
    )
    answer = await ls.window_show_message_request_async(
        lsp.ShowMessageRequestParams(
            lsp.MessageType.Warning,
            f"gpuemu: set the tolerance of {op_name} in gpuemu.toml? {change}. "
            "Only for an op known to be correct: a wider tolerance hides errors.",
            actions=[lsp.MessageActionItem("Apply"), lsp.MessageActionItem("Cancel")],
        )
    )
    proposed = {"proposals": [p.to_dict() for p in proposals], "change": change}
    if getattr(answer, "title", None) != "Apply":
        return {**proposed, "applied": False}
    lines = text.split("\n")
    edit = lsp.WorkspaceEdit(
        changes={
            cfg.path.as_uri(): [
                lsp.TextEdit(lsp.Range(lsp.Position(0, 0), lsp.Position(len(lines) - 1, len(lines[-1]))), new)
            ]
        }
    )
    applied = await ls.workspace_apply_edit_async(lsp.ApplyWorkspaceEditParams(edit, label=f"calibrate {op_name}"))
    return {**proposed, "applied": bool(getattr(applied, "applied", False))}
