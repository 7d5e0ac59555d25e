"""Which frames of a stack count in a signature: a frame's module wherever the tree lives
(`module_of`: site-packages, the project's roots, Inductor's generated code), its id in a key
(`frame_id`), the plumbing left out (IGNORED_MODULES, IGNORED_FRAMES), and the top frames and the
torch entry frame that keys are made of.

What these functions return goes into signature keys (harness.trial.signature): a change that
moves a key bumps SIGNATURE_VERSION there.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from harness.trial.hangs import Frame

MAX_FRAMES = 3  # top frames in a key (ClusterFuzz's MAX_CRASH_STATE_FRAMES)

# Plumbing frames dropped before taking the top frames (ClusterFuzz STACK_FRAME_IGNORE_REGEXES).
IGNORED_MODULES = (
    "threading",
    "queue",
    "subprocess",
    "concurrent.futures",
    "runpy",
    "contextlib",
    "functools",
    "importlib",
    "selectors",
    "multiprocessing",
    "sitecustomize",
    "harness.trial.bootstrap",
    "harness.faults",
    "harness.runtime.failpoints",
    "harness.runtime.faults",
    "harness.bootstrap",
    "harness.scheduler",
    "harness.points",
    "dflash.faults",  # their paths in outputs stored before
    "torch.utils._contextlib",
)
IGNORED_FRAMES = frozenset(
    {
        ("torch.nn.modules.module", "_call_impl"),
        ("torch.nn.modules.module", "_wrapped_call_impl"),
    }
)


_MODULE_ANCHORS = (re.compile(r"(?:site-packages|dist-packages)/(.*)$"), re.compile(r"lib/python\d+\.\d+/(.*)$"))
_PROJECT_ROOTS = ("dflash", "harness", "repro", "torch")


# Inductor's generated wrapper modules live in its code cache as `<cache>/xx/c<51 chars>.py`, named by
# a hash of the generated source: one graph recompiled for other shapes, or under another torch or
# config, gets another name (the mix-order failure split into two keys by it, results/gpu-shape2).
_INDUCTOR_OUTPUT = re.compile(r"(?:^|/)c[a-z0-9]{51}\.py$")
INDUCTOR_OUTPUT = "<inductor-output>"


def module_of(filename: str) -> str:
    """Dotted module for a frame's file, independent of where the tree lives."""
    path = filename.replace("\\", "/")
    if _INDUCTOR_OUTPUT.search(path):
        return INDUCTOR_OUTPUT
    anchored = next((m for m in (a.search(path) for a in _MODULE_ANCHORS) if m), None)
    if anchored:
        rel = anchored.group(1)
    else:
        parts = path.split("/")
        roots = [i for i, p in enumerate(parts[:-1]) if p in _PROJECT_ROOTS]
        rel = "/".join(parts[roots[-1] :]) if roots else parts[-1]
    rel = re.sub(r"\.py$", "", rel).replace("/", ".")
    return re.sub(r"\.__init__$", "", rel)


def frame_id(frame: Frame) -> str:
    """`module:function`; qualified names are cut to the function so that py-spy
    (`Thread.run`), faulthandler and tracebacks (`run`) agree."""
    return f"{module_of(frame.filename)}:{frame.name.rsplit('.', 1)[-1]}"


def is_meaningful(frame: Frame) -> bool:
    if not frame.is_python or frame.filename.startswith("<frozen"):
        return False
    module = module_of(frame.filename)
    func = frame.name.rsplit(".", 1)[-1]
    if (module, func) in IGNORED_FRAMES:
        return False
    return not any(module == m or module.startswith(m + ".") for m in IGNORED_MODULES)


def top_frames(frames: Iterable[Frame], limit: int = MAX_FRAMES) -> tuple[str, ...]:
    return tuple(frame_id(f) for f in frames if is_meaningful(f))[:limit]


def is_torch(frame: Frame) -> bool:
    module = module_of(frame.filename)
    return module == "torch" or module.startswith("torch.")


def is_library(frame: Frame) -> bool:
    """A frame of the standard library or an installed package: not the program's own code."""
    path = frame.filename.replace("\\", "/")
    return (
        path.startswith("<frozen")
        or "/site-packages/" in path
        or "/dist-packages/" in path
        or re.search(r"/lib/python\d+\.\d+/", path) is not None
    )


def torch_entry(frames: tuple[Frame, ...]) -> str | None:
    """Outermost meaningful torch frame: where the caller entered torch."""
    for frame in reversed(frames):
        module = module_of(frame.filename)
        if is_meaningful(frame) and (module == "torch" or module.startswith("torch.")):
            return frame_id(frame)
    return None
