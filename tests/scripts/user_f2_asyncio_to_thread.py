"""User program: an asyncio service runs the compiled model with asyncio.to_thread (F2 / R1).

Requests are served by `await asyncio.to_thread(model, batch)` (the loop's default
ThreadPoolExecutor) while a model export (torch.fx.symbolic_trace) runs in another
to_thread job; FX's tracing flag is process-global (pytorch/pytorch#126024), so a request
fails and asyncio.run re-raises it in the main thread: exit 1.
"""

import asyncio
import sys
import threading

import torch
from f2_parts import Head, compiled_scorer

sys.setswitchinterval(1e-6)
torch.set_num_threads(1)


async def serve(model, batch, stop):
    try:
        for _ in range(2000):
            await asyncio.to_thread(model, batch)
    finally:
        stop.set()


def export(stop):
    while not stop.is_set():
        torch.fx.symbolic_trace(Head())


async def main():
    model, batch = compiled_scorer()
    stop = threading.Event()
    await asyncio.gather(asyncio.to_thread(export, stop), serve(model, batch, stop))


if __name__ == "__main__":
    asyncio.run(main())
