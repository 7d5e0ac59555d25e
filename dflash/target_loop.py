"""Target stage: N threads `dflash-target-n` run the frozen target and emit `HiddenBatch`es.

Thread n runs on `plan.target[n]`; threads on one device share that device's target model
(frozen, eval, no_grad: read-only). The context tensor handed to the drafter is owned: the
target's `torch.cat` of the tapped layers allocates it fresh on every forward, and the target is
compiled (if at all) without cudagraphs, whose outputs would be overwritten by the next replay.
The last thread to see its input channel closed closes the output channel.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable

import torch

from dflash.batch import HiddenBatch, TokenBatch
from dflash.channel import Channel, ChannelClosed
from dflash.config import CompileConfig
from dflash.devices import bind_thread, synchronize
from dflash.heartbeat import beat
from dflash.metrics import Metrics
from dflash.step import compile_fn
from dflash.target import TargetModel, document_inputs
from harness.runtime.failpoints import fault_point
from harness.runtime.fixes import call_key

STAGE = "target"


class TargetForwardLoop:
    def __init__(
        self,
        *,
        targets: dict[torch.device, TargetModel],
        devices: tuple[torch.device, ...],
        layer_ids: tuple[int, ...],
        inp: Channel,
        out: Channel,
        ccfg: CompileConfig,
        fs,
        metrics: Metrics,
    ) -> None:
        self.targets = targets
        self.devices = devices
        self.layer_ids = layer_ids
        self.inp, self.out = inp, out
        self.ccfg = ccfg
        self.fs = fs
        self.metrics = metrics
        self._live = len(devices)
        self._live_lock = threading.Lock()

    def _forward_fn(self, target: TargetModel) -> Callable:
        tap = target.hidden_hooked if self.fs.active("target-hook-taps") else target.hidden
        if not self.ccfg.compile_target:
            return tap
        # mode default (never cudagraphs): the output must stay valid after the next forward.
        return compile_fn(
            self.fs.isolate(tap), CompileConfig(mode="default", backend=self.ccfg.backend, dynamic=self.ccfg.dynamic)
        )

    def forward(self, n: int, fwd: Callable, tb: TokenBatch) -> HiddenBatch:
        device = self.devices[n]
        input_ids = tb.input_ids.to(device, non_blocking=True)  # [B, L]
        fault_point("target.before_forward")
        doc_ids = None if tb.doc_ids is None else tb.doc_ids.to(device, non_blocking=True)
        # An eager target's forward may leave the call locks (eager-target-unlocked): a compiled
        # one never does.
        unlocked = self.fs.active("eager-target-unlocked") and not self.ccfg.compile_target
        call = contextlib.nullcontext() if unlocked else self.fs.around_call(call_key(fwd, input_ids, doc_ids))
        if unlocked:
            self.fs.note("eager-target-unlocked")
        with call:
            if doc_ids is None:
                # No attention mask: padding is on the right and the target is causal, so real
                # positions never attend to padding (and one fewer input keeps compiles simple).
                context = fwd(input_ids, None, self.layer_ids)  # [B, L, k*H], fresh per forward
            else:
                # Packed documents: a document's states must not depend on the others, or the
                # drafter learns from context it never has at inference (dflash.target).
                mask, positions = document_inputs(doc_ids)
                context = fwd(input_ids, mask, self.layer_ids, positions)
            self.fs.note("target-hook-taps")
        fault_point("target.after_forward")
        # synchronize (not an event): the drafter thread reads `context` on another stream.
        # Device-wide unless stream-sync: a drafter capturing on this device makes the device-wide
        # one fail (r23).
        stream_only = self.fs.active("stream-sync")
        synchronize(device, stream_only=stream_only)
        if stream_only and device.type == "cuda":  # on CPU there is no wait to change
            self.fs.note("stream-sync")
        return HiddenBatch(tokens=tb, context=context)

    def run(self, n: int) -> None:
        """Body of thread dflash-target-n."""
        try:
            bind_thread(self.devices[n])
            self.fs.on_device(self.devices[n])
            fwd = self._forward_fn(self.targets[self.devices[n]])
            while True:
                try:
                    tb = self.inp.get()
                except ChannelClosed:
                    return
                fault_point("target.after_get")
                with self.metrics.busy(STAGE):
                    hb = self.forward(n, fwd, tb)
                fault_point("target.before_put")
                self.out.put(hb)
                beat()
        finally:
            with self._live_lock:
                self._live -= 1
                last = self._live == 0
            if last:
                self.out.close()
