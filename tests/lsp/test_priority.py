"""The editor's work first (session/priority.py): a background thread waits at its safe point while a request
or an edit's check runs, never longer than MAX_WAIT at one point, and runs below the server's nice on Linux.
Real threads, real scheduling priorities."""

from __future__ import annotations

import os
import sys
import threading
import time

import pytest

from gpuemu_ls.session import priority


def test_a_safe_point_waits_while_interactive_work_runs_and_not_after() -> None:
    t0 = time.monotonic()
    priority.give_way()
    assert time.monotonic() - t0 < 0.04  # nothing interactive: no wait
    waited: list[float] = []

    def background() -> None:
        start = time.monotonic()
        priority.give_way()
        waited.append(time.monotonic() - start)

    with priority.interactive(), priority.interactive():  # nested: the outer one still counts
        pass
    with priority.interactive():
        worker = threading.Thread(target=background)
        worker.start()
        time.sleep(0.02)
        assert not waited  # still waiting at its safe point
    worker.join(5)
    assert waited and waited[0] >= 0.015, waited


def test_a_safe_point_never_waits_longer_than_max_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(priority, "MAX_WAIT", 0.2)
    with priority.interactive():  # a stream of requests must not starve the background
        t0 = time.monotonic()
        priority.give_way()
        took = time.monotonic() - t0
    assert 0.19 <= took < 2.0, took


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a thread's own nice value is Linux's")
def test_a_background_thread_runs_below_the_server_and_the_server_stays_where_it_was() -> None:
    base = os.getpriority(os.PRIO_PROCESS, os.getpid())
    seen: list[int] = []

    def work() -> None:
        priority.background()
        seen.append(os.getpriority(os.PRIO_PROCESS, threading.get_native_id()))

    t = threading.Thread(target=work)
    t.start()
    t.join(5)
    assert seen == [min(19, base + priority.BACKGROUND_NICE)]
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == base
