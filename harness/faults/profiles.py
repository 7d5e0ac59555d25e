"""Named fault-plan profiles: `seed -> Plan`, and `plan_from_seed(seed, profile)`, the one way to
derive a trial's plan from its seed (the scheduler executes plans and knows no profile).

`rng` is seeded by (profile, seed) and only picks a profile's parameters; the decisions at run
time come from the plan's own seed (harness.faults.scheduler).
"""

from __future__ import annotations

import random

from dflash import fault_points  # the trainer's stage points, which its profiles name
from harness.faults.pct import Pct
from harness.faults.scheduler import InvalidPlan, Plan, Rule

STAGE_POINTS = fault_points.POINTS
STAGE_MODULE = fault_points.__name__
"""A plan that names the trainer's points says where they are registered (`Plan.points_from`)."""

# Points hit on every CPU compile (counted on 2.13 CPU); cudagraph points need CUDA to be reached.
COMPILE_POINTS = (
    "fx.trace",
    "make_fx.dispatch_trace",
    "dynamo.convert_frame",
    "inductor.compile_fx",
    "aot.backward_compile",
    "compiled.call",
    "cudagraph.get_container",
    "cudagraph.record",
)


def _plain(seed: int, rng: random.Random) -> Plan:
    return Plan(seed=seed, profile="plain")


def _switch(seed: int, rng: random.Random) -> Plan:
    # pytest-run-parallel and the py-free-threading guide (py-free-threading.github.io/testing) use 1e-6.
    return Plan(seed=seed, profile="switch", switch_interval=1e-6)


def _fx_widen(seed: int, rng: random.Random) -> Plan:
    # Sleeps inside a trace keep the process-global FX flag and Module.__call__ patch live while
    # other threads run: sleeps in Graph.create_node took R1 from 1/10 to 10/10 (2.13 CPU).
    # The flag is set inside Tracer.trace, so only time spent past its start widens the window:
    # the delays go on create_node (inside); fx.trace gets a free yield that shuffles who starts.
    # A first version also slept before fx.trace and reached 12/20 on torch 2.11 (16 cores).
    rules = [
        Rule(point="fx.trace", action="yield", probability=0.5),
        Rule(
            point="fx.create_node",
            action="delay",
            probability=rng.choice((0.3, 0.5, 1.0)),
            params={"dist": "uniform", "max_s": rng.choice((0.001, 0.002))},
        ),
        # Spread the victim's compiled calls over time so that some land in a widened trace;
        # without it a fast caller could finish between two traces (15/20 on 2.11, 16 cores).
        Rule(point="compiled.call", action="delay", probability=0.1, params={"dist": "uniform", "max_s": 0.002}),
    ]
    return Plan(seed=seed, profile="fx-widen", switch_interval=1e-6, rules=rules)


def _reset_pressure(seed: int, rng: random.Random) -> Plan:
    # R5: reset() in one thread while another is between compile_wrapper's check and the C++
    # frame evaluation. A yield right after the check hands the GIL to the resetter inside that
    # window, though the 1e-6 interval alone already crashes 3/5 (docs/log/2026-11-30-fault-plan-shrink.md).
    rules = [
        Rule(point="compiled.call", when="after", action="yield", probability=rng.choice((0.3, 0.5))),
        Rule(point="dynamo.reset", when="after", action="yield", probability=0.5),
    ]
    return Plan(seed=seed, profile="reset-pressure", switch_interval=1e-6, rules=rules)


def _compile_chaos(seed: int, rng: random.Random) -> Plan:
    # rr chaos mode: starve low-priority threads for doubling durations at compile/run points.
    # The cudagraph points are only reached with CUDA; keeping them always costs nothing on CPU.
    points = rng.sample(COMPILE_POINTS[:6], 2) + list(COMPILE_POINTS[6:])
    starve = {"thread_p": 0.3, "victim": rng.choice((1, 2)), "max_ms": rng.choice((16, 64, 256))}
    rules = [
        Rule(point=p, action="starve", probability=rng.choice((0.05, 0.2)), params=dict(starve)) for p in sorted(points)
    ]
    switch = rng.choice((None, 1e-5, 1e-6))
    return Plan(seed=seed, profile="compile-chaos", switch_interval=switch, rules=rules)


def _dflash_stages(seed: int, rng: random.Random) -> Plan:
    delay = {"dist": "uniform", "max_s": rng.choice((0.001, 0.005))}
    rules = [Rule(point=p, action="delay", probability=0.1, params=dict(delay)) for p in STAGE_POINTS]
    for p in sorted(rng.sample(STAGE_POINTS, 2)):
        rules.append(Rule(point=p, action="starve", probability=0.05, params={"thread_p": 0.5, "max_ms": 64}))
    switch = rng.choice((None, 1e-5))
    return Plan(seed=seed, profile="dflash-stages", switch_interval=switch, rules=rules, points_from=(STAGE_MODULE,))


def _raise_at(seed: int, rng: random.Random) -> Plan:
    torch_side = ("fx.trace", "make_fx.dispatch_trace", "dynamo.convert_frame", "compiled.call")
    point = rng.choice(torch_side if rng.random() < 0.5 else STAGE_POINTS)
    rule = Rule(
        point=point,
        action="raise",
        first_hit=rng.randint(1, 3),
        max_hits=1,
        params={"message": f"harness raise-at {point} (seed {seed})"},
    )
    stage = () if point in torch_side else (STAGE_MODULE,)
    return Plan(seed=seed, profile="raise-at", rules=[rule], points_from=stage)


PCT_STEPS = 4000
"""k of the pct profiles when nothing is calibrated: near the point hits of a plain run of the
lift's F2 workload (4,834; R5's 564, F3's 13,144 on the CPU box, docs/log/2026-12-02-pct-lift.md).
`python -m harness lift` calibrates k per workload with `pct-count` runs and puts it in each
trial's plan."""


def _pct_count(seed: int, rng: random.Random) -> Plan:
    # Depth 0: every point counts its hits and threads and nothing waits (calibrating k and n).
    return Plan(seed=seed, profile="pct-count", pct=Pct(depth=0, steps=1))


def _pct(depth: int):
    def make(seed: int, rng: random.Random) -> Plan:
        # No switch interval and no rules: the priorities and their waits are the whole plan.
        return Plan(seed=seed, profile=f"pct{depth}", pct=Pct(depth=depth, steps=PCT_STEPS))

    return make


PROFILES = {
    "plain": _plain,
    "switch": _switch,
    "fx-widen": _fx_widen,
    "reset-pressure": _reset_pressure,
    "compile-chaos": _compile_chaos,
    "dflash-stages": _dflash_stages,
    "raise-at": _raise_at,
    "pct-count": _pct_count,
    "pct1": _pct(1),
    "pct2": _pct(2),
    "pct3": _pct(3),
}


def plan_from_seed(seed: int, profile: str) -> Plan:
    """The plan of trial seed `seed` under `profile` (same seed and profile, same plan)."""
    if profile not in PROFILES:
        raise InvalidPlan(f"unknown profile {profile!r} (known: {', '.join(PROFILES)})")
    return PROFILES[profile](seed, random.Random(f"profile:{profile}:{seed}")).validate()
