"""``--redact``: a results document fit to share outside the machine that made it. Absolute paths and the
host name appear in it where the user's world put them (the workspace path, exception text, a worker's
stderr, the provenance's machine); they are replaced, leaving paths relative to the workspace and every
number as it was."""

from __future__ import annotations

import os
import re
import socket
from pathlib import Path
from typing import Any

WORKSPACE = "<workspace>"
HOME = "~"
HOST = "<host>"
#: What is left of an absolute path that is neither in the workspace nor in the home folder: its last name.
_ABSOLUTE = re.compile(r"(?<![\w.~<>/-])/(?:[^\s/'\"<>:,;()\[\]{}]+/)+(?=[^\s/'\"<>:,;()\[\]{}]*)")


def redact(doc: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``doc`` with the workspace path, the home folder, the host name and every other absolute
    path's folders replaced (``/srv/ci/x/ops.py`` reads ``<path>/ops.py``)."""
    prefixes: list[tuple[str, str]] = []
    workspace = str(doc.get("workspace") or "")
    if workspace.startswith("/"):
        prefixes.append((workspace.rstrip("/"), WORKSPACE))
        resolved = str(Path(workspace).resolve())
        if resolved != workspace.rstrip("/"):
            prefixes.append((resolved, WORKSPACE))
    home = os.path.expanduser("~")
    if home not in ("", "/", "~"):
        prefixes.append((home.rstrip("/"), HOME))
    machine = (doc.get("provenance") or {}).get("machine") or {}
    # in free text only a name of 3 or more characters is replaced ("vm" is a word too); the field always is
    hosts = {h for h in (socket.gethostname(), str(machine.get("host") or "")) if len(h) >= 3}
    prefixes.sort(key=lambda p: -len(p[0]))  # the longest first: a workspace inside the home folder

    def text(s: str) -> str:
        for prefix, name in prefixes:
            s = s.replace(prefix, name)
        s = _ABSOLUTE.sub("<path>/", s)
        for h in hosts:
            s = re.sub(rf"\b{re.escape(h)}\b", HOST, s)
        return s

    def walk(v: Any) -> Any:
        if isinstance(v, str):
            return text(v)
        if isinstance(v, dict):
            return {k: walk(x) for k, x in v.items()}
        if isinstance(v, list):
            return [walk(x) for x in v]
        return v

    out = walk(doc)
    if isinstance((out.get("provenance") or {}).get("machine"), dict):
        out["provenance"]["machine"]["host"] = HOST
    out["redacted"] = True
    return out
