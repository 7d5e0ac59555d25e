"""A chat turn's generate() in a fresh thread with transformers' auto-compile (reduce-overhead) fails from the second turn on.

Source: hiyouga/LlamaFactory#8913 ("[Bug]torch.compilecauses AssertionError in multi-turn chat due
to dynamic input shapes", 2025) https://github.com/hiyouga/LlamaFactory/issues/8913

What the reporter saw (Lee-Ju-Yeong, torch 2.7.1, transformers 4.55.0, RTX 4090): in the
playground chat, generation for `google/gemma-3-1b-it` (model default `cache_implementation`
"hybrid", so transformers auto-compiles the forward with mode="reduce-overhead") works for the
first message; the second message hangs the UI and the backend logs
`Exception in thread Thread-10 (generate):` ... `AssertionError`. LlamaFactory's HF engine runs
every turn's `model.generate` in a new `threading.Thread` and reads a streamer on the caller.

Adaptation:
- the model is a randomly initialised 2-layer Gemma3 text model (hidden 64, vocab 256) built from
  a local `Gemma3TextConfig` (no hub download, no tokenizer); prompts are random token ids of
  length 5 (turn 1) and 9 (turn 2);
- `cache_implementation="static"` replaces the deprecated "hybrid" (both are static caches that
  trigger the auto-compile), max_new_tokens=8, greedy;
- the `TextIteratorStreamer` (needs a tokenizer) is replaced by a token-id streamer with the same
  queue protocol, read with a 60 s timeout (the original waits forever: the hung UI);
- the generate thread is a daemon, as in LlamaFactory; its exception is printed by Python's
  thread excepthook; a turn that stalls raises `queue.Empty` in the main thread (exit 1);
- transformers auto-compiles only on CUDA: without CUDA the program prints `SKIP: needs CUDA`.
"""
import queue
import sys
import threading

import torch

if not torch.cuda.is_available():
    print("SKIP: needs CUDA")
    sys.exit(0)

from transformers import Gemma3ForCausalLM, Gemma3TextConfig
from transformers.generation.streamers import BaseStreamer


class TokenIteratorStreamer(BaseStreamer):
    def __init__(self, timeout=None):
        self.queue = queue.Queue()
        self.timeout = timeout
        self.prompt_seen = False

    def put(self, value):
        if not self.prompt_seen:  # skip_prompt=True
            self.prompt_seen = True
            return
        self.queue.put(value.tolist())

    def end(self):
        self.queue.put(None)

    def __iter__(self):
        return self

    def __next__(self):
        value = self.queue.get(timeout=self.timeout)
        if value is None:
            raise StopIteration
        return value


config = Gemma3TextConfig(
    vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
    num_attention_heads=2, num_key_value_heads=1, head_dim=32, sliding_window=16,
    max_position_embeddings=256,
)
model = Gemma3ForCausalLM(config).to("cuda").eval()


def stream_chat(input_ids):
    streamer = TokenIteratorStreamer(timeout=60)
    gen_kwargs = dict(
        input_ids=input_ids, attention_mask=torch.ones_like(input_ids), max_new_tokens=8,
        do_sample=False, cache_implementation="static", streamer=streamer,
    )
    thread = threading.Thread(target=model.generate, kwargs=gen_kwargs, daemon=True)
    thread.start()
    for new_token in streamer:
        yield new_token


for turn, length in enumerate((5, 9), start=1):
    input_ids = torch.randint(3, 256, (1, length), device="cuda")
    tokens = list(stream_chat(input_ids))
    print(f"turn {turn}: {len(tokens)} tokens streamed")
