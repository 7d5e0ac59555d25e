"""Race regression checks: run a catalogue repro through the harness runner and judge the counts.

Every trial is `harness.trial.runner.run_trial` on a `TrialSpec` built the way `harness.campaign.expand.expand`
builds one (repro workload, fixes as `--fix`, plan `plan_from_seed(seed, profile)`, trial i gets
seed i), so the suite's counts and the catalogue store's (results/catalogue-cpu/trials.jsonl) are
the same kind of number: one fresh process per trial, the same outcome rules, the same signatures.

- False alarms: an unchanged tree fails a run of the whole suite with probability at most
  SUITE_FALSE_ALARM (0.1%). Only the reproduction checks can fail by chance alone (a fix that
  holds fails no trial; a known negative that stays negative shows nothing), so that budget is
  split evenly over them (Bonferroni): each misses a race still at the Wilson 95% lower bound of
  its recorded rate with probability at most MISS_PROBABILITY. A run of the serial suite once
  failed 1 of 104 tests on a commit whose next run passed: each check then allowed 1%, about 10%
  over the ten CPU reproduction checks.
- Reproduction: trials run one after another until one fails with the race's signature family,
  at most `repro_trials(race)` of them: the smallest n within that miss probability (capped at
  `REPRO_MAX_TRIALS`; the miss probability at the cap is printed). The check stops at the first
  reproduction, so a race near its recorded rate costs about 1/p trials. None seen ->
  `no longer reproduces on torch X: update the catalogue`, with the numbers, never a silent pass:
  a race that reproduces less often than recorded is a finding to record in the catalogue.
- Known negatives (`expect="absent"`): the repro did not reproduce on the recorded torch; seeing
  it now at a rate above the recorded interval fails with `reproduces again on torch X: update the
  catalogue`; a sighting within it is said in a `RaceBound` warning (r25 was seen once in 2 trials on
  torch 2.13.0+cpu on a loaded 2-core machine, 2026-12-07, recorded 0/10).
- Fix: N stressed trials (the race's plan, with the fix) must all end race-free; they are split
  into test items of at most FIX_CHUNK_TRIALS trials so that xdist spreads them. With 0 failures
  the exact one-sided 95% upper bound on the failure rate is 1 - 0.05**(1/N) (rule of three:
  ~3/N). N >= 29 catches a 10% failure rate with 95% probability (`stats.trials_needed(0.1)`);
  a smaller N is allowed but its weaker bound is said, in a `RaceBound` warning that shows in
  the pytest summary (also under xdist, where printed output of passing tests is not shown).
- Exposure (harness.faults.exposure, which the runner turns on for every trial): 0 failures are
  evidence only where the race's window opened. A row states what its fix does to the window
  (`fix_window`): `opens` -- the window must open in at least `fix_exposed` of the N fix trials
  (pro rata per chunk; openings whose call ran eagerly count, and are said apart); `shut` -- the
  fix keeps it shut, so no fix trial may open it on the compiled path, and the first chunk runs
  `fix_exposed` raw trials of the same seeds as a control, each of which must open it (the plan
  does open it: the fix shuts it, not the timing). A fix trial without exposure measured fails
  the check. The reproduction check reports the window's rate beside the failure rate.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import math
import os
import re
import shutil
import warnings
from dataclasses import dataclass
from pathlib import Path

import pytest

from harness import stats
from harness.diagnosis.catalogue import fails_by, load
from harness.faults.profiles import plan_from_seed
from harness.trial import native
from harness.trial.folder import NATIVE_STACK
from harness.trial.outcome import Outcome, TrialResult
from harness.trial.runner import run_trial
from harness.trial.spec import TrialSpec, WorkloadSpec

SUITE_FALSE_ALARM = 0.001
"""Probability that an unchanged tree fails one run of `pytest -k race`, at most."""
REPRO_CHECKS = sum(r.expect == "reproduces" for r in load().repros)
"""Reproduction checks in the catalogue (CPU, GPU and per-version rows alike: a conservative count
for either machine, which runs only its own)."""
MISS_PROBABILITY = SUITE_FALSE_ALARM / REPRO_CHECKS
"""A race still at its recorded rate may go unseen in one reproduction check this often."""
REPRO_MAX_TRIALS = 100
"""Cap on reproduction trials (a recorded rate too low for MISS_PROBABILITY within it prints its
miss chance). Reached only when the race is gone or far rarer than recorded: r05's 3/10 needs 86."""
TARGET_RATE = 0.10
TARGET_FIX_TRIALS = stats.trials_needed(TARGET_RATE)  # 29
assert TARGET_FIX_TRIALS == 29
FIX_TRIALS_ENV = "RACE_FIX_TRIALS"
"""Set to an int (e.g. 29) to run every fix check with that many trials instead of its default."""
FIX_CHUNK_TRIALS = 5
"""Fix-check trials per test item (see `fix_chunks`)."""
TRIAL_TIMEOUT_S = 120.0
TRIAL_HANG_S = 60.0
CPU_ENV = {"OMP_NUM_THREADS": "1"}  # as harness.campaign.matrix.presets.CPU_ENV: two trials share two cores


