"""asyncio service: compiled calls in asyncio.to_thread beside a to_thread FX export; errors printed, exit 0.

User program: an async batch service. Each request handler runs the torch.compile'd reranker
(backend="eager", warmed up) off the event loop with `await asyncio.to_thread(...)`; at start-up
an admin task exports the post-processing module with torch.fx.symbolic_trace in another
to_thread job (the loop's default ThreadPoolExecutor). Handlers are gathered with
return_exceptions=True; the service prints each failed request's traceback with
traceback.print_exception and a summary, and exits 0 ("partial failure is fine").
What should happen: F2. While the export job is inside Tracer.trace, FX's process-global
is-tracing flag is set; a handler's compiled call in another executor thread raises `RuntimeError:
Detected that you are using FX to symbolically trace a dynamo-optimized function`. The
tracebacks are printed by the program itself (no `Exception in thread` header: they run through
asyncio's executor and are printed from the main thread) and the process exits 0.
Expected classification: CRASH (exceptions printed at exit 0), race F2.
"""

import asyncio
import sys
import traceback

import torch
import torch.nn as nn

torch.set_num_threads(1)


class Normalize(nn.Module):
    def forward(self, scores):
        return (scores - scores.mean()) / (scores.std() + 1e-6)


def make_reranker():
    w = torch.randn(32, 1)

    def rerank(q, docs):
        return (torch.tanh(docs * q) @ w).squeeze(-1)

    return torch.compile(rerank, backend="eager")


async def handle(rid, reranker):
    q, docs = torch.randn(1, 32), torch.randn(16, 32)
    for _ in range(30):
        scores = await asyncio.to_thread(reranker, q, docs)
    return rid, float(scores.max())


def export_graph():
    for _ in range(400):
        torch.fx.symbolic_trace(Normalize())
    return "exported"


async def main():
    reranker = make_reranker()
    reranker(torch.randn(1, 32), torch.randn(16, 32))
    print("service up", flush=True)
    results = await asyncio.gather(
        asyncio.to_thread(export_graph),
        *(handle(i, reranker) for i in range(24)),
        return_exceptions=True,
    )
    failed = [r for r in results if isinstance(r, BaseException)]
    for exc in failed:
        traceback.print_exception(exc)
    print(f"{len(results) - 1 - len(failed)} requests ok, {len(failed)} failed", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
