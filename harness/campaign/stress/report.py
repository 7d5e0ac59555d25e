"""What `harness stress` prints and keeps: the counts per arm as runs end, each first way of
failing echoed once, and at the end the totals (or the fix sets' table), the run times, the
diagnosis and the stress record a later `diagnose FOLDER` reads."""

from __future__ import annotations

import collections
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from harness import stats
from harness.campaign.loop import format_elapsed
from harness.campaign.plans import PlanChoice, plan_json
from harness.campaign.stress.options import StressOptions
from harness.diagnosis import diagnose
from harness.diagnosis.side_by_side import ArmCount, StressRecord, arm_name
from harness.text import clip
from harness.trial import native, tracebacks
from harness.trial.folder import NATIVE_STACK, OUTPUT

EXCERPT_FRAMES = 3
"""Innermost frames of a failure's traceback echoed with its exception line."""


EXCERPT_LINES = 4
"""Last lines of a failing run's output echoed where it printed no traceback."""


EXCERPT_WIDTH = 200


@dataclass(kw_only=True, slots=True)
class StressState:
    runs: int = 0
    failures: int = 0
    started: int = 0
    durations: list[float] = field(default_factory=list)
    outcomes: collections.Counter = field(default_factory=collections.Counter)
    signatures: collections.Counter = field(default_factory=collections.Counter)
    findings: collections.Counter = field(default_factory=collections.Counter)
    """Runs that exited OK but showed a race's face (a recompile limit hit, eager fallback); each
    such run also counts as a failure, unless the face is only suspected."""
    races: collections.Counter = field(default_factory=collections.Counter)
    """Failing runs per race the diagnosis named (`unknown` where none)."""
    plan_hits: int = 0
    """Points of the fault plan the runs reached (the plan log's summary), over all runs."""
    plan_logs: int = 0
    """Runs whose plan log had its closing summary (a run killed before exit writes none)."""

    def line(self, elapsed_s: float) -> str:
        pct = 100.0 * self.failures / self.runs if self.runs else 0.0
        return f"{format_elapsed(elapsed_s)}: {self.runs} runs so far, {self.failures} failures ({pct:.2f}%)"


def explain(out_dir: Path) -> str:
    """The failing runs' diagnosis, `harness diagnose OUT_DIR` brief (the same function, reading the
    same folder and its stress record), or why there is none."""
    try:
        return diagnose.report([str(out_dir)], brief=True)[0]
    except diagnose.DiagnoseError as e:
        return f"diagnosis: none ({e})"


def _races_text(races: collections.Counter) -> str:
    return ", ".join(f"{race} {n}" for race, n in races.most_common())


def native_lines(folder: Path, frames: int = EXCERPT_FRAMES) -> list[str]:
    """The crash site and innermost native frames the runner kept (harness.trial.native); [] where
    it kept none (no native crash)."""
    path = folder / NATIVE_STACK
    if not path.is_file():
        return []
    site, shown = native.kept_summary(path.read_text(errors="replace"), frames)
    return [f"native crash site: {site}"] + [f"  {line}" for line in shown.splitlines()]


def excerpt(output: str) -> list[str]:
    """A failing run in a few lines: its first failure's exception and innermost frames (the
    thread that raised it), else the output's last lines."""
    tb = tracebacks.primary_traceback(tracebacks.parse_tracebacks(output))
    if tb is None:
        tail = [line for line in output.splitlines() if line.strip()][-EXCERPT_LINES:]
        return [clip(line, EXCERPT_WIDTH) for line in tail]
    thread = f" (thread {tb.thread})" if tb.thread else ""
    head = clip(" ".join(f"{tb.exc_type}: {tb.message}".split()) + thread, EXCERPT_WIDTH)
    return [head] + [clip(f"  at {frame}", EXCERPT_WIDTH) for frame in tb.frames[:EXCERPT_FRAMES]]


@dataclass(kw_only=True, slots=True)
class Counts:
    """What the runs so far add up to, over all arms and per arm."""

    state: StressState
    arms: list[StressState]
    deterministic: str = ""
    """The stop's verdict where the first runs failed the same way, fast (engine)."""
    defects: int = 0
    """Runs the harness's own code failed (never the program's failures; kept and named)."""
    lost: int = 0
    """Runs the backend lost (a Ray node died): not counted, said."""


