"""The one worker loop of matrix, stress and hunt (harness.campaign.loop): named workers over a
take(), errors surfaced, bad input as itself, Ctrl-C as a flag that kills the runs in flight, and a
worker that outlives the deadline named."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from harness.args import UsageError
from harness.campaign import loop as loop_module
from harness.campaign.loop import WorkLoop


def _taking(items: list[int]):
    lock = threading.Lock()

    def take() -> int | None:
        with lock:
            return items.pop(0) if items else None

    return take


def test_every_item_runs_once_in_named_workers():
    done: list[tuple[int, str]] = []
    loop = WorkLoop(
        "t",
        workers=3,
        take=_taking(list(range(20))),
        work=lambda i: done.append((i, threading.current_thread().name)),
        longest_s=5,
    )
    loop.run()
    assert sorted(i for i, _ in done) == list(range(20))
    assert {name for _, name in done} <= {"harness-t-0", "harness-t-1", "harness-t-2"}
    assert not loop.interrupted


def test_a_worker_error_stops_the_others_and_surfaces_as_a_group():
    ran: list[int] = []

    def work(i: int) -> None:
        if i == 2:
            raise ValueError("boom")
        ran.append(i)

    loop = WorkLoop("t", workers=1, take=_taking(list(range(10))), work=work, longest_s=5)
    with pytest.raises(ExceptionGroup) as info:
        loop.run()
    assert [str(e) for e in info.value.exceptions] == ["boom"]
    assert ran == [0, 1]


def test_bad_input_met_by_a_worker_is_raised_as_itself():
    def work(i: int) -> None:
        raise UsageError("node x has no folder /y")

    with pytest.raises(UsageError, match="no folder"):
        WorkLoop("t", workers=2, take=_taking([1, 2]), work=work, longest_s=5).run()


def test_ctrl_c_is_a_flag_that_kills_the_runs_in_flight_and_takes_no_more(capsys):
    started = threading.Event()
    release = threading.Event()
    taken: list[int] = []
    kills: list[int] = []

    def work(i: int) -> None:
        taken.append(i)
        started.set()
        release.wait(5)

    def kill() -> int:
        kills.append(1)
        release.set()
        return 1

    loop = WorkLoop("t", workers=1, take=_taking(list(range(5))), work=work, longest_s=5, kill_running=kill)
    threading.Timer(0.0, lambda: started.wait(5) and os.kill(os.getpid(), signal.SIGINT)).start()
    loop.run()
    assert loop.interrupted and taken == [0] and kills
    assert "interrupted: killed 1 running run(s), not recorded" in capsys.readouterr().err


def test_a_worker_alive_past_the_deadline_is_named(monkeypatch):
    """After an interrupt the join waits the longest run plus the margin, killing, then names who is left."""
    monkeypatch.setattr(loop_module, "JOIN_MARGIN_S", 0.2)
    started, stop = threading.Event(), threading.Event()

    def work(i: int) -> None:
        started.set()
        stop.wait(10)

    loop = WorkLoop("t", workers=1, take=_taking([1]), work=work, longest_s=0.1, kill_running=lambda: 0)
    threading.Timer(0.0, lambda: started.wait(5) and loop.interrupt()).start()
    start = time.monotonic()
    try:
        with pytest.raises(RuntimeError, match=r"t workers still running after their deadline: \['harness-t-0'\]"):
            loop.run()
    finally:
        stop.set()
    assert time.monotonic() - start < 5
