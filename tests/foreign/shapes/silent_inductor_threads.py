"""Silent start-up: three threads compile their own functions with Inductor on a cold cache.

User program: a CI smoke test of a model's compiled pieces. It points Inductor at a fresh cache
directory (as a CI job on a clean machine has), then three threads each torch.compile (default
backend, Inductor's C++ CPU code generation with gcc) and call one function of their own (a
norm, an attention-score step, a gated MLP), and the main thread joins them. It prints nothing
until every compile is done, then one `ok` line per function.
What should happen: no failure, no race. Each thread compiles a different function, so there are
no duplicate compiles; on a cold cache the first compile builds Inductor's C++ prelude and
kernels with g++ (in this process and its compile workers), so the program is silent for
~20-30 s on a 2-core machine with the CPU busy all the while (gcc children and the Python
threads), then prints three lines and exits 0. A watchdog that calls a quiet process a hang
without looking at CPU use (its children's too) would be wrong here.
Expected classification: OK (not HANG, not TIMEOUT within a 120 s deadline).
"""

import os
import shutil
import sys
import tempfile
import threading

CACHE = tempfile.mkdtemp(prefix="ci-inductor-cache-")
os.environ["TORCHINDUCTOR_CACHE_DIR"] = CACHE  # a clean CI machine: nothing cached yet

import torch  # noqa: E402

torch.set_num_threads(1)


def rms_norm(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w


def attn_scores(q, k):
    return torch.softmax(q @ k.transpose(-1, -2) / 8.0, dim=-1)


def gated_mlp(x, w1, w2):
    return (torch.nn.functional.silu(x @ w1) * (x @ w2)).sum(-1)


def main():
    jobs = {
        "rms_norm": (rms_norm, (torch.randn(4, 64), torch.randn(64))),
        "attn_scores": (attn_scores, (torch.randn(2, 16, 64), torch.randn(2, 16, 64))),
        "gated_mlp": (gated_mlp, (torch.randn(4, 64), torch.randn(64, 128), torch.randn(64, 128))),
    }
    results = {}

    def build(name):
        fn, args = jobs[name]
        compiled = torch.compile(fn)
        out = compiled(*args)
        results[name] = torch.allclose(out, fn(*args), atol=1e-4, rtol=1e-4)

    threads = [threading.Thread(target=build, args=(n,), name=f"build-{n}") for n in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for name in jobs:
        print(f"{name}: {'ok' if results.get(name) else 'MISMATCH'}", flush=True)
    shutil.rmtree(CACHE, ignore_errors=True)
    return 0 if all(results.get(n) for n in jobs) else 1


if __name__ == "__main__":
    sys.exit(main())