class StressReport:
    """The end of a stress run: totals, groups, the diagnosis, where the artefacts are."""

    def __init__(self, opts: StressOptions, counts: Counts, elapsed_s: float) -> None:
        self.opts, self.counts, self.elapsed_s = opts, counts, elapsed_s

    def print(self) -> int:
        """Print it all; exit 1 if a run failed."""
        s = self.counts.state
        self._print_totals(self.elapsed_s)
        self._print_groups()
        if s.failures or s.findings or self.counts.defects:
            self._stress_record().write(self.opts.out_dir)
            print(explain(self.opts.out_dir))
            out = self.opts.out_dir
            print(
                f"{'failing' if s.failures else 'kept'} runs' artefacts: {out} (each run's whole output: {out}/<run>/{OUTPUT})"
            )
        elif self.opts.own_dir:
            shutil.rmtree(self.opts.out_dir, ignore_errors=True)
        return 1 if s.failures else 0

    def _stress_record(self) -> StressRecord:
        """What the folder keeps beside its runs for a later `diagnose FOLDER` (side_by_side)."""
        o = self.opts
        options = (("--plan", o.plan) if o.plan else ()) + (("--children",) if o.children else ())
        arms = tuple(
            ArmCount(fixes=fixes, failed=a.failures, runs=a.runs, races=dict(a.races))
            for fixes, a in zip(o.fix_sets, self.counts.arms)
        )
        return StressRecord(command=o.cmd, options=options, arms=arms, deterministic=self.counts.deterministic)

    def _print_totals(self, elapsed: float) -> None:
        """The stop's verdict, the totals (or the fix sets' table) and the run times."""
        s = self.counts.state
        if self.counts.deterministic:
            print(self.counts.deterministic)
        idle_plan = self._idle_plan()
        print(self._arm_table(elapsed) if len(self.counts.arms) > 1 else self._total_line(elapsed, idle_plan))
        if idle_plan:
            print(idle_plan)
        if s.durations:
            print(
                f"run time: min {min(s.durations):.2f}s, median {stats.median_or_none(s.durations):.2f}s, "
                f"max {max(s.durations):.2f}s; outcomes: " + " ".join(f"{k}:{v}" for k, v in sorted(s.outcomes.items()))
            )

    def _print_groups(self) -> None:
        """Each distinct failure once with its count, each race face of an OK run, harness defects."""
        s = self.counts.state
        for sig, count in s.signatures.most_common():
            print(f"  {count} x {sig}")
        for face, count in s.findings.most_common():
            print(f"  {count} run(s) exited OK but showed {face}")
        if self.counts.lost:
            print(f"  {self.counts.lost} run(s) lost with their node or worker (not counted)")
        if self.counts.defects:
            print(
                f"  {self.counts.defects} run(s) failed in the harness's own code (a harness defect, not counted): please report"
            )

    def _total_line(self, elapsed: float, idle_plan: str) -> str:
        s = self.counts.state
        ci = stats.wilson(s.failures, s.runs)
        # A bound says how rare the failure is under the plan; a race the runs showed needs none.
        bound = ""
        if s.runs and not s.failures:
            bound = (
                f"; p < {100 * stats.rule_of_three(s.runs):.2f}% (rule of three{', plain runs' if idle_plan else ''})"
            )
        races = f"; races: {_races_text(s.races)}" if s.failures and not self.counts.deterministic else ""
        return (
            f"{s.runs} runs completed, {s.failures} failures ({100 * s.failures / max(1, s.runs):.2f}%), over "
            f"{format_elapsed(elapsed)}; Wilson 95% [{100 * ci.low:.2f}%, {100 * ci.high:.2f}%]{bound}{races}"
        )

    def _idle_plan(self) -> str:
        """A plan whose points no run reached, and that sets no switch interval, did nothing."""
        o, s = self.opts, self.counts.state
        if not o.plan or not s.plan_logs or s.plan_hits:
            return ""
        if plan_json(PlanChoice(name=o.plan, profile=o.plan), 0).get("switch_interval") is not None:
            return ""
        return (
            f"the plan did nothing here: no run reached any of {o.plan}'s points (torch functions the "
            "program never called); these were plain runs. --plan switch perturbs any Python threads"
        )

    def _arm_table(self, elapsed: float) -> str:
        """One row per fix set: failures k/n (a run that showed a race counts, whatever its exit
        code), Wilson 95%, median run time and its ratio to the first, and the races it showed."""
        rows = [f"{'fixes':<32} {'failed':>9} {'Wilson 95%':>17} {'median run':>11} {'vs first':>9}  races"]
        base = stats.median_or_none(self.counts.arms[0].durations)
        for fixes, a in zip(self.opts.fix_sets, self.counts.arms):
            ci = stats.wilson(a.failures, a.runs)
            med = stats.median_or_none(a.durations)
            ratio = f"{med / base:.2f}x" if med and base else "-"
            rows.append(
                f"{arm_name(fixes):<32} {f'{a.failures}/{a.runs}':>9} "
                f"{f'[{100 * ci.low:.1f}%, {100 * ci.high:.1f}%]':>17} "
                f"{f'{med:.2f}s' if med is not None else '-':>11} {ratio:>9}  {_races_text(a.races) or '-'}"
            )
        return (
            f"{self.counts.state.runs} runs over {format_elapsed(elapsed)}; run i of every set had plan seed i\n"
            + "\n".join(rows)
        )
