"""A threaded inference server that also exports its model's graph with torch.fx.

Worker threads answer requests with a `torch.compile`d scoring function; an exporter thread
re-exports the model with `torch.fx.symbolic_trace` in the background (for a model registry, a
graph lint, a quantization pass...). Nothing is shared between them but the process.

On torch 2.13 (and 2.4-2.11) FX's "is tracing" flag is one module global
(`torch.fx._symbolic_trace._is_fx_tracing_flag`), so a worker's compiled call that lands while the
exporter traces fails, in the worker, with

    RuntimeError: Detected that you are using FX to symbolically trace a dynamo-optimized
    function. This is not supported at the moment.

(race F2/R1, pytorch#126024; `repro/r06_fx_tracing_flag.py` is the minimal form). The default
`--switch-interval 1e-6` makes threads trade the GIL often enough that it is near-certain within
one run; with the interpreter's default (5 ms) it is rarer, not gone.

    python examples/serve_while_tracing.py --no-fix                    # exits 1: FAILED ...
    python examples/serve_while_tracing.py --fix global-lock           # exits 0
    python examples/serve_while_tracing.py --fix nested-fx-fallback    # exits 0

global-lock serialises the workers' calls and the exporter's trace (the exporter runs its trace
under `guard.call()` too: the lock holds only if every party takes it). nested-fx-fallback lets a
call that lands during a trace run the scoring function eagerly instead of raising: it avoids the
window rather than surviving it, so the output reports how many calls ran while a trace was on.
It would not save a compiled nn.Module or plain eager module calls here (the tracer patches
`nn.Module.__call__` process-wide: R4, r15), which is why the workers call a function of tensors.

Exit codes: 0 every request answered correctly; 1 a request raised or returned a wrong score;
2 bad arguments (one `error:` line).
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from harness.runtime.guard import Guard, GuardError  # noqa: E402

JOIN_DEADLINE_S = 300.0


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one `error:` line, exit 2 (not argparse's usage dump)
        print(f"error: {message}", file=sys.stderr)
        sys.exit(2)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = _Parser(description=__doc__.splitlines()[0])
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument(
        "--fix", metavar="NAMES", help="comma-separated fix names (harness.runtime.guard), or 'recommended'"
    )
    which.add_argument("--no-fix", action="store_true", help="run raw, no fix")
    p.add_argument("--workers", type=int, default=2, help="worker threads (default 2)")
    p.add_argument("--seconds", type=float, default=1.0, help="how long the workers serve (default 1.0)")
    p.add_argument("--backend", default="inductor", help="torch.compile backend (default inductor)")
    p.add_argument(
        "--export-pause",
        type=float,
        default=0.005,
        help="seconds the exporter waits between two exports (default 0.005)",
    )
    p.add_argument(
        "--switch-interval",
        type=float,
        default=1e-6,
        help="sys.setswitchinterval, seconds (default 1e-6; 0 = leave the interpreter's)",
    )
    return p.parse_args(argv)


def make_guard(args: argparse.Namespace) -> Guard:
    if args.no_fix:
        return Guard()
    if args.fix.strip() == "recommended":
        return Guard.recommended(device="cpu")
    return Guard(args.fix)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.workers < 1 or not args.seconds > 0 or args.switch_interval < 0 or args.export_pause < 0:
        print(
            "error: --workers must be >= 1, --seconds > 0, --switch-interval and --export-pause >= 0", file=sys.stderr
        )
        return 2
    try:
        guard = make_guard(args)
    except GuardError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2

    import torch
    import torch.nn as nn

    torch.manual_seed(0)
    torch.set_num_threads(1)

    class Scorer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.hidden, self.out = nn.Linear(16, 32), nn.Linear(32, 4)

        def forward(self, x):
            return self.out(torch.relu(self.hidden(x)))

    model = Scorer().eval()
    # The served function takes tensors only: plain tensors closed over, no module calls.
    w1, b1 = model.hidden.weight.detach().clone(), model.hidden.bias.detach().clone()
    w2, b2 = model.out.weight.detach().clone(), model.out.bias.detach().clone()

    def score(x):
        return torch.softmax(torch.relu(x @ w1.T + b1) @ w2.T + b2, dim=-1)

    predict = guard.compiled(score, backend=args.backend)
    predict(torch.randn(8, 16))  # warm-up request: compile before going concurrent

    stop = threading.Event()
    failures: list[BaseException] = []
    wrong: list[float] = []
    requests, during_trace, traces = [0], [0], [0]
    lock = threading.Lock()

    @guard.thread
    def worker(seed: int, until: float) -> None:
        gen = torch.Generator().manual_seed(seed)
        while time.monotonic() < until and not stop.is_set():
            with lock:
                requests[0] += 1
            x = torch.randn(8, 16, generator=gen)
            tracing = getattr(torch.fx._symbolic_trace, "_is_fx_tracing_flag", False)
            try:
                y = predict(x)
            except RuntimeError as exc:
                with lock:
                    failures.append(exc)
                continue
            with torch.no_grad():
                diff = (y - score(x)).abs().max().item()
            with lock:
                during_trace[0] += tracing
                if diff > 1e-5:
                    wrong.append(diff)

    @guard.thread
    def exporter() -> None:
        while not stop.is_set():
            with guard.call():
                torch.fx.symbolic_trace(model)
            traces[0] += 1
            stop.wait(args.export_pause)

    crashed: dict[str, BaseException] = {}

    def catching(body):
        # A thread's unexpected exception must fail the run, not just print through excepthook.
        def run(*a):
            try:
                body(*a)
            except BaseException as exc:
                crashed[threading.current_thread().name] = exc
                stop.set()

        return run

    if args.switch_interval:
        sys.setswitchinterval(args.switch_interval)  # only now: start-up and warm-up run at full speed
    t0 = time.monotonic()
    workers = [
        threading.Thread(target=catching(worker), args=(i, t0 + args.seconds), name=f"worker-{i}")
        for i in range(args.workers)
    ]
    export = threading.Thread(target=catching(exporter), name="exporter")
    export.start()
    for t in workers:
        t.start()
    for t in workers:
        t.join(timeout=max(0.0, JOIN_DEADLINE_S - (time.monotonic() - t0)))
    stop.set()
    export.join(timeout=max(1.0, JOIN_DEADLINE_S - (time.monotonic() - t0)))
    if export.is_alive() or any(t.is_alive() for t in workers):
        print(f"HANG: threads still running after {JOIN_DEADLINE_S:.0f} s", file=sys.stderr)
        os._exit(1)

    total = requests[0]
    print(
        f"torch {torch.__version__}, backend {args.backend}: {args.workers} workers served {total} requests "
        f"in {time.monotonic() - t0:.2f} s while the exporter traced {traces[0]} times; {guard.describe()}"
    )
    if failures:
        traceback.print_exception(failures[0])
        print(f"FAILED: {len(failures)}/{total} requests raised {type(failures[0]).__name__}: {failures[0]}")
        return 1
    if crashed:
        for name, exc in crashed.items():
            print(f"=== thread {name} failed ===", file=sys.stderr)
            traceback.print_exception(exc)
        print(f"FAILED: thread(s) {', '.join(crashed)} raised {', '.join(type(e).__name__ for e in crashed.values())}")
        return 1
    if wrong:
        print(f"WRONG_RESULT: {len(wrong)}/{total} scores differ from eager (max {max(wrong):.3g})")
        return 1
    print(f"OK: {total}/{total} requests answered; {during_trace[0]} of them arrived while the exporter was tracing")
    return 0


if __name__ == "__main__":
    sys.exit(main())
