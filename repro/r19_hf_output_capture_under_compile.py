"""r19_hf_output_capture_under_compile: eager HF hidden states go wrong while another thread compiles.

Symptom: an eager `output_hidden_states=True` forward of a transformers 5.x model returns too few
  hidden states while another thread compiles the same model's forward: silently wrong tapped
  layers (max abs diff ~3-4: the final-norm state in place of a layer output) or
  `IndexError: tuple index out of range` when a layer is tapped. No warning.
Mechanism: `capture_outputs` keeps the active collector in `output_capturing._active_collector`,
  a `CompileableContextVar`: its `set` writes the process-global `global_var` and `compiling=True`
  instead of the ContextVar whenever `torch.compiler.is_compiling()` is True, and `get` then reads
  the global. That flag is process-global for a whole Dynamo compile session (r18, R8), so an
  eager forward that starts in another thread during a compile parks its collector in the global.
  Every compiled call of an HF forward replays the traced `set`/`reset` stores at its end
  (`global_var = None; compiling = False`); if the compiling thread's first call of the new
  function ends while that eager forward is still in its layers, the remaining layer hooks read
  the empty ContextVar and record nothing, and the wrapper ties the last kept entry to the final
  state: a short tuple (IndexError) or shifted tapped layers (wrong numbers).
Trigger: thread `repro-compiler` compiles --compiles fresh code objects of one forward
  (backend=eager, input 1x8; no dynamo.reset, which would be R5) and calls each once; thread
  `repro-eager` loops eager forwards of the same tiny random Llama on a --batch x 128 input,
  comparing taps (1, layers-1) with a reference. The eager forward is the slower one, so most
  compiles end inside one; with equal inputs ~1-2 bad forwards per 300-1000 (dflash probe).
Affected versions: transformers 5.24 (observed) with torch 2.13.0 CPU; 5.17 (GPU host image)
  untested; expected wherever CompileableContextVar meets a process-global is_compiling flag.
Fix: global-lock (compiles/compiled calls and eager forwards under one lock);
  nested-fx-fallback does not apply (it only sets error_on_nested_fx_trace).
Upstream: transformers#44614 (CompileableContextVar not thread-safe under compile),
  transformers#46370 (plain ContextVar proposal); torch flag: PR #196637, #118390.
"""

import argparse
import sys
import threading
import time
import traceback

from _common import beat, run_threads, setup


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--compiles", type=int, default=8, help="fresh compiles of the forward in the other thread")
    p.add_argument("--secs", type=float, default=120, help="start no new compile after this many seconds")
    p.add_argument("--layers", type=int, default=3, choices=(3, 4), help="decoder layers of the tiny model")
    p.add_argument("--batch", type=int, default=16, help="eager batch (x 128 tokens); compiled input is 1 x 8")
    args, fs = setup(p)
    import types
    import warnings

    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    warnings.filterwarnings("ignore")
    torch.manual_seed(0)
    cfg = LlamaConfig(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=args.layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=256,
        max_position_embeddings=128,
    )
    model = LlamaForCausalLM(cfg).eval().requires_grad_(False)
    ids, taps = torch.randint(0, 256, (args.batch, 128)), (1, args.layers - 1)  # two inner layers' outputs

    def forward(x):
        out = model.model(input_ids=x, output_hidden_states=True, use_cache=False)
        return torch.cat([out.hidden_states[i] for i in taps], dim=-1)

    reference = forward(ids)  # single-threaded, before any compile
    stop, diffs, failures, counts = threading.Event(), [], [], {"eager": 0, "compiles": 0}

    def eager():
        fs.thread_start("eager")
        while not stop.is_set():
            try:
                with fs.around_call():
                    out = forward(ids)
                if not torch.equal(out, reference):
                    diffs.append((out - reference).abs().max().item())
            except IndexError as exc:
                failures.append((threading.current_thread().name, exc))
            counts["eager"] += 1
            beat()

    def compiler():
        fs.thread_start("compiler")
        end = time.monotonic() + args.secs
        try:
            for i in range(args.compiles):
                if time.monotonic() > end:
                    break
                # a fresh code object each time: Dynamo really compiles, no dynamo.reset needed (R5)
                fn = types.FunctionType(
                    forward.__code__.replace(co_name=f"forward_{i}"),
                    forward.__globals__,
                    f"forward_{i}",
                    None,
                    forward.__closure__,
                )
                with fs.around_call():
                    torch.compile(fn, backend="eager")(ids[:1, :8])
                counts["compiles"] += 1
                beat()
        finally:
            stop.set()

    errors = run_threads({"repro-eager": eager, "repro-compiler": compiler}, deadline_s=max(300, 3 * args.secs))
    n = f"{counts['eager']} eager forwards, {counts['compiles']} compiles"
    if failures:
        name, first = failures[0]  # the thread it was raised in names the report
        print(f"=== thread {name} failed: {type(first).__name__}: {first} ===", file=sys.stderr)
        traceback.print_exception(first)
        print(
            f"bad eager forwards: {len(failures)} IndexError + {len(diffs)} wrong "
            f"(max abs diff {max(diffs, default=0.0):.3f}) / {n}"
        )
        print(f"REPRODUCED: IndexError: {first}")
        return 1
    if diffs:
        print(
            f"WRONG_RESULT: {len(diffs)}/{n}: eager output_hidden_states forwards returned wrong "
            f"tapped states (max abs diff {max(diffs):.3g}) while another thread compiled"
        )
        return 1
    if errors:
        print(f"OTHER FAILURE: {len(errors)} thread(s) failed outside this repro's signature (tracebacks above)")
        return 1
    print(f"NOT REPRODUCED (0 bad / {n})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
