"""Which fixes to run with: the sets measured clean per torch, device kind and compile mode.

`fixes=recommended` resolves here at start (the trainer, `harness stress --fix recommended`,
`Guard.recommended`), so that a run names the set it used and the evidence behind it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from harness.runtime.fixes.registry import parse_names


@dataclasses.dataclass(frozen=True, slots=True)
class Recommendation:
    """The fix set to run with on one torch, device kind and compile mode, and why."""

    names: tuple[str, ...]
    evidence: str
    """Where the set was measured clean (store, cells, k/n), or why it is a prediction."""
    measured: bool
    """True: measured clean on this torch (major.minor) and device kind; False: carried over from
    the nearest measured version (a prediction until a run on this torch says otherwise)."""

    def line(self) -> str:
        state = "measured" if self.measured else "predicted"
        return f"fixes=recommended -> {','.join(self.names) or 'none'} ({state}: {self.evidence})"


# (device kind, compile records CUDA graphs) -> (torch major.minor measured, names, evidence).
# Counts are the stores' (`python -m harness families`, `harness matrix --pending`); a test holds
# each rule's fixes to the registry and its cells to the stores.
_RECOMMENDED: dict[tuple[str, bool], tuple[str, tuple[str, ...], str]] = {
    # The only trainer race on the CPU: transformers' hidden-state capture under another thread's
    # compile (r19, transformers#44614); tiny-ro raw 10/10, target-hook-taps 0/10.
    ("cpu", False): (
        "2.13",
        ("target-hook-taps",),
        "results/cpu-target-taps tiny-ro:target-hook-taps@- 0/10 vs raw 10/10",
    ),
    ("cpu", True): (
        "2.13",
        ("target-hook-taps",),
        "results/cpu-target-taps tiny-ro:target-hook-taps@- 0/10 vs raw 10/10",
    ),
    # Without CUDA graphs the lazy backward compile on the autograd device thread hangs (G2):
    # no-cudagraphs 26/40 raw, no-cudagraphs+global-lock 0/53 over both presets.
    ("cuda", False): (
        "2.11",
        ("global-lock", "target-hook-taps"),
        "results/gpu-campaign *:no-cudagraphs+global-lock 0/53 vs *:no-cudagraphs 26/40",
    ),
    # The launch-bound recommendation (REPORT.md's answer at a glance): 0/39, 29 stressed, and
    # 0/29 more with the race windows measured (all shut).
    ("cuda", True): (
        "2.11",
        ("global-lock", "cstash-tls-init", "cublas-handle-init", "stash-incref", "stream-sync"),
        "results/gpu-campaign launch-bound:global-lock+cstash-tls-init+cublas-handle-init"
        "+stash-incref+stream-sync 0/39; results/gpu-exposure the same cell 0/29",
    ),
}


# An eager GPU trainer (compile.mode=none) needs no fix: the eager cells of three presets ran
# clean, 93 of them under the dflash-stages scheduler plan.
_EAGER_CUDA = (
    "2.11",
    (),
    "results/gpu-campaign launch-bound:eager 0/40, gpu-bound:eager 0/44 (9 out of memory left out); "
    "results/gpu-exposure default:eager 0/29",
)


def recommended(torch_version: str, device_type: str, *, cudagraphs: bool, compiled: bool = True) -> Recommendation:
    """The recommended fix set for a run: measured where the store's torch (major.minor) is the
    installed one, else the nearest measured set, labelled a prediction. `compiled=False` (an
    eager drafter step) on CUDA: none."""
    kind = "cuda" if device_type == "cuda" else "cpu"
    rule = _EAGER_CUDA if kind == "cuda" and not compiled else _RECOMMENDED[(kind, cudagraphs)]
    measured_on, names, evidence = rule
    here = ".".join(torch_version.split("+")[0].split(".")[:2])
    if here == measured_on:
        return Recommendation(names, f"torch {measured_on}, {evidence}", True)
    return Recommendation(names, f"measured on torch {measured_on} only ({evidence})", False)


def resolve_names(
    names: Iterable[str], torch_version: str, device_type: str, *, cudagraphs: bool, compiled: bool = True
) -> tuple[tuple[str, ...], Recommendation | None]:
    """The registry names a run uses, and the Recommendation if `recommended` was among `names`
    (its set first, then any extra names)."""
    explicit, wants = parse_names(names)
    if not wants:
        return tuple(explicit), None
    rec = recommended(torch_version, device_type, cudagraphs=cudagraphs, compiled=compiled)
    return tuple(dict.fromkeys((*rec.names, *explicit))), rec
