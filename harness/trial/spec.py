"""What one trial runs: the workload, the fixes, the scheduler plan, the limits.

A `TrialSpec` is plain data with a JSON round-trip (the runner writes it as `spec.json` next to
the trial's output, so a trial can be replayed from its artefacts alone), and `validate()` turns
every bad field into one `InvalidSpec` line, kept apart from a failed run (chaostoolkit
`InvalidActivity` vs `FailedActivity`).
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.inject import ENV_FIXES
from harness.runtime.errors import UserInputError

REPO_ROOT = Path(__file__).resolve().parents[2]
FORMAT = 2
"""spec.json's format: 2 says a command's fixes as None (as is) or () (`--fix none`); 1 had neither."""
WORKLOAD_KINDS = ("dflash", "repro", "command")
CHILDREN_ENV = "HARNESS_CHILDREN"
"""In a run's environment (`stress --children`): the bootstrap keeps the plan and the fixes for the
processes the program starts (bootstrap/sitecustomize.py spells it too: it imports no harness code)."""


class InvalidSpec(UserInputError):
    """A trial spec that cannot be run; the message is one line naming the field."""


@dataclass(kw_only=True, slots=True, frozen=True)
class WorkloadSpec:
    """The program under test."""

    kind: str
    """`dflash` (python -m dflash train ...), `repro` (repro/<script>.py ...) or `command`."""
    argv: tuple[str, ...] = ()
    """dflash: arguments after `train`; repro: script name (with or without .py) then its
    arguments; command: the full argv."""


@dataclass(kw_only=True, slots=True)
class TrialSpec:
    """One trial. `plan` is the scheduler's plan JSON, opaque here (only `seed` is read)."""

    trial_id: str
    cell: str
    workload: WorkloadSpec
    fixes: tuple[str, ...] | None = None
    """Registry fix names; () for none. A command's None runs it as it is, with no fix layer at all,
    where () installs the guard with no fix (`--fix none`); the trainer and repros read both as none."""
    plan: dict[str, Any] | None = None
    env: dict[str, str] = field(default_factory=dict)
    """Extra environment for the child (on top of the harness's own variables)."""
    timeout_s: float = 600.0
    """Total deadline; still progressing at it -> TIMEOUT."""
    hang_s: float = 60.0
    """No heartbeat change and no output growth for this long -> HANG."""
    trial_index: int = 0
    cwd: str | None = None
    """Working directory of the child; None = the repository root."""
    exposure: bool = True
    """Count the races' windows in the child (harness.faults.exposure); False installs nothing."""
    foreign: bool = False
    """A user's own program (`harness stress`): its exit codes mean zero, non-zero or a signal and
    nothing more, where the trainer's and repros' contract reads 2 as bad input, 3 as a wrong
    result and a `HANG:` line as a hang they reported."""
    files: dict[str, str] = field(default_factory=dict)
    """Files the runner writes into the trial's folder before the child starts (name: text): inputs
    that travel with the spec, to a Ray node too (hunt's list of tests to run)."""
    python: str | None = None
    """Interpreter of a `dflash` or `repro` child (another venv's, i.e. another torch); None = the
    harness's own. The project must be importable there with its dependencies (repro: torch)."""

    def validate(self) -> None:
        """Raise InvalidSpec with one clear line for the first bad field."""
        _check_text("trial_id", self.trial_id)
        _check_text("cell", self.cell)
        _check_workload(self.workload)
        self._check_fixes()
        if self.plan is not None and not isinstance(self.plan, dict):
            raise InvalidSpec(f"plan: expected a JSON object or null, got {type(self.plan).__name__}")
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in self.env.items()):
            raise InvalidSpec("env: keys and values must be strings")
        for name, text in self.files.items():
            if (
                not isinstance(name, str)
                or Path(name).name != name
                or name in ("", ".", "..")
                or not isinstance(text, str)
            ):
                raise InvalidSpec(f"files: {name!r} must be a plain file name with text")
        _check_positive("timeout_s", self.timeout_s)
        _check_positive("hang_s", self.hang_s)
        if isinstance(self.trial_index, bool) or not isinstance(self.trial_index, int):
            raise InvalidSpec(f"trial_index: expected an int, got {self.trial_index!r}")
        if self.trial_index < 0:
            raise InvalidSpec(f"trial_index: must be >= 0, got {self.trial_index}")
        _check_flag("foreign", self.foreign)
        _check_flag("exposure", self.exposure)
        self._check_python()
        if self.cwd is not None and not Path(self.cwd).is_dir():
            raise InvalidSpec(f"cwd: {self.cwd!r} is not a directory")

    def _check_fixes(self) -> None:
        for name in self.fixes or ():
            if not isinstance(name, str) or not name or "," in name or name != name.strip():
                raise InvalidSpec(f"fixes: invalid fix name {name!r}")
        if self.fixes and not self._runs_python():
            # A command's fixes act through the trial bootstrap (inject.ENV_FIXES): Python programs only.
            raise InvalidSpec(f"fixes: the command {self.workload.argv[0]!r} is not a Python program to fix")

    def _check_python(self) -> None:
        if self.python is None:
            return
        if not (isinstance(self.python, str) and Path(self.python).is_file()):
            raise InvalidSpec(f"python: {self.python!r} is not an interpreter file")
        if not self._runs_python():
            raise InvalidSpec(f"python: the command {self.workload.argv[0]!r} is not a Python interpreter to replace")

    def _runs_python(self) -> bool:
        """False only for a command whose program is not a Python interpreter."""
        return self.workload.kind != "command" or Path(self.workload.argv[0]).name.startswith("python")

    @property
    def plan_seed(self) -> int | None:
        seed = (self.plan or {}).get("seed")
        return seed if isinstance(seed, int) and not isinstance(seed, bool) else None

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "trial_id": self.trial_id,
            "cell": self.cell,
            "workload": {"kind": self.workload.kind, "argv": list(self.workload.argv)},
            "fixes": None if self.fixes is None else list(self.fixes),
            "plan": self.plan,
            "env": dict(self.env),
            "timeout_s": self.timeout_s,
            "hang_s": self.hang_s,
            "trial_index": self.trial_index,
            "cwd": self.cwd,
            "exposure": self.exposure,
            **({"foreign": True} if self.foreign else {}),
            **({"python": self.python} if self.python is not None else {}),
            **({"files": dict(self.files)} if self.files else {}),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | str) -> TrialSpec:
        """Inverse of `to_json` (also accepts the JSON text). Raises InvalidSpec."""
        try:
            obj = json.loads(data) if isinstance(data, str) else dict(data)
            wl = obj.pop("workload")
            env = dict(obj.pop("env", None) or {})
            fixes = _stored_fixes(obj.pop("fixes", ()), env, wl["kind"], obj.pop("format", 1))
            spec = cls(
                workload=WorkloadSpec(kind=wl["kind"], argv=tuple(wl.get("argv", ()))),
                fixes=fixes,
                env=env,
                files=dict(obj.pop("files", None) or {}),
                **obj,
            )
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise InvalidSpec(f"spec JSON: {type(exc).__name__}: {exc}") from None
        spec.validate()
        return spec


