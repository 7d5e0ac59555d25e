"""tools/h200_run.sh: whatever happens, a run packs its logs into $OUT in time.

The H200 runs of 2026-11-29 lost a whole store once because the script overran its budget
before packing (a bare `wait` also waited for the `tee` behind `exec >`). Here a run with an
unknown phase must end at once and still leave log.txt and run.tgz.
"""

import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "tools" / "h200_run.sh"


def _fake_python(tmp_path: Path, script: str) -> tuple[Path, dict]:
    """An $OUT folder and an environment whose `python3` is `script` (bash; {out} is the folder):
    h200_run.sh runs without torch, and what it hands the harness is kept for the test to read."""
    out, bin_ = tmp_path / "out", tmp_path / "bin"
    out.mkdir()
    bin_.mkdir()
    fake = bin_ / "python3"
    fake.write_text("#!/bin/bash\n" + script.format(out=out))
    fake.chmod(0o755)
    return out, {**os.environ, "OUT": str(out), "PATH": f"{bin_}:{os.environ['PATH']}"}


def _run(tmp_path: Path, env: dict, *phases: str, budget: str = "400") -> subprocess.CompletedProcess:
    """h200_run.sh with a budget of `budget` seconds over `phases`, in tmp_path; it must exit 0."""
    proc = subprocess.run(
        ["bash", str(SCRIPT), budget, *phases], cwd=tmp_path, capture_output=True, text=True, timeout=60, env=env
    )
    assert proc.returncode == 0, proc.stderr
    return proc


def test_script_parses():
    subprocess.run(["bash", "-n", str(SCRIPT)], check=True)


