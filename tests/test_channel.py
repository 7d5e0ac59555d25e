"""Channels, the ordered receiver, the startup gate, turns and the heartbeat file."""

from __future__ import annotations

import os
import threading
import time

import pytest

from dflash.channel import Channel, ChannelClosed, OrderedReceiver, StartupGate, Turns
from dflash.heartbeat import Heartbeat
from dflash.trainer_errors import StageStopped

POLL_S = 0.01


def run_thread(fn, name="t"):
    box: dict = {}

    def body():
        try:
            box["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - handed back to the test
            box["error"] = e

    t = threading.Thread(target=body, name=name)
    t.start()
    return t, box


def test_channel_close_unblocks_getter():
    stop = threading.Event()
    ch: Channel[int] = Channel("c", 2, stop, POLL_S)
    t, box = run_thread(ch.get)
    time.sleep(0.05)
    ch.close()
    t.join(2)
    assert not t.is_alive()
    assert isinstance(box["error"], ChannelClosed)


def test_channel_delivers_items_before_close_then_closed_to_every_consumer():
    stop = threading.Event()
    ch: Channel[int] = Channel("c", 4, stop, POLL_S)
    ch.put(1)
    ch.put(2)
    ch.close()
    assert [ch.get(), ch.get()] == [1, 2]
    for _ in range(3):  # the sentinel is put back for the next consumer
        with pytest.raises(ChannelClosed):
            ch.get()


def test_full_channel_applies_backpressure_until_stop():
    stop = threading.Event()
    ch: Channel[int] = Channel("c", 1, stop, POLL_S)
    ch.put(0)
    t, box = run_thread(lambda: ch.put(1))
    time.sleep(0.1)
    assert t.is_alive(), "put on a full channel returned"
    assert ch.depth() == 1
    stop.set()
    t.join(2)
    assert isinstance(box["error"], StageStopped)


def test_get_raises_stage_stopped_on_stop():
    stop = threading.Event()
    ch: Channel[int] = Channel("c", 1, stop, POLL_S)
    t, box = run_thread(ch.get)
    stop.set()
    t.join(2)
    assert isinstance(box["error"], StageStopped)


def test_ordered_receiver_hands_each_seq_to_its_asker():
    stop = threading.Event()
    ch: Channel[int] = Channel("c", 2, stop, POLL_S)
    rx = OrderedReceiver(ch, key=lambda x: x, stop=stop, poll_s=POLL_S)
    got: dict[int, list[int]] = {0: [], 1: [], 2: []}

    def consumer(m: int):
        for step in range(10):
            got[m].append(rx.get(step * 3 + m))

    threads = [run_thread(lambda m=m: consumer(m), f"c{m}") for m in range(3)]
    for seq in [2, 0, 1, 5, 4, 3] + list(range(6, 30))[::-1]:  # out of order
        ch.put(seq)
    for t, box in threads:
        t.join(5)
        assert "error" not in box, box
    assert got == {m: [s * 3 + m for s in range(10)] for m in range(3)}
    assert rx.buffered() == 0


def test_ordered_receiver_reports_close_before_seq():
    stop = threading.Event()
    ch: Channel[int] = Channel("c", 2, stop, POLL_S)
    rx = OrderedReceiver(ch, key=lambda x: x, stop=stop, poll_s=POLL_S)
    ch.put(0)
    ch.close()
    assert rx.get(0) == 0
    with pytest.raises(ChannelClosed):
        rx.get(1)


def test_gate_opens_when_all_parties_are_ready():
    stop = threading.Event()
    opened = []
    gate = StartupGate(2, stop, timeout_s=5, poll_s=POLL_S, on_open=lambda: opened.append(1))
    t, box = run_thread(gate.wait)
    gate.ready()
    time.sleep(0.05)
    assert t.is_alive() and not gate.is_open
    gate.ready()
    t.join(2)
    assert not t.is_alive() and gate.is_open and opened == [1]


def test_gate_times_out_with_a_clear_message():
    gate = StartupGate(3, threading.Event(), timeout_s=0.05, poll_s=POLL_S)
    gate.ready()
    with pytest.raises(TimeoutError, match="1/3 drafter threads ready"):
        gate.wait()


def test_turns_run_in_thread_order():
    stop = threading.Event()
    turns = Turns(3, stop, POLL_S)
    order: list[int] = []

    def body(i: int):
        turns.acquire(i)
        order.append(i)
        turns.release(i)

    threads = [run_thread(lambda i=i: body(i)) for i in (2, 0, 1)]
    for t, _ in threads:
        t.join(2)
    assert order == [0, 1, 2]


def test_heartbeat_writes_counter_and_time_atomically(tmp_path):
    path = str(tmp_path / "hb")
    hb = Heartbeat(path, min_interval_s=0.2)
    hb.beat()
    first = open(path).read()
    count, stamp = first.split()
    assert first.endswith("\n") and count == "1" and abs(float(stamp) - time.time()) < 5
    for _ in range(50):  # rate-limited: no rewrite within the interval
        hb.beat()
    assert open(path).read() == first
    time.sleep(0.25)
    hb.beat()
    assert open(path).read().split()[0] == "52"
    assert sorted(os.listdir(tmp_path)) == ["hb"]  # no temp file left behind


def test_heartbeat_without_path_does_nothing(tmp_path):
    Heartbeat(None).beat()
    assert os.listdir(tmp_path) == []
