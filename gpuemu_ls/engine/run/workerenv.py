"""The environment worker processes start with, and the one they give back to the user's code.

Workers (the zygote and its forks, or fresh interpreters where it cannot run) start with a malloc tunable
that glibc reads only at an interpreter's start; before any op, reference or script runs, the process
puts the user's own environment back, so what they see is what ``python script.py`` would.
"""

from __future__ import annotations

import os

#: glibc's malloc backs its heap with transparent huge pages where the kernel allows it (THP ``madvise`` mode).
#: Each script call is a fork that writes megabytes of fresh memory (its request, arrays, answer): one fault
#: per 4 KiB page took ~4 µs on a VM, 2,000 a call for a float64 [64,1024] softmax reference; with huge pages
#: a third fewer, and the worker's own heap faults less after each fork. Set at the interpreter's start (glibc
#: reads it only then), taken out of the environment again before any user code runs (:func:`own_environ`).
_MALLOC_TUNABLE = "glibc.malloc.hugetlb=1"
_USER_TUNABLES = "GPUEMU_USER_GLIBC_TUNABLES"  # the user's own GLIBC_TUNABLES ("-" when unset), restored
_UNSET = "-"


def malloc_env(env: dict[str, str]) -> None:
    """Add the tunable to ``env`` (a new interpreter's), keeping the user's own value to restore."""
    user = env.get("GLIBC_TUNABLES")
    if user is not None and "glibc.malloc.hugetlb" in user:
        return  # the user's own choice stands
    env[_USER_TUNABLES] = _UNSET if user is None else user
    env["GLIBC_TUNABLES"] = f"{user}:{_MALLOC_TUNABLE}" if user else _MALLOC_TUNABLE


def own_environ() -> None:
    """Give this process (a zygote or worker) back the environment its user had: ops and scripts see no tunable."""
    user = os.environ.pop(_USER_TUNABLES, None)
    if user is None:
        return
    if user == _UNSET:
        os.environ.pop("GLIBC_TUNABLES", None)
    else:
        os.environ["GLIBC_TUNABLES"] = user


__all__ = ["malloc_env", "own_environ"]
