"""GPU: a two-stage pipeline, one thread per stage, each stage its own reduce-overhead model.

User program: a GPU serving pipeline. At start-up the main thread runs a smoke test (a tiny
torch.compile(mode="reduce-overhead") function, to fail fast on a host where compile or CUDA
graphs are broken). Then an "encoder" stage thread and a "head" stage thread each run their own
model class, compiled with mode="reduce-overhead": the main thread feeds 200 requests (loaded on
the GPU before the stages start) into the encoder's queue, the encoder passes `features.clone()` to the head's queue (cloned because the
next replay of its graph reuses the output's memory), the head keeps the scores. A stage's get
waits with a timeout and stops when its upstream thread is gone. Exceptions are uncaught; the
main thread joins both stages and exits 0. Without CUDA it prints `SKIP: needs CUDA` and exits 0.
What should happen (CUDA, torch 2.11): F1 in both stages. The smoke test made the main thread the
importer of torch._inductor.cudagraph_trees; each stage's first call of its own graph asks for the
calling thread's tree manager, which neither stage thread has: a bare `AssertionError` at `assert
torch._C._is_key_in_tls(attr_name)` (cudagraph_trees get_obj), printed by threading.excepthook.
The fix diagnose offers for F1, cstash-tls-init,global-lock, is expected to hold: each stage gets
its own tree manager and graph, calls are serial, and no thread reads another's graph output
before it is copied.
Expected classification: CRASH (thread exceptions at exit 0), race F1; the fix holds.
"""

import queue
import sys
import threading

import torch
import torch.nn as nn

if not torch.cuda.is_available():
    print("SKIP: needs CUDA")
    sys.exit(0)

REQUESTS = 200


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(256, 512), nn.GELU(), nn.Linear(512, 256))

    def forward(self, x):
        return nn.functional.layer_norm(self.layers(x), (256,))


class Head(nn.Module):
    def __init__(self):
        super().__init__()
        self.score = nn.Linear(256, 8)

    def forward(self, h):
        return torch.log_softmax(self.score(h), dim=-1)


def get_or_stop(q, upstream):
    while True:
        try:
            return q.get(timeout=0.5)
        except queue.Empty:
            if not upstream.is_alive():
                return None


def main():
    torch.manual_seed(0)
    smoke = torch.compile(lambda t: t * 2 + 1, mode="reduce-overhead")
    assert smoke(torch.ones(8, device="cuda")).sum().item() == 24.0
    encoder = torch.compile(Encoder().cuda().eval(), mode="reduce-overhead")
    head = torch.compile(Head().cuda().eval(), mode="reduce-overhead")
    inputs = [torch.randn(32, 256, device="cuda") for _ in range(REQUESTS)]  # loaded before serving
    torch.cuda.synchronize()
    requests, features, scores = queue.Queue(), queue.Queue(), []

    @torch.no_grad()
    def encode_stage():
        while (x := get_or_stop(requests, threading.main_thread())) is not None:
            features.put(encoder(x).clone())
        features.put(None)

    @torch.no_grad()
    def head_stage(upstream):
        while (h := get_or_stop(features, upstream)) is not None:
            scores.append(head(h).argmax(-1).cpu())

    enc = threading.Thread(target=encode_stage, name="stage-encoder")
    hd = threading.Thread(target=head_stage, args=(enc,), name="stage-head")
    print("pipeline up: encoder -> head", flush=True)
    enc.start()
    hd.start()
    for x in inputs:
        requests.put(x)
    requests.put(None)
    enc.join()
    hd.join()
    print(f"scored {len(scores)} of {REQUESTS} requests", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
