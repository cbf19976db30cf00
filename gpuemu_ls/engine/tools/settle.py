"""Op entries made as each op finishes, so a long run holds no op's cases to its end (issue 31).

The gate used to keep every op's case results until the results document was built: ~7 KB a case, 729 MB at
1,000 ops thorough. Now each op's document entry is made the moment the op is done (its cases stored, its
diagnosis made) and its cases go; the entry is kept pickled, one compact block an op rather than a tree of small
objects among the next ops' short-lived ones (which kept the allocator's pages from being given back).
"""

from __future__ import annotations

import pickle
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
        entry: dict[str, Any] = pickle.loads(self._kept[op])
        return entry

    def __iter__(self) -> Iterator[str]:
        return iter(self._kept)

    def __len__(self) -> int:
        return len(self._kept)


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