class RaceBound(UserWarning):
    """How strong a fix check's 0/N is: N and the 95% upper bound on the failure rate."""


@dataclass(kw_only=True, slots=True, frozen=True)
class Race:
    """One catalogue row, with the counts recorded in a store (or log) for it."""

    id: str
    """Catalogue id (`r06`)."""
    script: str
    """Script name under repro/ (`r06_fx_tracing_flag`)."""
    device: str
    """`CPU` or `GPU`."""
    family: str
    """Regex searched in `<outcome> <signature> <summary>` of a failing trial: the race's own
    signature family (other failures do not count as reproductions)."""
    plan: str | None
    """Scheduler profile of the stressed cells (None: no plan)."""
    recorded: tuple[int, int]
    """(k, n) failing trials under `plan` in the store."""
    recorded_plain: tuple[int, int] | None = None
    """(k, n) without a plan, for the README (not used by the checks)."""
    torch: str
    """torch version the counts were recorded on."""
    source: str
    """Where the counts come from (store path and cells, or log files)."""
    expect: str = "reproduces"
    """`reproduces` or `absent` (a known negative on the recorded torch)."""
    args: tuple[str, ...] = ()
    """Extra script arguments for every trial."""
    fix: str | None = None
    """Registry fix (or `+` combination) that holds; None = no fix to check."""
    fix_args: tuple[str, ...] = ()
    """Script arguments that make the fix (r10's `--reentrant`), on top of `args`."""
    fix_recorded: tuple[int, int] | None = None
    """(k, n) failing trials with the fix under `plan` in the store."""
    fix_trials: int = TARGET_FIX_TRIALS
    """Stressed trials of the fix check (below 29 the weaker bound is printed)."""
    repro_cap: int = REPRO_MAX_TRIALS
    windows: tuple[str, ...] = ()
    """Exposure windows of the row's races (their ids); () = none has a probe: no gate."""
    fix_window: str | None = None
    """`opens` or `shut` (what the fix does to the window); None = not stated: no gate, said."""
    fix_exposed: int | None = None
    """`opens`: fix trials (of fix_trials) the window must open in; `shut`: raw control trials."""
    native: str | None = None
    """Regex over the native stack the runner kept (`native_stack.txt`, harness.trial.native) of a
    reproduction that crashed natively: where in torch's C++ the race lands. None = not checked."""

    @property
    def cell(self) -> str:
        return f"{self.id}:raw@{self.plan or '-'}"


def torch_version() -> str:
    # From the installed metadata (as the runner records it): importing torch here costs seconds.
    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def repro_trials(race: Race) -> tuple[int, float]:
    """(n, miss probability at the Wilson lower bound of the recorded rate for that n)."""
    k, n = race.recorded
    low = stats.wilson(k, n).low
    if low <= 0.0:
        return race.repro_cap, 1.0
    needed = math.ceil(round(math.log(MISS_PROBABILITY) / math.log(1.0 - low), 9)) if low < 1 else 1
    trials = max(1, min(needed, race.repro_cap))
    return trials, (1.0 - low) ** trials


def fix_trials(race: Race) -> int:
    value = os.environ.get(FIX_TRIALS_ENV)
    if value is None:
        return race.fix_trials
    try:
        trials = int(value)
    except ValueError:
        raise pytest.UsageError(f"{FIX_TRIALS_ENV}={value!r}: expected an integer") from None
    if trials < 1:
        raise pytest.UsageError(f"{FIX_TRIALS_ENV}={value!r}: must be >= 1")
    return trials


