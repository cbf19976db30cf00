"""Reading op entries of a results document in tests: an op's verdict explained for an assert message, and
whether a correct kernel or its buggy twin was judged as it must be."""

from __future__ import annotations

from typing import Any

#: What a correct kernel may end as: passed, or edge (failures only at the dtype's top, where every kernel's
#: accumulator overflows, or NaN/inf conventions): never failed, error or not_judged.
CORRECT_STATUSES = ("passed", "edge")


def explain(entry: dict[str, Any], failures: int = 4) -> str:
    """The op's message, diagnosis and first failures (with their tier), for an assert message."""
    lines = [f"{entry['name']}: {entry['status']} - {entry.get('message', '')}"]
    if entry.get("setup_error"):
        lines.append(f"  setup error: {entry['setup_error']}")
    if entry.get("diagnosis"):
        lines.append(f"  diagnosis: {entry['diagnosis']}")
    for f in entry.get("failures", [])[:failures]:
        lines.append(
            f"  {f.get('status')} tier={f.get('tier')} [{f.get('kind')}] seed={f.get('seed')} dtype={f.get('dtype')} "
            f"dims={f.get('dims')} layout={f.get('layout')} dist={f.get('distribution')}: "
            f"{str(f.get('message', ''))[:300]}"
        )
        if f.get("replay"):
            lines.append(f"    replay: {f['replay']}")
    return "\n".join(lines)


def judged_wrongly(entry: dict[str, Any], *, buggy: bool) -> bool:
    """A correct kernel that did not pass (edge findings are passes), or a buggy twin that did not fail with
    at least one bug-tier failure (a twin caught only at the edge of the range would be explained away)."""
    if not buggy:
        return entry["status"] not in CORRECT_STATUSES or entry["cases"] == 0 or bool(entry["errors"])
    bugs = [f for f in entry.get("failures", []) if f.get("tier") == "bug"]
    return entry["status"] != "failed" or entry["failed"] == 0 or bool(entry["errors"]) or not bugs