def stored_fixes(data: Mapping[str, Any]) -> tuple[str, ...] | None:
    """The fixes of a stored spec.json's data, read as `from_json` reads them, without checking the rest."""
    workload = data.get("workload") or {}
    env = dict(data.get("env") or {})
    return _stored_fixes(data.get("fixes", ()), env, workload.get("kind"), data.get("format", 1))


def _stored_fixes(fixes: list | None, env: dict[str, str], kind: object, form: object) -> tuple[str, ...] | None:
    """A stored spec's fixes as the field says them now (None: as is). Specs of format 1 had no
    None: a command's `--fix none` rode the environment (ENV_FIXES=none, dropped from `env`
    here), and a command with no fixes ran as it is."""
    if form == 1 and env.get(ENV_FIXES) == "none":
        del env[ENV_FIXES]
        return ()
    if fixes is None or (form == 1 and not fixes and kind == "command"):
        return None
    return tuple(fixes)


def argv_for(spec: TrialSpec) -> list[str]:
    """The child's argv (a list: the runner never uses a shell)."""
    wl = spec.workload
    python = spec.python or sys.executable
    if wl.kind == "dflash":
        # Always pass fixes, even empty: the raw cell must not inherit a preset's fixes.
        return [python, "-m", "dflash", "train", *wl.argv, "--set", "fixes=" + ",".join(spec.fixes or ())]
    if wl.kind == "repro":
        script = wl.argv[0] if wl.argv[0].endswith(".py") else wl.argv[0] + ".py"
        fix_args = [arg for name in spec.fixes or () for arg in ("--fix", name)]
        return [python, str(REPO_ROOT / "repro" / script), *wl.argv[1:], *fix_args]
    # A command's own interpreter (`python my_program.py`) is swapped for the one asked for.
    return [spec.python, *wl.argv[1:]] if spec.python else list(wl.argv)


def _check_text(name: str, value: object) -> None:
    if not isinstance(value, str) or not value.strip():
        raise InvalidSpec(f"{name}: expected a non-empty string, got {value!r}")


def _check_flag(name: str, value: object) -> None:
    if not isinstance(value, bool):
        raise InvalidSpec(f"{name}: expected true or false, got {value!r}")


def _check_positive(name: str, value: object) -> None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not ok or not math.isfinite(value) or value <= 0:
        raise InvalidSpec(f"{name}: expected a positive number of seconds, got {value!r}")


def _check_workload(wl: object) -> None:
    if not isinstance(wl, WorkloadSpec):
        raise InvalidSpec(f"workload: expected a WorkloadSpec, got {type(wl).__name__}")
    if wl.kind not in WORKLOAD_KINDS:
        raise InvalidSpec(f"workload.kind: {wl.kind!r} is not one of {', '.join(WORKLOAD_KINDS)}")
    if not all(isinstance(a, str) for a in wl.argv):
        raise InvalidSpec("workload.argv: every argument must be a string")
    if wl.kind in ("repro", "command") and not wl.argv:
        raise InvalidSpec(f"workload.argv: a {wl.kind} workload needs at least one argument")
    if wl.kind == "repro" and ("/" in wl.argv[0] or wl.argv[0].startswith(".")):
        raise InvalidSpec(f"workload.argv: repro script {wl.argv[0]!r} must be a bare name")
