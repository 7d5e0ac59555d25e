"""Hypothesis strategies over the four parts, invalid combinations left out, and the shrink of a
wrong verdict toward its smallest program.

Each part is `sampled_from` its values simplest first (tests/shapes/shape.py), which is the order
hypothesis shrinks toward; `simpler` is the same shrink without hypothesis, part by part, for a
wrong verdict found outside a hypothesis run (tools/shapes.py).
"""

from __future__ import annotations

import random
from collections.abc import Callable

from hypothesis import strategies as st

from tests.shapes.shape import GPU_PARTS, PARTS, Shape


def shapes(parts: dict[str, tuple[str, ...]] = PARTS) -> st.SearchStrategy[Shape]:
    return st.builds(Shape, **{part: st.sampled_from(values) for part, values in parts.items()}).filter(
        lambda s: not s.why_invalid()
    )


def gpu_shapes() -> st.SearchStrategy[Shape]:
    return shapes(GPU_PARTS)


def draw(n: int, seed: int, parts: dict[str, tuple[str, ...]] = PARTS) -> list[Shape]:
    """n valid shapes drawn uniformly per part with a fixed seed (redrawn where invalid); `parts`:
    GPU_PARTS draws the faults that need CUDA."""
    rng = random.Random(seed)
    out: list[Shape] = []
    while len(out) < n:
        shape = Shape(*(rng.choice(values) for values in parts.values()))
        if not shape.why_invalid():
            out.append(shape)
    return out


def simpler(shape: Shape) -> list[Shape]:
    """The valid shapes one part simpler than this one: each part's simplest value first, then each
    part's second, so that a small budget reaches every part."""
    out = []
    for rank in range(max(len(values) for values in PARTS.values())):
        for part, values in PARTS.items():
            if rank < values.index(getattr(shape, part)):
                candidate = Shape(**{**_parts(shape), part: values[rank]})
                if not candidate.why_invalid():
                    out.append(candidate)
    return out


def shrink(shape: Shape, still_wrong: Callable[[Shape], bool], budget: int = 12) -> Shape:
    """The smallest shape still wrong, trying at most `budget` candidates (each a stress run)."""
    tried = 0
    improved = True
    while improved and tried < budget:
        improved = False
        for candidate in simpler(shape):
            tried += 1
            if still_wrong(candidate):
                shape, improved = candidate, True
                break
            if tried >= budget:
                break
    return shape


def _parts(shape: Shape) -> dict[str, str]:
    return {part: getattr(shape, part) for part in PARTS}
