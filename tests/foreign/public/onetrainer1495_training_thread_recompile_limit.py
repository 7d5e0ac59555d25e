"""A compiled optimizer step in the UI's training thread aborts at the default recompile_limit set elsewhere.

Source: Nerogar/OneTrainer#1495 ("fix: initialize torch.compile per thread", 2026)
https://github.com/Nerogar/OneTrainer/pull/1495

What the reporter saw (dxqb, torch 2.12): `torch._dynamo.config` overrides are thread-local; the
`init_compile()` call ran on the main thread and "is invisible to the training thread spawned by
the UI. This caused compiled optimizers (e.g. AdamW_adv with compiled_optimizer=True) to hit the
default recompile_limit of 8 and abort with FailOnRecompileLimitHit when training models with more
than 8 distinct parameter shapes."

Adaptation (the PR carries no script; built from its description):
- `init_compile()` raises `torch._dynamo.config.recompile_limit` to 64 on the main thread;
- the compiled optimizer is one per-parameter AdamW update, `torch.compile(fullgraph=True,
  dynamic=False, backend="eager")` (eager backend: the limit check is in Dynamo, before any
  backend), stepped over a 12-parameter model with 12 distinct parameter shapes;
- the UI's training thread is a `threading.Thread` running `trainer.train()`; its exception is
  printed by Python's thread excepthook and the program exits 0, as the UI keeps running;
- the thread is joined with a 120 s deadline.
"""
import threading

import torch


def init_compile():
    torch._dynamo.config.recompile_limit = 64
    torch._dynamo.config.accumulated_recompile_limit = 2048


@torch.compile(fullgraph=True, dynamic=False, backend="eager")
def adamw_step(p, grad, exp_avg, exp_avg_sq, lr, beta1, beta2, eps, weight_decay, step):
    p.mul_(1 - lr * weight_decay)
    exp_avg.lerp_(grad, 1 - beta1)
    exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
    denom = (exp_avg_sq / (1 - beta2 ** step)).sqrt().add_(eps)
    p.addcdiv_(exp_avg, denom, value=-lr / (1 - beta1 ** step))


class Trainer:
    def __init__(self):
        shapes = [(4,), (8,), (4, 4), (8, 4), (4, 8), (16,), (2, 3, 4), (3, 3), (5, 2), (7,), (6, 6), (2, 2, 2)]
        self.params = [torch.randn(s, requires_grad=True) for s in shapes]
        self.state = [(torch.zeros(s), torch.zeros(s)) for s in shapes]

    def train(self):
        print(f"training thread sees recompile_limit={torch._dynamo.config.recompile_limit}")
        loss = sum((p * p).sum() for p in self.params)
        loss.backward()
        with torch.no_grad():
            for p, (m, v) in zip(self.params, self.state):
                adamw_step(p, p.grad, m, v, 1e-3, 0.9, 0.999, 1e-8, 0.01, 1)
        print("optimizer step done")


init_compile()
trainer = Trainer()
t = threading.Thread(target=trainer.train, name="training")
t.start()
t.join(timeout=120)