def trial(race: Race, index: int, artefacts: Path, *, fixed: bool) -> TrialResult:
    """Run trial `index` of the race's stressed cell (raw or with its fix) in a fresh process."""
    args = race.args + (race.fix_args if fixed else ())
    fixes = tuple(race.fix.split("+")) if fixed and race.fix else ()
    plan = plan_from_seed(index, race.plan).to_dict() if race.plan else None
    strategy = (race.fix or "args") if fixed else "raw"
    spec = TrialSpec(
        trial_id=f"race-suite/{race.id}:{strategy}@{race.plan or '-'}/{index}",
        cell=f"{race.id}:{strategy}@{race.plan or '-'}",
        workload=WorkloadSpec(kind="repro", argv=(race.script, *args)),
        fixes=fixes,
        plan=plan,
        env=dict(CPU_ENV) if race.device == "CPU" else {},
        timeout_s=TRIAL_TIMEOUT_S,
        hang_s=TRIAL_HANG_S,
        trial_index=index,
    )
    result = run_trial(spec, artefacts / f"{strategy}-{index}")
    if result.outcome is Outcome.HARNESS_ERROR:
        pytest.fail(f"{race.id}: harness error in trial {index}: {result.detail} ({result.artefacts})")
    if result.skipped:
        pytest.skip(f"{race.id}: {result.detail}")
    return result


def matches_family(race: Race, result: TrialResult) -> bool:
    return fails_by(race.family, result)


def describe(result: TrialResult) -> str:
    return f"{result.outcome.value} {result.signature or '-'} ({result.artefacts})"


@dataclass(slots=True)
class Windows:
    """Exposure of the race's windows over some trials."""

    race: Race
    trials: int = 0
    measured: int = 0
    opened: int = 0
    """Trials in which a window opened at all (eager calls included)."""
    compiled: int = 0
    """Trials in which one opened on the compiled path."""
    openings: int = 0
    eager: int = 0
    unmeasured: list[int] = dataclasses.field(default_factory=list)

    def add(self, index: int, result: TrialResult) -> None:
        self.trials += 1
        counts = result.exposures or {}
        keys = [w for w in self.race.windows if w in counts]
        if not keys:
            self.unmeasured.append(index)
            return
        self.measured += 1
        eager = result.exposure_eager or {}
        opened = sum(counts[w] for w in keys)
        self.openings += opened
        self.eager += sum(eager.get(w, 0) for w in keys)
        self.opened += opened > 0
        self.compiled += bool(result.exposed(keys))

    def text(self) -> str:
        if not self.race.windows:
            return "no exposure probe for its race"
        if not self.measured:
            return f"exposure not measured in {self.trials} trials"
        eager = f", {self.eager} run eagerly" if self.eager else ""
        trials = "trial" if self.measured == 1 else "trials"
        return (
            f"window {'/'.join(self.race.windows)} opened in {self.opened} of {self.measured} {trials} "
            f"({self.openings} times{eager})"
        )


def check_reproduces(race: Race, artefacts: Path) -> None:
    """At least one failure with the race's signature family within `repro_trials` trials (for a row
    whose installed torch no longer shows the race, `expect = absent`: check_absent)."""
    if race.expect == "absent":
        return check_absent(race, artefacts)
    n, miss = repro_trials(race)
    k0, n0 = race.recorded
    version = torch_version()
    other: list[str] = []
    counted = 0
    windows = Windows(race)
    for i in range(n):
        result = trial(race, i, artefacts, fixed=False)
        counted += result.outcome.counts_as_trial
        windows.add(i, result)
        if matches_family(race, result):
            print(
                f"{race.id}: reproduced in trial {i + 1} of at most {n} under plan {race.plan} "
                f"(recorded {k0}/{n0} on torch {race.torch}): {describe(result)}; failed 1 of "
                f"{windows.trials} trials run, {windows.text()}"
            )
            if race.native and result.outcome is Outcome.ABORT:
                check_native_site(race, result)
            if miss >= MISS_PROBABILITY:
                warnings.warn(
                    RaceBound(
                        f"{race.id}: reproduction check capped at {n} trials: a race at the Wilson lower "
                        f"bound of its recorded {k0}/{n0} would go unseen with probability {miss:.1%}"
                    ),
                    stacklevel=2,
                )
            return
        if result.outcome.is_failure:
            other.append(describe(result))
    seen = f"; other failures: {other}" if other else ""
    pytest.fail(
        f"{race.id} no longer reproduces on torch {version}: update the catalogue "
        f"(0/{counted} trials with signature /{race.family}/ under plan {race.plan}, "
        f"{windows.text()}; "
        f"recorded {k0}/{n0} on torch {race.torch}; a race still at the Wilson lower bound of "
        f"that rate goes unseen in {n} trials with probability {miss:.2g}, this check's share "
        f"of the suite's {SUITE_FALSE_ALARM:.1%} false-alarm budget being {MISS_PROBABILITY:.2g}{seen})"
    )


