"""The fixed sample CI judges, and the combinations the harness is known to read wrong today.

KNOWN_WRONG holds each known-wrong combination once, with the reason: the generator and the
expected verdicts stay honest, and the CI sample leaves these out until the harness is fixed
(delete the entry then, and the sample takes them back).
"""

from __future__ import annotations

from tests.shapes.shape import GPU_FAULTS, GPU_PARTS, PARTS, Shape
from tests.shapes.strategies import draw

Rules = tuple[tuple[dict[str, str | tuple[str, ...]], str], ...]
"""Each rule: parts and the value (or values) each must have, and why."""

KNOWN_WRONG: Rules = ()

UNCERTAIN: Rules = (({"fault": "R5"}, "R5 crashes in most runs, not in every one: a run it spared is not comparable"),)
"""Left out of CI (whose tests must never fail on a correct tree): the fault does not fire in
every run. tools/shapes.py judges them on the runs whose truth confirms the fault."""

SEED = 20261207
SIZE = 32


def matches(shape: Shape, rules: Rules) -> str:
    """The reason of the first rule whose parts all match the shape ('' where none does)."""
    for parts, reason in rules:
        if all(getattr(shape, part) in (v if isinstance(v, tuple) else (v,)) for part, v in parts.items()):
            return reason
    return ""


GPU_SIZE = 6
"""The GPU gate's share: each CUDA fault twice, beside its other work within the gate's one call."""


def ci_sample() -> list[Shape]:
    """SIZE distinct shapes of a fixed seed's draw, known-wrong and uncertain ones left out: first
    those that bring a part's value no earlier one had (every value is met), then the rest in order."""
    return _covering(draw(20 * SIZE, SEED), SIZE)


def gpu_sample() -> list[Shape]:
    """GPU_SIZE shapes whose faults need CUDA (reduce-overhead threads, capture beside eager work,
    autograd threads), drawn as the CPU sample is: the GPU gate judges them on its host."""
    pool = _covering(draw(20 * GPU_SIZE, SEED, GPU_PARTS), 20 * GPU_SIZE)
    each = GPU_SIZE // len(GPU_FAULTS)
    return [s for fault in GPU_FAULTS for s in [s for s in pool if s.fault == fault][:each]]


def _covering(drawn: list[Shape], size: int) -> list[Shape]:
    pool = list(dict.fromkeys(s for s in drawn if not matches(s, KNOWN_WRONG + UNCERTAIN)))
    out: list[Shape] = []
    for shape in pool:
        if any(getattr(shape, part) not in {getattr(s, part) for s in out} for part in PARTS):
            out.append(shape)
    out += [s for s in pool if s not in out]
    return out[:size]
