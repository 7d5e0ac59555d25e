"""Named fix strategies for multi-threaded torch.compile, toggled by name.

Each fix is a small object (like Hypothesis' ShrinkPass) whose docstring says what it does, which
failure modes it targets (catalogue ids F1..F14, R1..R9, G1, G2, rNN: docs/glossary.md), and the
upstream issue/PR. A `FixSet` holds the active ones and counts how often each acted.

Hooks a fix may implement:
- `thread_start(role) -> bool`: per-thread initialisation, called by every worker thread at the
  top of its body (TLS seeding; per-thread Dynamo config, because torch 2.13 keeps config
  overrides in a ContextVar that a new thread does not inherit: F14).
- `on_device(device) -> bool`: called by a pipeline thread right after it binds its device.
- `enter() -> object | None` / `exit(token)`: wrapped around every compiled call and backward
  by `FixSet.around_call()`.
- `isolate(fn) -> fn`: give `fn` its own Dynamo cache (graph isolation).
Policy fixes have no hook: the pipeline reads `fs.active(name)` and records actions with
`fs.note(name)`.

Where they live: one module per family (`global_lock`, `phase_lock`, `cudagraph_trees`, `stash`,
`device_init`, `dynamo`, `autograd`, `stance`, `policies`), the one table of names
(`registry.FIXES`), the entry points that apply a run's set (`fixset.FixSet`), and the sets
measured clean per torch and device (`recommended_sets`).
"""

from harness.runtime.fixes.base import Fix, Policy
from harness.runtime.fixes.cudagraph_trees import CUDAGRAPH_LOCK, TLS_KEYS
from harness.runtime.fixes.dynamo import fresh_function
from harness.runtime.fixes.fixset import FixSet, call_key
from harness.runtime.fixes.global_lock import GLOBAL_LOCK
from harness.runtime.fixes.phase_lock import PHASE_WARM_CALLS, PhaseLock, ReadersWriterLock
from harness.runtime.fixes.registry import FIXES, NONE, RECOMMENDED, check_cuda_graphs, parse_names

__all__ = [
    "CUDAGRAPH_LOCK",
    "FIXES",
    "GLOBAL_LOCK",
    "NONE",
    "PHASE_WARM_CALLS",
    "RECOMMENDED",
    "TLS_KEYS",
    "Fix",
    "FixSet",
    "PhaseLock",
    "Policy",
    "ReadersWriterLock",
    "call_key",
    "check_cuda_graphs",
    "fresh_function",
    "parse_names",
]
