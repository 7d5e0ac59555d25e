"""torch.optim.AdamW without its import of torch._dynamo, for a trainer that never compiles it.

torch.optim wraps `add_param_group`, `zero_grad`, `state_dict` and `load_state_dict` in
`torch._disable_dynamo`, and `step` in a no-grad wrapper with `torch._dynamo.graph_break()`: both
import torch._dynamo on their first call, 5.1 s in a fresh process on a GPU host (pytorch#104053
is why the graph break is there). They keep a compiled caller from tracing into the optimizer.
The trainer's leader calls its optimizer between two barriers, outside any compiled region, so
here each method is torch's own body, unwrapped: the same arithmetic, the same state dicts, and
no torch._dynamo until something compiles.
"""

from __future__ import annotations

import inspect

import torch


def _body(name: str):
    """torch's own method under every wrapper (the dynamo guard, and step's profiling hook)."""
    return inspect.unwrap(getattr(torch.optim.AdamW, name))


_STEP = _body("step")


class AdamW(torch.optim.AdamW):
    add_param_group = _body("add_param_group")
    zero_grad = _body("zero_grad")
    state_dict = _body("state_dict")
    load_state_dict = _body("load_state_dict")

    def step(self, closure=None):
        # what the step's wrapper does besides the graph break: grad mode from `differentiable`
        with torch.set_grad_enabled(self.defaults["differentiable"]):
            return _STEP(self, closure)
