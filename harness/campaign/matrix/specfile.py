"""The JSON form of a matrix spec (`--file SPEC.json`, and the named spec files under
harness/campaign/specs/): parsed and checked key by key, every problem one `MatrixError` naming
the file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from harness.campaign.matrix.spec import (
    NO_PLAN,
    Group,
    MatrixError,
    MatrixSpec,
    Strategy,
    Workload,
    check_name,
)
from harness.campaign.plans import PlanChoice
from harness.trial.cells import strategy_parts

_SPEC_KEYS = {
    "name",
    "workloads",
    "strategies",
    "groups",
    "trials",
    "workers",
    "per_gpu",
    "max_failures",
    "max_time_s",
    "finish_by_s",
    "seed",
    "store",
}
_WORKLOAD_KEYS = {"kind", "argv", "timeout_s", "hang_s", "env", "gpus", "gpu_slots", "cpus"}
_STRATEGY_KEYS = {"fixes", "sets"}
_GROUP_KEYS = {"workloads", "strategies", "plans", "trials"}


def load_spec(path: str | Path) -> MatrixSpec:
    """Read a JSON matrix spec; every problem is a `MatrixError` naming the file."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise MatrixError(f"cannot read matrix spec {path}: {e.strerror or e}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise MatrixError(f"matrix spec {path} is not valid JSON: {e}") from None
    return spec_from_dict(data, where=str(path))


def spec_from_dict(d: Any, *, where: str = "<dict>") -> MatrixSpec:
    """Build a spec from its JSON form.

    {"name": "m", "trials": 10, "workers": 2, "max_failures": 3, "max_time_s": 600, "seed": 0,
     "workloads": {"ok": {"kind": "command", "argv": ["python", "-c", "pass"], "timeout_s": 30}},
     "strategies": {"eager": {"sets": ["compile.mode=none"]}},
     "groups": [{"workloads": ["ok"], "strategies": ["raw", "global-lock"],
                 "plans": [null, "switch", {"name": "p1", "plan": {...}}], "trials": 5}]}

    `raw` and fix combinations such as `global-lock+sequential-startup` need no `strategies` entry.
    Without `groups`, the matrix is every workload x every listed strategy (or `raw`) x no plan.
    """
    try:
        return _spec_from_dict(d)
    except MatrixError as e:
        raise MatrixError(f"{where}: {e}") from None


def _spec_from_dict(d: Any) -> MatrixSpec:
    _expect_keys(d, _SPEC_KEYS, "matrix spec", required={"name", "workloads"})
    workloads = {name: _workload(name, w) for name, w in _mapping(d["workloads"], "workloads").items()}
    explicit = {name: _strategy(name, s) for name, s in _mapping(d.get("strategies", {}), "strategies").items()}
    raw_groups = d.get("groups") or [{"workloads": list(workloads), "strategies": list(explicit) or ["raw"]}]
    if not isinstance(raw_groups, list):
        raise MatrixError("groups must be a list")
    strategies = dict(explicit)
    groups = []
    for g in raw_groups:
        group = _group(g)
        for s in group.strategies:
            strategies.setdefault(s, strategy_from_name(s))
        groups.append(group)
    scalars = {
        k: d[k]
        for k in ("trials", "workers", "per_gpu", "max_failures", "max_time_s", "finish_by_s", "seed", "store")
        if k in d and d[k] is not None
    }
    for k, v in scalars.items():
        if k == "store":
            if not isinstance(v, str):
                raise MatrixError("store must be a string")
        elif not isinstance(v, (int, float)) or isinstance(v, bool):
            raise MatrixError(f"{k} must be a number, got {v!r}")
    name = d["name"]
    if not isinstance(name, str):
        raise MatrixError("name must be a string")
    return MatrixSpec(name=name, workloads=workloads, strategies=strategies, groups=tuple(groups), **scalars)


def strategy_from_name(name: str) -> Strategy:
    """`raw` -> no fixes; `a+b` -> fixes (a, b). Fix names are checked later, by `check_fixes`."""
    if name == "raw":
        return Strategy(name=name)
    return Strategy(name=name, fixes=tuple(strategy_parts(name)))


