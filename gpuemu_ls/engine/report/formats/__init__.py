"""Renderers of the results document: text for people, JUnit for CI test tabs, SARIF for code scanning,
Markdown for CI job summaries."""

from __future__ import annotations

from typing import Any

from .junit import render_junit
from .markdown import render_markdown
from .sarif import render_sarif
from .text import render_text

FORMATS = ("text", "json", "junit", "sarif", "markdown")


def render(doc: dict[str, Any], fmt: str, **kw: Any) -> str:
    from ..results import dumps

    if fmt == "json":
        return dumps(doc)
    if fmt == "junit":
        return render_junit(doc)
    if fmt == "sarif":
        return render_sarif(doc)
    if fmt == "markdown":
        return render_markdown(doc, show=kw.get("show") or 3, replay_prefix=kw.get("replay_prefix", ""))
    return render_text(doc, **kw)


__all__ = ["FORMATS", "render", "render_junit", "render_markdown", "render_sarif", "render_text"]
