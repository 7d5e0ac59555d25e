"""`python -m harness doctor [--json] [--timeout S]`: what this machine's torch, Python and CUDA
mean for threads.

Every fact comes from a probe run in a subprocess (`harness.diagnosis.probes`); a probe that
crashes, hangs or prints no result is reported as `unknown (probe failed: ...)`, never guessed.
Then the fix sets `harness.runtime.fixes.recommended_sets.recommended` gives for this torch (cpu; cuda with and without
CUDA graphs when a GPU is present), which catalogued races (`harness.diagnosis.catalogue`)
are expected here, from each race's `needs_cuda` and the probe it names, and what was measured on
this torch's major.minor (the catalogue's `[[race.versions]]`, counted from the committed stores:
reproduces / not reproduced, its fixes hold / no longer needed / now harmful), or that it was
predicted from the source, or that nothing was recorded for this torch.

Text output is one line per fact: `<key>: <value>  (<what it means for threads>)`; on a machine
without CUDA the CUDA-only facts and races are named on one line each.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from harness.diagnosis import probes
from harness.diagnosis.catalogue import RecordSource, load, major_minor
from harness.diagnosis.probes import ProbeResult
from harness.diagnosis.race_evidence import version_verdict
from harness.runtime.fixes.recommended_sets import recommended


@dataclass(frozen=True, slots=True)
class RecommendedSet:
    key: str
    """recommended_cpu, recommended_cuda, recommended_cuda_cudagraphs."""
    line: str
    names: tuple[str, ...]
    measured: bool
    meaning: str


@dataclass(frozen=True, slots=True)
class RaceExpectation:
    id: str
    title: str
    status: str
    """expected, not expected, possible (no probe decides) or unknown."""
    reason: str
    on_this_torch: str = ""
    """The catalogue's verdict for this torch's major.minor, or that it has none ("" if no torch)."""


@dataclass(frozen=True, slots=True)
class Races:
    available: bool
    error: str | None
    races: tuple[RaceExpectation, ...]


@dataclass(frozen=True, slots=True)
class DoctorReport:
    facts: tuple[ProbeResult, ...]
    recommended: tuple[RecommendedSet, ...]
    recommended_error: str | None
    races: Races


def recommended_sets(results: Mapping[str, ProbeResult]) -> tuple[tuple[RecommendedSet, ...], str | None]:
    """The registry's sets for the probed torch: cpu always, cuda (graphs off/on) with a GPU."""
    version = results.get("torch_version")
    if version is None or not version.ok:
        return (), "torch_version is unknown" + (f" (probe failed: {version.error})" if version else "")

    kinds = [("recommended_cpu", "cpu", False, "the set measured clean for the trainer on CPU")]
    cuda = results.get("cuda_available")
    if cuda is not None and cuda.ok and cuda.value is True:
        kinds += [
            ("recommended_cuda", "cuda", False, "on a GPU, compile without CUDA graphs"),
            ("recommended_cuda_cudagraphs", "cuda", True, "on a GPU, with CUDA graphs (reduce-overhead)"),
        ]
    sets = []
    for key, device, graphs, meaning in kinds:
        rec = recommended(str(version.value), device, cudagraphs=graphs)
        sets.append(RecommendedSet(key, rec.line(), rec.names, rec.measured, meaning))
    return tuple(sets), None


def _load_catalogue() -> Any:
    return load()


def race_expectations(results: Mapping[str, ProbeResult], load: Callable[[], Any] = _load_catalogue) -> Races:
    """Per catalogued race: expected here or not, from needs_cuda and its probe (`!key` = negated)."""
    try:
        catalogue = load()
    except Exception as e:  # a missing or malformed catalogue must not cost the facts
        return Races(False, f"{type(e).__name__}: {' '.join(str(e).split())}", ())
    cuda = results.get("cuda_available")
    version = results.get("torch_version")
    torch = str(version.value) if version is not None and version.ok else None
    records_of = RecordSource()
    out = []
    for race in catalogue.races:
        out.append(
            RaceExpectation(
                race.id, race.title, *_expect(race, results, cuda), on_this_torch=_on_torch(race, torch, records_of)
            )
        )
    return Races(True, None, tuple(out))


def _on_torch(race: Any, torch: str | None, records_of: RecordSource) -> str:
    if not torch or not race.versions:
        return ""
    here = major_minor(torch)
    for v in race.versions:
        if v.torch == here:
            kind = "measured" if v.store is not None else "not measured"
            return f"torch {here} {kind}: {version_verdict(race, v, records_of)}"
    known = ", ".join(sorted({v.torch for v in race.versions}))
    how = (
        "`harness matrix --preset gpu-repros` on a GPU host measures it"
        if race.needs_cuda
        else "`harness matrix --preset versions-cpu` measures the CPU rows"
    )
    return f"torch {here}: no record (the catalogue has {known}): {how}"


