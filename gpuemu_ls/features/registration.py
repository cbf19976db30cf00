"""The optional features, registered at initialize when the options enable them and the client can use them
(and so advertised only then): gpuemu.toml completion, definition, symbols and hover; code actions; lenses;
and file watching, by the client (registered dynamically) or else by the server, set up at initialized."""

from __future__ import annotations

import logging

from lsprotocol import types as lsp

from ..diagnostics.code_actions import code_actions, code_lenses
from ..session.watcher import FileWatcher
from . import Server
from .hover_request import document_hover
from .params import request_path, toml_document
from .toml_completion import TRIGGER_CHARACTERS, toml_completion_list
from .toml_definition import toml_definition
from .toml_symbols import flat_symbols, toml_symbols

log = logging.getLogger("gpuemu-ls")


def register_optional_features(ls: Server) -> None:
    """Only the features the options enable, and the client can use, are registered (and so advertised)."""
    if ls.supports("text_document", "completion"):

        @ls.feature(lsp.TEXT_DOCUMENT_COMPLETION, lsp.CompletionOptions(trigger_characters=TRIGGER_CHARACTERS))
        def completion(ls_: Server, params: lsp.CompletionParams) -> lsp.CompletionList | None:
            got = toml_document(ls_, params.text_document.uri)
            if got is None:
                return None
            return toml_completion_list(got[0], params.position.line, params.position.character, got[1])

    if ls.supports("text_document", "definition"):

        @ls.feature(lsp.TEXT_DOCUMENT_DEFINITION)
        def definition(ls_: Server, params: lsp.DefinitionParams) -> lsp.Location | None:
            got = toml_document(ls_, params.text_document.uri)
            return toml_definition(got[0], params.position.line, params.position.character, got[1]) if got else None

    if ls.supports("text_document", "document_symbol"):

        @ls.feature(lsp.TEXT_DOCUMENT_DOCUMENT_SYMBOL)
        def symbols(
            ls_: Server, params: lsp.DocumentSymbolParams
        ) -> list[lsp.DocumentSymbol] | list[lsp.SymbolInformation] | None:
            got = toml_document(ls_, params.text_document.uri)
            if got is None:
                return None
            found = toml_symbols(got[0])
            if ls_.supports("text_document", "document_symbol", "hierarchical_document_symbol_support"):
                return found
            return flat_symbols(found, params.text_document.uri)

    if ls.options.hover:

        @ls.feature(lsp.TEXT_DOCUMENT_HOVER)
        def hover(ls_: Server, params: lsp.HoverParams) -> lsp.Hover | None:
            return document_hover(ls_, params)

    if ls.options.code_actions:

        @ls.feature(
            lsp.TEXT_DOCUMENT_CODE_ACTION, lsp.CodeActionOptions(code_action_kinds=[lsp.CodeActionKind.QuickFix])
        )
        def actions(ls_: Server, params: lsp.CodeActionParams) -> list[lsp.CodeAction] | None:
            path = request_path(params.text_document.uri)
            s = ls_.session_for(path) if path is not None else None
            if s is None:  # a broken gpuemu.toml (no config) still gets its "did you mean" fixes
                return None
            in_toml = path is not None and path.resolve() == s.config_path.resolve()
            uri = params.text_document.uri if in_toml else None
            return code_actions(s, list(params.context.diagnostics), ls_._toml_text(s), uri) or None

    if ls.options.code_lens:

        @ls.feature(lsp.TEXT_DOCUMENT_CODE_LENS)
        def lenses(ls_: Server, params: lsp.CodeLensParams) -> list[lsp.CodeLens] | None:
            path = request_path(params.text_document.uri)
            s = ls_.session_for(path) if path is not None else None
            if s is None or path is None:
                return None
            running = {op: text for (root, op), text in ls_.running.items() if root == s.root}
            return code_lenses(s, path, running) or None


async def setup_watching(ls: Server) -> None:
    watch = ls.options.watch
    dynamic = ls.supports("workspace", "did_change_watched_files", "dynamic_registration")
    if watch in ("auto", "client") and dynamic:
        globs = ["**/gpuemu.toml", "**/*.py", "**/*.cu", "**/*.cuh", "**/*.h", "**/*.ptx"]
        try:
            await ls.client_register_capability_async(
                lsp.RegistrationParams(
                    registrations=[
                        lsp.Registration(
                            id="gpuemu-watch",
                            method=lsp.WORKSPACE_DID_CHANGE_WATCHED_FILES,
                            register_options=lsp.DidChangeWatchedFilesRegistrationOptions(
                                watchers=[lsp.FileSystemWatcher(glob_pattern=g) for g in globs]
                            ),
                        )
                    ]
                )
            )
            ls.client_watches = True
            return
        except Exception as exc:
            log.warning("client refused file watching (%s); watching from the server", exc)
    if watch in ("auto", "server") or (watch == "client" and not dynamic):
        ls.watcher = FileWatcher(lambda s, paths: ls.post(ls.watched_change, s, paths))
        for s in ls.sessions.values():
            ls.watcher.watch(s)
        ls.watcher.start()