def check_native_site(race: Race, result: TrialResult) -> None:
    """The native crash lands where the catalogue says (a torch upgrade that moves it, e.g. R5
    from `create_cache_entry` elsewhere, is a changed race): checked where the runner could keep
    and name the frames (a C compiler for the handler, addr2line for hidden symbols)."""
    path = Path(result.artefacts or "") / NATIVE_STACK
    if not path.is_file() or shutil.which("addr2line") is None:
        why = native.why_not() or ("no addr2line" if shutil.which("addr2line") is None else "no native stack kept")
        print(f"{race.id}: native crash site not checked ({why})")
        return
    text = path.read_text(errors="replace")
    if re.search(race.native, text) is None:
        top = "; ".join(ln for ln in text.splitlines()[1:4])
        pytest.fail(
            f"{race.id}: the native crash site moved on torch {torch_version()}: /{race.native}/ "
            f"not in {path} (innermost frames: {top}): update the catalogue"
        )
    print(f"{race.id}: native crash site /{race.native}/ as recorded")


def check_absent(race: Race, artefacts: Path) -> None:
    """A known negative stays negative: the race's family in none of the trials, or in so few that
    the rate seen still fits the recorded one. A sighting whose Wilson interval overlaps the
    recorded 0/n0's is said (a RaceBound warning with the trial), not failed: a rare race under a
    loaded machine is a finding to record, and a check that fails on it would fail correct trees."""
    n, seen = race.repro_cap, []
    for i in range(n):
        result = trial(race, i, artefacts, fixed=False)
        if matches_family(race, result):
            seen.append(f"trial {i}: {describe(result)}")
    k0, n0 = race.recorded
    if seen and stats.wilson(len(seen), n).low > stats.wilson(k0, n0).high:
        pytest.fail(
            f"{race.id} reproduces again on torch {torch_version()}: update the catalogue "
            f"({len(seen)}/{n} now, recorded {k0}/{n0} on torch {race.torch}; {'; '.join(seen)})"
        )
    if seen:
        line = (
            f"{race.id} seen in {len(seen)}/{n} trials on torch {torch_version()} (recorded {k0}/{n0} on "
            f"{race.torch}: within its interval, so not failed; record it): {'; '.join(seen)}"
        )
        warnings.warn(RaceBound(line), stacklevel=2)
        print(line)
        return
    print(f"{race.id}: still absent in {n} trials under plan {race.plan} on torch {torch_version()}")


def fix_chunks(race: Race) -> list[tuple[int, int]]:
    """The fix check's trials as [start, stop) ranges of at most FIX_CHUNK_TRIALS: one test item
    each, so pytest-xdist spreads a long check over its workers instead of running it on one."""
    n = fix_trials(race)
    return [(start, min(start + FIX_CHUNK_TRIALS, n)) for start in range(0, n, FIX_CHUNK_TRIALS)]


def chunk_id(chunk: tuple[int, int]) -> str:
    return f"trials{chunk[0]}-{chunk[1] - 1}"