def test_a_run_packs_its_outputs_even_when_nothing_runs(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    _run(tmp_path, {**os.environ, "OUT": str(out)}, "no-such-phase", budget="30")
    log = (out / "log.txt").read_text()
    assert "unknown phase no-such-phase" in log and "== done after" in log
    with tarfile.open(out / "run.tgz") as tgz:
        assert any(name.startswith("x") for name in tgz.getnames())


def test_campaign_cells_reach_the_harness_unexpanded(tmp_path):
    # `campaign:GLOB` and a --cells glob in MATRIX_ARGS must arrive as written, even when a file
    # in the working folder matches the glob (a bare ${MATRIX_ARGS} would expand it).
    out, env = _fake_python(tmp_path, '[ "$2" = harness ] && printf "%s\\n" "$@" > {out}/args.txt\nexit 0\n')
    (tmp_path / "launch-bound:zzz").write_text("")
    (tmp_path / "gpu-zzz").write_text("")
    env["MATRIX_ARGS"] = "--trials 29 --cells=gpu-*"
    _run(tmp_path, env, "campaign:launch-bound:*")
    args = (out / "args.txt").read_text().splitlines()
    assert args[:4] == ["-m", "harness", "matrix", "--preset"] and "gpu-campaign" in args
    assert args[-3:] == ["29", "--cells=gpu-*", "--cells=launch-bound:*"]


def test_a_spec_file_phase_keeps_its_own_settings_and_bg_runs_beside_the_next_phase(tmp_path):
    # `bg:spec:FILE:S` runs a JSON spec's matrix in the background while `campaign:GLOB` runs;
    # MATRIX_ARGS (campaign trial counts) must not reach the spec file's matrix.
    out, env = _fake_python(
        tmp_path,
        '[ "$2" = harness ] || exit 0\nn=$(ls {out} | grep -c args)\n'
        'printf "%s\\n" "$@" > {out}/args-$n-$$.txt\nexit 0\n',
    )
    (tmp_path / "shape.json").write_text("{}")
    env["MATRIX_ARGS"] = "--trials 29"
    _run(tmp_path, env, "bg:spec:shape.json:100", "campaign:launch-bound:*")
    runs = [p.read_text().splitlines() for p in sorted(out.glob("args-*.txt"))]
    spec = next(a for a in runs if "--file" in a)
    campaign = next(a for a in runs if "--preset" in a)
    assert spec[spec.index("--file") + 1] == "shape.json" and "--trials" not in spec
    assert spec[spec.index("--max-time") + 1] == "100"
    # started trials must end before the matrix's SIGTERM: later than the start window, within the run
    for args in (spec, campaign):
        assert int(args[args.index("--max-time") + 1]) < int(args[args.index("--finish-by") + 1]) < 400
    assert campaign[-3:] == ["--trials", "29", "--cells=launch-bound:*"]
    log = (out / "log.txt").read_text()
    assert log.index("== phase campaign:launch-bound:*") < log.index("== phases done")


def test_a_price_phase_hands_its_configurations_over_unexpanded_and_its_records_to_out(tmp_path):
    # Configurations hold commas and colons; a glob-like one must not meet a file of that name.
    out, env = _fake_python(tmp_path, '[ "$2" = harness ] && printf "%s\\n" "$@" > {out}/args.txt\nexit 0\n')
    (tmp_path / "xa").write_text("")
    env["PRICE_ARGS"] = "--preset gpu-launch-bound --rounds 3 global-lock,stash-incref :none x?"
    _run(tmp_path, env, "price")
    args = (out / "args.txt").read_text().splitlines()
    assert args[:3] == ["-m", "harness", "price"]
    assert args[3:10] == ["--preset", "gpu-launch-bound", "--rounds", "3", "global-lock,stash-incref", ":none", "x?"]
    assert args[10] == "--max-time" and 0 < int(args[11]) < 400  # bounded by what the run has left
    assert args[12:] == ["--into", str(out / "price.jsonl"), "--dumps", "/tmp/x/price-dumps"]
    assert "price rc=0" in (out / "log.txt").read_text()
    # PRICE_RESUME: the earlier run's records become this run's file, and the run goes on.
    (tmp_path / "earlier.jsonl").write_text('{"phase": "bench:launch-bound::none", "run": "r1", "round": 0}\n')
    env["PRICE_RESUME"] = "earlier.jsonl"
    (out / "log.txt").unlink()
    _run(tmp_path, env, "price")
    assert "--resume" in (out / "args.txt").read_text().splitlines()
    assert (out / "price.jsonl").read_text() == (tmp_path / "earlier.jsonl").read_text()


UNPACK = ROOT / "tools" / "unpack_run.sh"


def _run_files(folder: Path, store: Path, log: str) -> Path:
    """What an H200 run leaves in $OUT: stores.tgz (results/<store>/...) and log.txt."""
    import tarfile as tf

    folder.mkdir(parents=True)
    with tf.open(folder / "stores.tgz", "w:gz") as tgz:
        tgz.add(store, arcname=f"results/{store.name}")
    (folder / "log.txt").write_text(log)
    return folder


def _unpack(files: Path, run: int, repo: Path, timeout: int = 120) -> subprocess.CompletedProcess:
    """tools/unpack_run.sh over an H200 run's `files` as run number `run`, in the checkout `repo`."""
    env = {**os.environ, "PYTHON": sys.executable, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        ["bash", str(UNPACK), str(files), str(run)], cwd=repo, env=env, capture_output=True, text=True, timeout=timeout
    )


def _add_trial(root: Path, i: int, started: str, output: str | None = None) -> None:
    """Trial `i` of cell a@- (OK, started at `started`) appended to the store at `root`; with
    `output`, its artefacts folder holds it as output.txt."""
    from harness.stores.store import Store
    from harness.trial.outcome import Outcome, TrialResult

    tid, artefacts = f"gpu-x/a@-/{i}", ""
    if output is not None:
        art = Store(root).artefacts_dir(tid)
        (art / "output.txt").write_text(output)
        artefacts = f"results/gpu-x/artefacts/{art.name}"
    Store(root).append(
        TrialResult(
            trial_id=tid,
            cell="a@-",
            trial_index=i,
            outcome=Outcome.OK,
            started_at=started,
            duration_s=1.0,
            artefacts=artefacts,
        )
    )


def test_unpacking_two_runs_that_forked_one_store_keeps_both_runs_trials(tmp_path):
    import shutil

    from harness.stores.store import Store

    repo = tmp_path / "repo"
    base = repo / "results" / "gpu-x"
    _add_trial(base, 0, "2026-11-30T10:00:00+00:00")
    # Both runs started from the checkout's one record; each ran its own trial 1.
    first, second = tmp_path / "c12" / "gpu-x", tmp_path / "c13" / "gpu-x"
    for copy, started in ((first, "2026-11-30T11:00:00+00:00"), (second, "2026-11-30T12:00:00+00:00")):
        shutil.copytree(base, copy)
        _add_trial(copy, 1, started)
    # Run 13's files unpacked first: the order must not matter.
    for n, store in ((13, second), (12, first)):
        files = _run_files(tmp_path / f"files{n}", store, f"run {n}\n")
        if n == 12:  # a price phase's records, written on the GPU host without a run number
            (files / "price.jsonl").write_text(
                "".join(
                    f'{{"phase": "bench:x::none", "call": null, "round": {r}, "tokens_per_s_steady": {t}}}\n'
                    for r, t in ((0, 10.0), (1, 12.0))
                )
            )
        proc = _unpack(files, n, repo)
        assert proc.returncode == 0, proc.stderr
    starts = sorted(r.started_at[11:13] for r in Store(base).load())
    assert starts == ["10", "11", "12"]
    assert len({r.trial_id for r in Store(base).load()}) == 3
    assert (repo / "results" / "h200-campaign" / "run12-log.txt").read_text() == "run 12\n"
    assert (repo / "REPORT.md").is_file()
    from harness.analysis import bench_records

    priced = bench_records.load([repo / "results" / "h200-campaign" / "benches.jsonl"])
    assert [(b.host_run, b.strategy, b.tokens_steady) for b in priced] == [(12, "eager", 10.0), (12, "eager", 12.0)]
    # The same run again: refused, nothing written.
    proc = _unpack(tmp_path / "files12", 12, repo, timeout=60)
    assert proc.returncode == 2 and proc.stderr.strip().count("\n") == 0 and "unpacked already" in proc.stderr
    # A price-only run whose stores.tgz did not come back (a host returns at most 8 files): its log
    # and price records are unpacked; a log alone is refused, nothing written.
    only = tmp_path / "files14"
    only.mkdir()
    (only / "log.txt").write_text("run 14\n")
    (only / "price.jsonl").write_text(
        '{"phase": "bench:x::none", "call": null, "round": 2, "tokens_per_s_steady": 11.0}\n'
    )
    proc = _unpack(only, 14, repo)
    assert proc.returncode == 0, proc.stderr
    priced = bench_records.load([repo / "results" / "h200-campaign" / "benches.jsonl"])
    assert [(b.host_run, b.tokens_steady) for b in priced][-1] == (14, 11.0) and len(Store(base).load()) == 3
    (only / "price.jsonl").unlink()
    proc = _unpack(only, 15, repo, timeout=60)
    assert proc.returncode == 2 and "no log.txt with stores.tgz or price.jsonl" in proc.stderr
    assert not (repo / "results" / "h200-campaign" / "run15-log.txt").exists()


def test_campaign_arguments_do_not_reach_the_repros_matrix(tmp_path):
    # `bg:repros:S` beside `campaign:GLOB`: --max-failures 1 would end every repro cell at its
    # first failure, so the repros get REPROS_ARGS only.
    out, env = _fake_python(tmp_path, '[ "$2" = harness ] || exit 0\nprintf "%s\\n" "$@" > {out}/args-$$.txt\nexit 0\n')
    env.update(MATRIX_ARGS="--max-failures 1 --trials 29", REPROS_ARGS="--trials 5")
    _run(tmp_path, env, "bg:repros:100", "campaign:gpu-bound:*")
    runs = [p.read_text().splitlines() for p in out.glob("args-*.txt")]
    repros = next(a for a in runs if "gpu-repros" in a)
    campaign = next(a for a in runs if "gpu-campaign" in a)
    assert "--max-failures" not in repros and repros[-2:] == ["--trials", "5"]
    assert campaign[-5:] == ["--max-failures", "1", "--trials", "29", "--cells=gpu-bound:*"]


def test_a_bench_phase_with_a_gpu_count_runs_the_seed_topology(tmp_path):
    # bench:PRESET:FIXES:MODE:GPUS (the seed topology): the bench gets gpu-topology-4's device plan, so its
    # record's device_plan has 4 GPUs and prices only 4-GPU verdicts (harness.analysis.report.benches_for).
    out, env = _fake_python(
        tmp_path,
        f'[ "$1" = -c ] && exec {sys.executable} "$@"\n'
        '[ "$2" = dflash ] && printf "%s\\n" "$@" > {out}/bench-$$.txt\nexit 0\n',
    )
    env["PYTHONPATH"] = str(ROOT)
    _run(tmp_path, env, "bench:launch-bound:global-lock:default:4", "bench:gpu-bound::none")
    runs = sorted((p.read_text().splitlines() for p in out.glob("bench-*.txt")), key=len)
    plain, topo = runs
    from dflash.topology import seed_topology

    assert plain[-4:] == ["--set", "fixes=", "--set", "compile.mode=none"]
    assert topo[-10:] == [a for kv in seed_topology(4) for a in ("--set", kv)]
    assert "devices.drafter_devices=cuda:1,cuda:2,cuda:3" in topo and "--preset" in topo


def test_unpacking_packs_the_runs_new_trials_and_an_empty_shell_does_not_shadow_a_zip(tmp_path):
    """The checkout's trials are zips (harness pack); the GPU host's copy of an uncommitted pack
    held their folders empty: stores.tgz leaves zips out, the merge keeps the
    checkout's zip, and the run's new trial comes in packed."""
    from harness.stores.store import Store, safe_name
    from harness.stores.zips import pack_store

    repo = tmp_path / "repo"
    base = repo / "results" / "gpu-x"
    _add_trial(base, 0, "2026-12-01T10:00:00+00:00", "checkout's\n")
    pack_store(base)
    device = tmp_path / "device" / "gpu-x"
    (device / "artefacts").mkdir(parents=True)
    (device / "trials.jsonl").write_bytes((base / "trials.jsonl").read_bytes())
    (device / "artefacts" / safe_name("gpu-x/a@-/0")).mkdir()  # the empty shell
    _add_trial(device, 1, "2026-12-01T11:00:00+00:00", "the run's\n")
    files = _run_files(tmp_path / "files44", device, "run 44\n")
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    proc = _unpack(files, 44, repo)
    assert proc.returncode == 0, proc.stderr
    assert "packed 1 trial folder(s)" in proc.stdout
    assert re.search(r"the checkout a GPU-host run ships: about \d+ MiB on disk of the 64 MiB limit", proc.stdout)
    assert sorted(p.name for p in (base / "artefacts").iterdir()) == [
        safe_name(f"gpu-x/a@-/{i}") + ".zip" for i in (0, 1)
    ]
    store = Store(base)
    assert [(store.artefacts_of(r) / "output.txt").read_text() for r in store.load()] == ["checkout's\n", "the run's\n"]


def test_the_run_leaves_packed_trials_out_of_stores_tgz_and_nothing_else(tmp_path):
    """h200_run.sh's own tar line, run on a store: the packed trials (and the retired store's) stay
    behind, a new trial's folder comes back whole, a zip inside it too, its `run/` not."""
    text = SCRIPT.read_text()
    start = text.index('tar czf "$OUT/stores.tgz"')
    line = text[start : text.index("\n", text.index("$(ls -d results/gpu-*/", start))]
    store = tmp_path / "results" / "gpu-x"
    for path in (
        "artefacts/old.zip",
        "retired/artefacts/older.zip",
        "artefacts/new/output.txt",
        "artefacts/new/inner.zip",
        "artefacts/new/run/ckpt.pt",
        "trials.jsonl",
    ):
        (store / path).parent.mkdir(parents=True, exist_ok=True)
        (store / path).write_text("x")
    out = tmp_path / "out"
    out.mkdir()
    subprocess.run(["bash", "-c", line], cwd=tmp_path, env={**os.environ, "OUT": str(out)}, check=True)
    with tarfile.open(out / "stores.tgz") as tgz:
        files = sorted(m.name for m in tgz.getmembers() if m.isfile())
    assert files == [
        "results/gpu-x/artefacts/new/inner.zip",
        "results/gpu-x/artefacts/new/output.txt",
        "results/gpu-x/trials.jsonl",
    ]