def _expect(race: Any, results: Mapping[str, ProbeResult], cuda: ProbeResult | None) -> tuple[str, str]:
    if race.needs_cuda and cuda is not None and cuda.ok and cuda.value is False:
        return "not expected", "needs CUDA; cuda_available is False"
    if race.probe is None:
        return "possible", "no probe decides it"
    negated = race.probe.startswith("!")
    key = race.probe.lstrip("!")
    if key not in {f.key for f in probes.PROBES}:
        return "unknown", f"the catalogue names probe {key!r}, which doctor does not have"
    result = results.get(key)
    if result is None or not result.ok:
        why = result.error if result is not None else "not run"
        return "unknown", f"probe {key} failed: {why}"
    if not isinstance(result.value, bool):
        return "unknown", f"probe {key} answered {result.value!r}, not True/False"
    holds = result.value != negated
    needs = f"needs {key} False" if negated else f"needs {key} True"
    return ("expected" if holds else "not expected"), f"{needs}; here {key} is {result.value}"


def build_report(results: Mapping[str, ProbeResult], load: Callable[[], Any] = _load_catalogue) -> DoctorReport:
    recs, rec_error = recommended_sets(results)
    return DoctorReport(tuple(results.values()), recs, rec_error, race_expectations(results, load))


CUDA_FACTS = ("gpu_count", "gpu_names", "cuda_kernel_cache_off")
"""Facts that say something only where a CUDA device is (with every `cudagraph_*` one)."""


def _cuda_only(key: str) -> bool:
    return key in CUDA_FACTS or key.startswith("cudagraph_")


def format_text(report: DoctorReport) -> str:
    """One line per fact; where no CUDA device is, the facts and races that need one are named on
    one line each (`--json` keeps them all), and the bundled trainer's fix set comes last."""
    lines = _fact_lines(report) + _race_lines(report) + _recommended_lines(report)
    return "\n".join(lines) + "\n"


def _fact_lines(report: DoctorReport) -> list[str]:
    cuda = next((r for r in report.facts if r.key == "cuda_available"), None)
    no_cuda = cuda is not None and cuda.ok and cuda.value is False
    lines, skipped = [], []
    for r in report.facts:
        if no_cuda and _cuda_only(r.key):
            skipped.append(r.key)
            continue
        meaning = probes.fact(r.key).meaning_of(r.value) if r.ok and r.key in _KEYS else ""
        lines.append(f"{r.key}: {r.shown()}" + (f"  ({meaning})" if meaning else ""))
    if skipped:
        lines.append(
            f"not on this build (no CUDA device): {len(skipped)} facts about GPUs and CUDA graphs "
            f"({', '.join(skipped)}; `--json` has each)"
        )
    return lines


def _race_lines(report: DoctorReport) -> list[str]:
    if not report.races.available:
        return [f"expected races: unknown (catalogue not available: {report.races.error})"]
    lines = ["expected races (harness.diagnosis.catalogue):"]
    cuda_races = [r.id for r in report.races.races if r.reason.startswith("needs CUDA;")]
    for race in report.races.races:
        if race.id in cuda_races:
            continue
        lines.append(f"race {race.id}: {race.status}  ({race.title}; {race.reason})")
        if race.on_this_torch:
            lines.append(f"  {race.on_this_torch}")
    if cuda_races:
        lines.append(f"races that need CUDA, not expected here: {', '.join(cuda_races)}")
    return lines


def _recommended_lines(report: DoctorReport) -> list[str]:
    lines = []
    if report.recommended_error or report.recommended:
        lines.append("for the bundled trainer (python -m dflash train --set fixes=recommended):")
    if report.recommended_error:
        lines.append(f"recommended: unknown ({report.recommended_error})")
    for rec in report.recommended:
        lines.append(f"{rec.key}: {rec.line}  ({rec.meaning}; from harness.runtime.recommend.recommended)")
    return lines


def to_json(report: DoctorReport) -> dict[str, Any]:
    facts = []
    for r in report.facts:
        known = r.key in _KEYS
        facts.append(
            {
                "key": r.key,
                "value": r.value,
                "ok": r.ok,
                "error": r.error,
                "probe": r.script,
                "description": probes.fact(r.key).description if known else None,
                "meaning": probes.fact(r.key).meaning_of(r.value) if r.ok and known else None,
                "duration_s": r.duration_s,
            }
        )
    return {
        "facts": facts,
        "recommended": [asdict(rec) for rec in report.recommended],
        "recommended_error": report.recommended_error,
        "expected_races": {
            "available": report.races.available,
            "error": report.races.error,
            "races": [asdict(r) for r in report.races.races],
        },
    }


_KEYS = frozenset(f.key for f in probes.PROBES)