def check_fix_holds(race: Race, artefacts: Path, chunk: tuple[int, int] | None = None) -> None:
    """0 failures in this chunk of the N stressed trials with the fix (all of them without a
    chunk), with the race's window met as the row states (`check_exposure`). The first chunk
    reports N and the 95% upper bound that all chunks passing give."""
    assert race.fix is not None or race.fix_args, f"{race.id} has no fix to check"
    n = fix_trials(race)
    start, stop = chunk or (0, n)
    failures: list[str] = []
    counted = timeouts = 0
    windows = Windows(race)
    for i in range(start, stop):
        result = trial(race, i, artefacts, fixed=True)
        counted += result.outcome.counts_as_trial
        timeouts += result.outcome is Outcome.TIMEOUT
        windows.add(i, result)
        if result.outcome.is_failure:
            failures.append(f"trial {i}: {describe(result)}")
    name = race.fix or " ".join(race.fix_args)
    assert not failures, (
        f"{race.id}: fix {name} failed {len(failures)}/{counted} stressed trials under plan {race.plan}: {failures}"
    )
    assert counted > 0, f"{race.id}: every trial timed out ({timeouts}); the budget is too small"
    exposure = check_exposure(race, artefacts, windows, n=n, first=start == 0)
    print(
        f"{race.id} fix {name}: 0/{counted} failures in trials {start}-{stop - 1} of {n} under plan "
        f"{race.plan}" + (f"; {timeouts} trial(s) timed out and are not counted" if timeouts else "") + f"; {exposure}"
    )
    if start != 0:
        return
    bound = stats.exact_zero_failure_bound(n)
    line = (
        f"{race.id} fix {name}: N={n} stressed trials under plan {race.plan}"
        + (f" in {len(fix_chunks(race))} test items" if chunk and stop < n else "")
        + f"; 0/{n} failures give a 95% upper bound on the failure rate of {bound:.1%} "
        f"(rule of three {stats.rule_of_three(n):.1%}); {exposure}"
    )
    if n < TARGET_FIX_TRIALS:
        line += (
            f"; N={n} < {TARGET_FIX_TRIALS}: weaker than the target (a {TARGET_RATE:.0%} "
            f"failure rate is caught with only {1 - (1 - TARGET_RATE) ** n:.0%} probability)"
        )
    warnings.warn(RaceBound(line), stacklevel=2)


def required_exposed(race: Race, trials: int, n: int) -> int:
    """`opens`: trials of a chunk of `trials` (of n) the window must open in: fix_exposed of the
    row's fix_trials, pro rata (RACE_FIX_TRIALS scales it), at least 1."""
    assert race.fix_exposed is not None
    rate = min(race.fix_exposed, race.fix_trials) / race.fix_trials
    return max(1, math.floor(rate * trials + 1e-9)) if n else 0


def check_exposure(race: Race, artefacts: Path, windows: Windows, *, n: int, first: bool) -> str:
    """The gate: a fix's 0 failures count only where the race's window was met as the row says.
    Returns the line that says how; fails the test where it was not."""
    if not race.windows:
        return windows.text()
    if race.fix_window is None:
        return f"{windows.text()}; no exposure gate (the row does not state what its fix does to the window)"
    if windows.unmeasured:
        pytest.fail(
            f"{race.id}: exposure not measured in fix trials {windows.unmeasured} (probes off: "
            f"HARNESS_EXPOSURE=0 or a spec with exposure false): 0 failures say nothing of whether "
            f"window {'/'.join(race.windows)} opened, so the fix is not shown to hold"
        )
    name = race.fix or " ".join(race.fix_args)
    if race.fix_window == "opens":
        need = required_exposed(race, windows.trials, n)
        if windows.opened < need:
            pytest.fail(
                f"{race.id}: fix {name}: {windows.text()}, needs at least {need} (the row states "
                f"{race.fix_exposed} of {race.fix_trials}): 0 failures in trials that never met "
                f"the window are no evidence that the fix holds"
            )
        return f"{windows.text()} (at least {need} needed)"
    if windows.compiled:
        pytest.fail(
            f"{race.id}: fix {name}, recorded as keeping window {'/'.join(race.windows)} shut: "
            f"{windows.text()} on the compiled path in {windows.compiled}: it meets the window "
            f'instead (update the catalogue: fix_window = "opens")'
        )
    line = f"{windows.text()}: the fix keeps it shut"
    if not first:
        return line
    control = Windows(race)
    for i in range(race.fix_exposed or 0):
        control.add(i, trial(race, i, artefacts / "control", fixed=False))
    if control.unmeasured or control.opened < control.trials:
        pytest.fail(
            f"{race.id}: control without the fix under plan {race.plan}: {control.text()}, "
            f"needs all {control.trials}: the plan does not open the window, so a fix that keeps "
            f"it shut is not shown to be what keeps it shut"
        )
    return f"{line}; without it the same seeds opened it in {control.opened} of {control.trials} ({control.openings} times)"


def repro_timeout_s(race: Race) -> float:
    """pytest-timeout for a reproduction check: every trial at its deadline, plus slack."""
    return race.repro_cap * (TRIAL_TIMEOUT_S + 30.0)


def fix_timeout_s(race: Race) -> float:
    """pytest-timeout for one fix-check item: every trial of a chunk at its deadline, plus slack."""
    return min(fix_trials(race), FIX_CHUNK_TRIALS) * (TRIAL_TIMEOUT_S + 30.0)
