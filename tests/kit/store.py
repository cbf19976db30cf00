"""Reading a workspace's store with plain sqlite3 (what any other reader of the store sees)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any


def db_path(root: Path) -> Path:
    """The store file of the workspace at ``root``."""
    return root / ".gpuemu" / "gpuemu.db"


def rows(db: Path, sql: str, params: tuple[Any, ...] = ()) -> list[dict[str, Any]]:
    """Rows of the store file, read with plain sqlite3, as dicts."""
    conn = sqlite3.connect(str(db))
    conn.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in conn.execute(sql, params)]
    finally:
        conn.close()


def detail(row: dict[str, Any]) -> dict[str, Any]:
    """A result row's JSON ``detail`` column."""
    return json.loads(row.get("detail") or "{}")
