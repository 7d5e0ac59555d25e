"""transformers generate() from many request threads on a compiled forward: recompile limit, exit 0.

User program: a chat demo server. It builds a tiny LlamaForCausalLM from a LlamaConfig (random
weights, no download), replaces `model.forward` with `torch.compile(model.forward,
backend="eager")` ("compile the model once, serve from threads"), and answers a burst of 12
requests that arrive together (a threading.Barrier stands for the burst): each request thread
calls `model.generate(ids, max_new_tokens=16, do_sample=False)` on its own prompt. All requests
complete; the program prints the reply lengths and exits 0. Without transformers installed it
prints `SKIP: needs transformers` and exits 0.
What should happen: F10, silently. The compiled forward's first calls arrive in many threads at
once; each thread that misses the cache compiles again and appends another cache entry for the
same code object (duplicate compiles), and Dynamo's recompile-reason analysis finds no failing
guard. Once config.recompile_limit (8) entries exist, later compiles give up and those calls run
eagerly, logging `torch._dynamo hit config.recompile_limit (8)` blocks (function
'wrapped_func', transformers/utils/deprecation.py; 11 blocks a run here) whose `last reason` is
either `0/7: Unexpected recompilation: runtime guards failed even though they passed during
recompilation-reason analysis` (the duplicate-compile face) or an ordinary guard
(`kwargs['cache'].layers[0].is_initialized == False`, the prefill/decode switch that a single
thread compiles once): the 8 slots were spent by duplicates, so the legitimate decode recompile
is refused too. One thread running the same 12 requests one after the other hits no limit.
No exception, exit 0; the finding is the warning.
Expected classification: OK at exit 0 with an F10 warning.
"""

import sys
import threading

import torch

try:
    from transformers import LlamaConfig, LlamaForCausalLM
except ImportError:
    print("SKIP: needs transformers")
    sys.exit(0)

torch.set_num_threads(1)
N_REQUESTS = 12


def main():
    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=128,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
    )
    model = LlamaForCausalLM(cfg).eval()
    model.forward = torch.compile(model.forward, backend="eager")
    burst = threading.Barrier(N_REQUESTS)
    replies = {}

    def handle(i):
        prompt = torch.randint(0, 128, (1, 8 + i % 4))
        burst.wait()
        with torch.no_grad():
            out = model.generate(prompt, max_new_tokens=16, do_sample=False, pad_token_id=0)
        replies[i] = out.shape[1] - prompt.shape[1]

    print(f"answering a burst of {N_REQUESTS} requests", flush=True)
    threads = [threading.Thread(target=handle, args=(i,), name=f"req-{i}") for i in range(N_REQUESTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print("reply lengths:", [replies.get(i) for i in range(N_REQUESTS)], flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
