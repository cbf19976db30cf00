"""A store writer for the concurrency and fault tests: ``python store_writer.py DB N BATCH [options]``.

Writes ``N`` transactions through the real :class:`gpuemu_ls.engine.store.db.Store` (the code every face
uses): one run, and per transaction ``BATCH`` failing cases of seed ``i`` (each with an input snapshot
of ``--snapshot-kb`` KiB of incompressible data, so transactions can be made large), committed by one
``add_cases`` call. After each commit it prints ``committed RUN_ID I`` and flushes, so a test knows
exactly which transactions must survive a kill. ``--start-file F`` waits for F to exist first (writers
start together); ``--until-file F`` goes on
writing after N until F exists; ``--fsize BYTES`` sets RLIMIT_FSIZE with SIGXFSZ ignored (a full disk: writes fail
with EFBIG). Exit 0 when done, 3 on a StoreError (its message on stderr), 4 on "database is locked".
"""

from __future__ import annotations

import argparse
import os
import resource
import signal
import sqlite3
import sys
import time
from pathlib import Path


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("db")
    p.add_argument("n", type=int)
    p.add_argument("batch", type=int)
    p.add_argument("--snapshot-kb", type=int, default=0)
    p.add_argument("--start-file")
    p.add_argument("--fsize", type=int)
    p.add_argument("--op", default="writer")
    p.add_argument("--until-file", help="after N transactions, go on (one every 20 ms) until this file exists")
    args = p.parse_args()
    if args.fsize:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (args.fsize, args.fsize))

    import numpy as np

    from gpuemu_ls.engine.cases.plan import CaseSpec
    from gpuemu_ls.engine.run.case import CaseResult
    from gpuemu_ls.engine.store.db import Store, StoreError

    if args.start_file:
        print("ready", flush=True)
        while not Path(args.start_file).exists():
            time.sleep(0.005)
    try:
        store = Store(Path(args.db))
        run_id = store.begin_run(
            source="api",
            mode="fuzz",
            seed=0,
            iterations=args.n,
            workspace=Path.cwd(),
            config_hash="",
            command=f"store_writer {os.getpid()}",
        )
        print(f"run {run_id}", flush=True)
        rng = np.random.default_rng(os.getpid())
        n_floats = args.snapshot_kb * 1024 // 8
        i = -1
        while True:
            i += 1
            if i >= args.n and (not args.until_file or Path(args.until_file).exists()):
                break
            if i >= args.n:
                time.sleep(0.02)
            results = []
            for j in range(args.batch):
                spec = CaseSpec(
                    args.op,
                    i,
                    "default",
                    "float32",
                    "contiguous",
                    "normal",
                    {"B": 1, "N": max(1, n_floats)},
                    {"x": (1, max(1, n_floats))},
                )
                snap = {"x": rng.standard_normal((1, max(1, n_floats)))} if args.snapshot_kb else None
                results.append(
                    CaseResult(
                        args.op, i, spec, "failed", "mismatch", f"writer {os.getpid()} tx {i} row {j}", snapshot=snap
                    )
                )
            store.add_cases(run_id, results)
            print(f"committed {run_id} {i}", flush=True)
        store.finish_run(run_id, "failed")
        store.close()
    except StoreError as exc:
        print(f"STORE_ERROR: {exc}", file=sys.stderr, flush=True)
        return 3
    except sqlite3.OperationalError as exc:
        print(f"SQLITE_ERROR: {exc}", file=sys.stderr, flush=True)
        return 4 if "locked" in str(exc) else 5
    return 0


if __name__ == "__main__":
    sys.exit(main())
