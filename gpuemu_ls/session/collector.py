"""Python's garbage collector kept off the editor's path while ops run (issue 31).

A full collection scans every object the process holds, with every thread stopped. While a 1,000-op run
validates in the server, the objects it keeps (op states, results, diagnostics) grow from 50,000 to 160,000,
and a full collection runs each time they grow by a quarter: pauses of 50-170 ms, the worst hover,
completion and code-action latencies of benchmark 15. While a run is under way, everything that survived a
full collection is frozen (``gc.freeze``: never scanned again), so the next one scans only what is new
(10-25 ms). Cycles among frozen objects are only reclaimed once they are unfrozen: :func:`settle` does that,
with one full collection, when no job is left (the editor waits on nothing then).
"""

from __future__ import annotations

import gc
import threading
from typing import Any

_lock = threading.Lock()
_installed = False


def _freeze_after_full(phase: str, info: dict[str, Any]) -> None:
    if phase == "stop" and info.get("generation") == 2:
        gc.freeze()


def keep_pauses_short() -> None:
    """From now on, what survives a full collection is frozen (the server, while ops run); what lives now is
    frozen at once: the first full collection of a run scanned everything (60-100 ms in benchmark 15, the worst
    config-diagnostic latency), and :func:`settle` collected just before, so little garbage is frozen with it."""
    global _installed
    with _lock:
        if not _installed:
            gc.callbacks.append(_freeze_after_full)
            _installed = True
            gc.freeze()


def settle() -> None:
    """Nothing runs: unfreeze, reclaim the cycles that died frozen, and freeze again after the next full
    collection once work starts."""
    global _installed
    with _lock:
        if _installed:
            gc.callbacks.remove(_freeze_after_full)
            _installed = False
    gc.unfreeze()
    gc.collect()
