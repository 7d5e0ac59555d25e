"""torch._dynamo.config set at import on the main thread is invisible to the executor thread that compiles.

Source: mstar-project/mstar#167 ("`torch._dynamo.config` settings in `mstar/engine/__init__.py` are
silently ignored on the GPU thread (torch 2.13)", 2026) https://github.com/mstar-project/mstar/issues/167

What the reporter saw (NSagan271, torch 2.13, CUDA): flags set at import time
(`recompile_limit = 84`, `allow_unspec_int_on_nn_module = True`, `specialize_int = False`) do not
apply on the `ThreadPoolExecutor(max_workers=1, thread_name_prefix="mstar-gpu-...")` thread that
runs the engine; a new request logs `torch._dynamo hit config.recompile_limit (8)`.

Adaptation:
- `import mstar.engine` (which only sets those three flags on the importing thread) is replaced
  by the same three assignments;
- the issue's reproduction reads the flags on the main thread and on an executor thread; its end
  was cut off in the copy available, so the executor part is `ThreadPoolExecutor(max_workers=1,
  thread_name_prefix="mstar-gpu-0")`, `submit(read).result()`, and both dicts are printed.
"""
import torch
from concurrent.futures import ThreadPoolExecutor

# mstar/engine/__init__.py, run on the importing (main) thread
torch._dynamo.config.recompile_limit = 84
torch._dynamo.config.allow_unspec_int_on_nn_module = True
torch._dynamo.config.specialize_int = False

KEYS = ["recompile_limit", "specialize_int", "allow_unspec_int_on_nn_module"]
read = lambda: {k: getattr(torch._dynamo.config, k) for k in KEYS}

main = read()
with ThreadPoolExecutor(max_workers=1, thread_name_prefix="mstar-gpu-0") as ex:
    gpu = ex.submit(read).result()
print("main thread:", main)
print("gpu thread: ", gpu)
if main != gpu:
    print("config set on the main thread is not seen on the executor thread")
