"""stream-sync: the target loop waits on its own stream, not the device, once the fix is on.

The GPU side (a device-wide synchronize failing beside another thread's capture, the stream wait
not) is repro r23's to show on a CUDA machine; here, which wait the loop asks for and what
`devices.synchronize` calls for each.
"""

from __future__ import annotations

import types

import pytest
import torch

import dflash.devices as devices
import dflash.target_loop as target_loop
from dflash.batch import TokenBatch
from harness.runtime.fixes import FixSet


def _loop(fs: FixSet) -> target_loop.TargetForwardLoop:
    loop = target_loop.TargetForwardLoop.__new__(target_loop.TargetForwardLoop)
    loop.devices = (torch.device("cuda:0"),)  # never touched: synchronize is replaced below
    loop.layer_ids = (1,)
    loop.fs = fs
    return loop


def _batch() -> TokenBatch:
    ids = torch.zeros(1, 4, dtype=torch.int64)
    return TokenBatch(seq=0, epoch=0, bucket=4, indices=(0,), input_ids=ids, loss_mask=ids, lengths=torch.tensor([4]))


@pytest.mark.parametrize(
    "fixes, stream_only", [((), False), (("stream-sync",), True), (("global-lock", "stream-sync"), True)]
)
def test_the_loop_asks_for_the_wait_the_fix_says(monkeypatch, fixes, stream_only):
    calls = []
    monkeypatch.setattr(target_loop, "synchronize", lambda device, stream_only=False: calls.append(stream_only))
    monkeypatch.setattr(torch.Tensor, "to", lambda self, *a, **k: self)
    fs = FixSet.from_names(fixes)
    hb = _loop(fs).forward(0, lambda ids, mask, layers: ids.float(), _batch())
    assert calls == [stream_only]
    assert hb.context.shape == (1, 4)
    assert fs.counts.get("stream-sync", 0) == (1 if stream_only else 0)


def test_on_cpu_the_fix_does_not_count_as_acting(monkeypatch):
    monkeypatch.setattr(target_loop, "synchronize", lambda device, stream_only=False: None)
    fs = FixSet.from_names(["stream-sync"])
    loop = _loop(fs)
    loop.devices = (torch.device("cpu"),)
    loop.forward(0, lambda ids, mask, layers: ids.float(), _batch())
    assert fs.counts["stream-sync"] == 0


def test_synchronize_waits_on_the_current_stream_only_when_asked(monkeypatch):
    seen = []
    stream = types.SimpleNamespace(synchronize=lambda: seen.append("stream"))
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: seen.append(("current", device)) or stream)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: seen.append(("device", device)))
    cuda = torch.device("cuda:0")
    devices.synchronize(cuda)
    assert seen == [("device", cuda)]
    seen.clear()
    devices.synchronize(cuda, stream_only=True)
    assert seen == [("current", cuda), "stream"]
    seen.clear()
    devices.synchronize(torch.device("cpu"), stream_only=True)
    devices.synchronize(torch.device("cpu"))
    assert seen == []
