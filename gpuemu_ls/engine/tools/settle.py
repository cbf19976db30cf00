"""Op entries made as each op finishes, so a long run holds no op's cases to its end (issue 31).

The gate used to keep every op's case results until the results document was built: ~7 KB a case, 729 MB at
1,000 ops thorough. Now each op's document entry is made the moment the op is done (its cases stored, its
diagnosis made) and its cases go; the entry is kept pickled, one compact block an op rather than a tree of small
objects among the next ops' short-lived ones (which kept the allocator's pages from being given back). Entries
read back share one string per key and per short value (`"status"`, `"float32"`, ...): at 3,000 ops the document
holds ~75,000 small dicts, and their copies of the same few hundred strings were a third of its memory.
"""

from __future__ import annotations

import pickle
import sys
from collections.abc import Iterator, Mapping
from typing import Any

from ..config.model import Config
from ..oracle.outcome import OpOutcome
from ..report.results import op_entry_dict
from ..run.validate import RunOptions


class SettledOps(Mapping[str, dict[str, Any]]):
    """The entries of the ops finished so far, by op: each read gives a fresh copy of what was made."""

    def __init__(self) -> None:
        self._kept: dict[str, bytes] = {}

    def settle(self, config: Config, outcome: OpOutcome) -> None:
        self._kept[outcome.op] = pickle.dumps(op_entry_dict(config, outcome), protocol=pickle.HIGHEST_PROTOCOL)
        outcome.cases = []  # the entry holds what the document shows of them; the store holds them all

    def __getitem__(self, op: str) -> dict[str, Any]:
        entry: dict[str, Any] = _shared(pickle.loads(self._kept[op]))
        return entry

    def __iter__(self) -> Iterator[str]:
        return iter(self._kept)

    def __len__(self) -> int:
        return len(self._kept)


#: Longer strings (messages, diagnoses, commands) are seldom repeated: sharing them would only cost the lookups.
SHARED_LEN = 40


def _shared(value: Any) -> Any:
    """``value`` with its dict keys and short strings interned (the same data, one copy of each string)."""
    if isinstance(value, dict):
        return {sys.intern(k) if isinstance(k, str) else k: _shared(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_shared(v) for v in value]
    if isinstance(value, str) and len(value) <= SHARED_LEN:
        return sys.intern(value)
    return value


def settle_ops(config: Config, options: RunOptions) -> SettledOps:
    """Hook ``options`` (its ``on_op``, after any it had) so every op's entry is made as it finishes."""
    settled = SettledOps()
    chained = options.on_op

    def on_op(outcome: OpOutcome) -> None:
        if chained is not None:
            chained(outcome)
        settled.settle(config, outcome)

    options.on_op = on_op
    return settled
