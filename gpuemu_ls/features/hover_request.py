"""``textDocument/hover``: which op or kernel, or which gpuemu.toml key, the cursor is on, and its hover
(the texts themselves are built in :mod:`gpuemu_ls.diagnostics.hover` and :mod:`.toml_hover`)."""

from __future__ import annotations

from lsprotocol import types as lsp

from ..diagnostics.hover import kernel_hover, op_hover
from ..diagnostics.ranges import op_at_line, op_header_range, op_target
from . import Server
from .params import request_path, toml_document
from .toml_hover import toml_key_hover


def document_hover(ls: Server, params: lsp.HoverParams) -> lsp.Hover | None:
    path = request_path(params.text_document.uri)
    s = ls.session_for(path) if path is not None else None
    if s is None or path is None:
        return None
    cfg = s.config
    line = params.position.line
    if path == s.config_path:  # an op or kernel entry's header and name: its results; any other key: its docs
        op = op_at_line(cfg, line) if cfg is not None else None
        if op is not None and cfg is not None:
            rng = op_header_range(cfg, op)
            target = op_target(cfg, op)
            beside = target is None or not target[0].is_file() or target[0].resolve() == cfg.path.resolve()
            view = s.view("op", op.name)
            text = op_hover(view, op.name, ls.running.get((s.root, op.name)), beside_diagnostic=beside)
            return lsp.Hover(lsp.MarkupContent(lsp.MarkupKind.Markdown, text), rng)
        for i, k in enumerate(cfg.kernels if cfg is not None else ()):
            head = cfg.positions.key(("kernels", i)) if cfg.positions else None
            name = cfg.positions.value(("kernels", i, "name")) if cfg.positions else None
            if head is not None and head.line - 1 <= line <= (name or head).end_line - 1:
                return lsp.Hover(
                    lsp.MarkupContent(lsp.MarkupKind.Markdown, kernel_hover(s.view("kernel", k.name), k.name))
                )
        got = toml_document(ls, params.text_document.uri)
        return toml_key_hover(got[0], line, params.position.character) if got else None
    if cfg is None:
        return None
    line += 1
    for op in cfg.ops:
        target = op_target(cfg, op)
        if target and target[0].resolve() == path and target[1].start.line == params.position.line:
            text = op_hover(s.view("op", op.name), op.name, ls.running.get((s.root, op.name)), beside_diagnostic=True)
            return lsp.Hover(lsp.MarkupContent(lsp.MarkupKind.Markdown, text), target[1])
    if path.suffix in (".cu", ".cuh"):
        for k in cfg.kernels:
            if cfg.resolve(k.source) == path:
                view = s.view("kernel", k.name)
                decl = (view.detail.get("source") or {}).get("line") if view else None
                if decl is None or decl == line:
                    return lsp.Hover(lsp.MarkupContent(lsp.MarkupKind.Markdown, kernel_hover(view, k.name)))
    return None
