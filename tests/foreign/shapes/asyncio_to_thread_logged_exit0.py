"""asyncio embedding service: compiled calls in asyncio.to_thread log their own failures; exit 0.

User program: an async embedding service. Each request is handled by a coroutine that runs the
blocking part, `embed_batch`, with `await asyncio.to_thread(embed_batch, ...)`. `embed_batch`
calls a torch.compile'd encoder (a function of tensors, backend="eager", warmed up at start-up)
inside `try: ... except Exception: log.exception("request %d failed", rid)` and returns None for a
failed request, the way a service keeps one bad request from taking the batch down. A periodic
"graph audit" task also runs in asyncio.to_thread and symbolic_traces the pooling module with
torch.fx for an audit log. The service prints `N of M requests embedded` and exits 0.
What should happen: F2, seen only in the log. While the audit job is inside Tracer.trace, FX's
process-global is-tracing flag is set, and an encoder call in another executor thread raises
`RuntimeError: Detected that you are using FX to symbolically trace a dynamo-optimized function`.
logging.exception writes it as `ERROR embed [asyncio_N]: request 17 failed` followed by the
traceback (the thread's name only in the log prefix); nothing is raised, no `Exception in thread`
header, exit 0.
Expected classification: CRASH (the race's face at exit 0), race F2.
"""

import asyncio
import logging
import sys

import torch
import torch.nn as nn

torch.set_num_threads(1)
logging.basicConfig(level=logging.INFO, format="%(levelname)s embed [%(threadName)s]: %(message)s")
log = logging.getLogger("embed")


class MeanPool(nn.Module):
    def forward(self, hidden, mask):
        return (hidden * mask.unsqueeze(-1)).sum(1) / mask.sum(1, keepdim=True).clamp(min=1)


def make_encoder():
    w = torch.randn(32, 48) * 0.1

    def encode(tokens):
        return torch.tanh(tokens @ w).mean(1)

    return torch.compile(encode, backend="eager")


def main():
    torch.manual_seed(0)
    encoder = make_encoder()
    encoder(torch.randn(4, 8, 32))  # warm-up compile at start-up

    def embed_batch(rid, tokens):
        try:
            out = None
            for _ in range(20):  # one request: its texts in micro-batches
                out = encoder(tokens)
            return out
        except Exception:
            log.exception("request %d failed", rid)
            return None

    def audit_graph():
        pool = MeanPool()
        for _ in range(300):
            torch.fx.symbolic_trace(pool)
        return "audited"

    async def handle(rid):
        return await asyncio.to_thread(embed_batch, rid, torch.randn(4, 8, 32))

    async def serve():
        log.info("embedding service up")
        audit = asyncio.create_task(asyncio.to_thread(audit_graph))
        results = await asyncio.gather(*(handle(rid) for rid in range(32)))
        await audit
        return results

    results = asyncio.run(serve())
    ok = sum(r is not None for r in results)
    log.info("%d of %d requests embedded", ok, len(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
