"""transformers serving: a tiny random Llama compiled and called from request threads beside an FX tracer.

User program: a toy LLM server. It builds a tiny LlamaForCausalLM from a LlamaConfig (random
weights, 1 layer, hidden 32: no download), wraps its greedy next-token step in torch.compile
(backend="eager"), warms it up, then three request threads each decode 150 tokens for their
prompts. A "telemetry" thread keeps FX-tracing a small sampling-head module with
torch.fx.symbolic_trace to log its op count. Request threads do not catch exceptions; the main
thread joins them and exits 0 (the server "keeps running"). Without transformers installed the
program prints `SKIP: needs transformers` and exits 0.
What should happen: F2, often R4 too. The telemetry thread's Tracer.trace sets FX's
process-global is-tracing flag; a request thread's compiled step raises `RuntimeError: Detected
that you are using FX to symbolically trace a dynamo-optimized function` from
torch/_dynamo/eval_frame.py compile_wrapper. When the step's frame runs eagerly instead
(compile_wrapper's fall-through to `fn(*args)`), the Llama module call inside it enters the
tracer's process-wide nn.Module.__call__ patch: `NameError: module is not installed as a
submodule` (R4). threading.excepthook prints `Exception in thread request-N:`; exit 0. Seen
once under the harness (not in 8 direct runs): the telemetry thread's own trace died with
`RuntimeError: dictionary changed size during iteration` in torch/fx/_symbolic_trace.py
_autowrap_check, which iterates this module's globals, most likely while a request thread's
Dynamo compile added its `__compiled_fn_*` / resume-function globals to the same dict (not in races.toml).
Expected classification: CRASH (thread exceptions at exit 0), races F2 and R4.
"""

import sys
import threading

import torch
import torch.nn as nn

try:
    from transformers import LlamaConfig, LlamaForCausalLM
except ImportError:
    print("SKIP: needs transformers")
    sys.exit(0)

torch.set_num_threads(1)


class SamplingHead(nn.Module):
    def forward(self, logits):
        return torch.softmax(logits / 0.7, dim=-1).argmax(-1)


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

    def next_token(ids):
        return model(input_ids=ids, use_cache=False).logits[:, -1].argmax(-1)

    step = torch.compile(next_token, backend="eager")
    with torch.no_grad():
        step(torch.randint(0, 128, (1, 16)))
    stop = threading.Event()
    outputs = {}

    def request(i):
        ids = torch.randint(0, 128, (1, 16))
        with torch.no_grad():
            for _ in range(150):
                tok = step(ids[:, -16:])  # fixed window: one shape, no recompiles
                ids = torch.cat([ids, tok[:, None]], dim=1)
        outputs[i] = ids

    def telemetry():
        head = SamplingHead()
        while not stop.is_set():
            gm = torch.fx.symbolic_trace(head)
            len(gm.graph.nodes)

    print("llama server up", flush=True)
    tele = threading.Thread(target=telemetry, name="telemetry")
    tele.start()
    reqs = [threading.Thread(target=request, args=(i,), name=f"request-{i}") for i in range(3)]
    for t in reqs:
        t.start()
    for t in reqs:
        t.join()
    stop.set()
    tele.join()
    print(f"completed {len(outputs)} of 3 requests", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
