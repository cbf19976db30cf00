"""Renderers of the results document: text for people, JUnit for CI test tabs, SARIF for code scanning,
Markdown for CI job summaries, HTML for a page to open, print or keep as an artifact."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .html import render_html
from .junit import render_junit
from .markdown import render_markdown
from .sarif import render_sarif
from .text import render_text

FORMATS = ("text", "json", "junit", "sarif", "markdown", "html")


def render(doc: dict[str, Any], fmt: str, *, redact: bool = False, **kw: Any) -> str:
    """``doc`` in format ``fmt``; ``redact``: without absolute paths and the host name (``--redact``)."""
    from ..redact import redact as redact_document
    from ..results import dumps

    if fmt == "html":  # it finds the store by the workspace's path first, then redacts
        return render_html(doc, show=kw.get("show") or 3, replay_prefix=kw.get("replay_prefix", ""), redact=redact)
    if redact:
        doc = redact_document(doc)
    if fmt == "json":
        return dumps(doc)
    if fmt == "junit":
        return render_junit(doc)
    if fmt == "sarif":
        return render_sarif(doc)
    if fmt == "markdown":
        return render_markdown(doc, show=kw.get("show") or 3, replay_prefix=kw.get("replay_prefix", ""))
    return render_text(doc, **kw)


def render_parts(doc: dict[str, Any], fmt: str, *, redact: bool = False, **kw: Any) -> Iterable[str]:
    """:func:`render` in parts to write one after the other: JSON chunk by chunk (a document of thousands of
    ops is never one string: issue 31), any other format whole."""
    from ..redact import redact as redact_document
    from ..results import iter_json

    if fmt == "json":
        return iter_json(redact_document(doc) if redact else doc)
    return (render(doc, fmt, redact=redact, **kw),)


__all__ = [
    "FORMATS",
    "render",
    "render_html",
    "render_junit",
    "render_markdown",
    "render_parts",
    "render_sarif",
    "render_text",
]