def _workload(name: str, w: Any) -> Workload:
    _expect_keys(w, _WORKLOAD_KEYS, f"workload {name!r}", required={"kind", "argv"})
    argv = w["argv"]
    if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
        raise MatrixError(f"workload {name!r}: argv must be a list of strings")
    env = _mapping(w.get("env", {}), f"workload {name!r} env")
    if not all(isinstance(v, str) for v in env.values()):
        raise MatrixError(f"workload {name!r}: env values must be strings")
    nums = {k: w[k] for k in ("timeout_s", "hang_s", "gpus", "gpu_slots", "cpus") if k in w}
    for k, v in nums.items():
        if not isinstance(v, (int, float)) or isinstance(v, bool):
            raise MatrixError(f"workload {name!r}: {k} must be a number, got {v!r}")
        if k in ("gpus", "gpu_slots", "cpus") and not isinstance(v, int):
            raise MatrixError(f"workload {name!r}: {k} must be a whole number, got {v!r}")
    return Workload(name=name, kind=w["kind"], argv=tuple(argv), env=tuple(sorted(env.items())), **nums)


def _strategy(name: str, s: Any) -> Strategy:
    _expect_keys(s, _STRATEGY_KEYS, f"strategy {name!r}")
    fixes, sets = s.get("fixes", []), s.get("sets", [])
    for key, value in (("fixes", fixes), ("sets", sets)):
        if not isinstance(value, list) or not all(isinstance(x, str) for x in value):
            raise MatrixError(f"strategy {name!r}: {key} must be a list of strings")
    for kv in sets:
        if "=" not in kv:
            raise MatrixError(f"strategy {name!r}: override {kv!r} is not section.key=value")
    return Strategy(name=name, fixes=tuple(fixes), sets=tuple(sets))


def _group(g: Any) -> Group:
    _expect_keys(g, _GROUP_KEYS, "group", required={"workloads", "strategies"})
    for key in ("workloads", "strategies"):
        if not isinstance(g[key], list) or not all(isinstance(x, str) for x in g[key]):
            raise MatrixError(f"group {key} must be a list of names")
    plans = g.get("plans", [None])
    if not isinstance(plans, list) or not plans:
        raise MatrixError("group plans must be a non-empty list")
    trials = g.get("trials")
    if trials is not None and (not isinstance(trials, int) or isinstance(trials, bool)):
        raise MatrixError(f"group trials must be an integer, got {trials!r}")
    return Group(
        workloads=tuple(g["workloads"]),
        strategies=tuple(g["strategies"]),
        plans=tuple(_plan_choice(p) for p in plans),
        trials=trials,
    )


def _plan_choice(p: Any) -> PlanChoice:
    if p is None:
        return NO_PLAN
    if isinstance(p, str):
        check_name(p, "plan profile")
        return PlanChoice(name=p, profile=p)
    if isinstance(p, dict) and set(p) == {"name", "plan"} and isinstance(p["name"], str):
        check_name(p["name"], "plan")
        if not isinstance(p["plan"], dict):
            raise MatrixError(f"plan {p['name']!r}: plan must be a JSON object")
        return PlanChoice(name=p["name"], explicit=p["plan"])
    raise MatrixError(f'malformed plan entry {p!r}: use null, a profile name or {{"name": ..., "plan": {{...}}}}')


def _mapping(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise MatrixError(f"{what} must be a JSON object")
    return value


def _expect_keys(d: Any, allowed: set[str], what: str, required: set[str] = frozenset()) -> None:
    if not isinstance(d, dict):
        raise MatrixError(f"{what} must be a JSON object")
    unknown = sorted(set(d) - allowed)
    if unknown:
        raise MatrixError(f"{what}: unknown key(s) {', '.join(unknown)} (allowed: {', '.join(sorted(allowed))})")
    missing = sorted(required - set(d))
    if missing:
        raise MatrixError(f"{what}: missing key(s) {', '.join(missing)}")
