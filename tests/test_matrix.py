"""Claims about matrix expansion, resume, stop rules and the worker pool.

Workloads are tiny `python -c` programs (the command kind), never torch, so this file runs in
seconds.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from matrix_specs import command, spec_dict
from records import record

from harness.campaign.local import with_run_dir
from harness.campaign.matrix import planning
from harness.campaign.matrix import progress as matrix_progress
from harness.campaign.matrix.expand import expand
from harness.campaign.matrix.pool import GpuSlots
from harness.campaign.matrix.run import run_matrix
from harness.campaign.matrix.spec import MatrixError
from harness.campaign.matrix.specfile import load_spec, spec_from_dict
from harness.stores.store import Store
from harness.trial.outcome import Outcome, TrialResult

PY = sys.executable
REPO = Path(__file__).resolve().parent.parent


def _cmd(code: str, timeout_s: float = 30.0) -> dict:
    return command("-c", code, timeout_s=timeout_s)


def _spec(tmp_path: Path, **over) -> dict:
    workloads = {"ok": _cmd("pass"), "bad": _cmd("import sys; sys.exit(1)")}
    return spec_dict(tmp_path, "t", workloads, trials=3) | over


def test_expand_gives_deterministic_ids_and_the_same_plan_seeds_to_every_strategy(tmp_path):
    d = {
        "name": "m",
        "trials": 4,
        "seed": 100,
        "workloads": {"tiny": {"kind": "dflash", "argv": ["--preset", "tiny-cpu"]}},
        "strategies": {"eager": {"sets": ["compile.mode=none"]}},
        "groups": [
            {
                "workloads": ["tiny"],
                "strategies": ["raw", "global-lock+sequential-startup", "eager"],
                "plans": [None, "switch"],
            }
        ],
    }
    a, b = expand(spec_from_dict(d)), expand(spec_from_dict(d))
    assert [t.to_json() for t in a] == [t.to_json() for t in b]
    ids = [t.trial_id for t in a]
    assert len(ids) == len(set(ids)) == 3 * 2 * 4
    assert "m/tiny:global-lock+sequential-startup@switch/3" in ids
    by_id = {t.trial_id: t for t in a}
    # Common random numbers: trial i of every strategy runs under the plan with seed 100 + i.
    for i in range(4):
        seeds = {by_id[f"m/tiny:{s}@switch/{i}"].plan_seed for s in ("raw", "eager", "global-lock+sequential-startup")}
        assert seeds == {100 + i}
    assert by_id["m/tiny:raw@-/0"].plan is None
    assert by_id["m/tiny:global-lock+sequential-startup@-/0"].fixes == ("global-lock", "sequential-startup")
    assert by_id["m/tiny:eager@-/0"].workload.argv[-2:] == ("--set", "compile.mode=none")


@pytest.mark.parametrize(
    "change,message",
    [
        ({"groups": [{"workloads": ["ok"], "strategies": ["no-such-fix"]}]}, "unknown strategy"),
        ({"groups": [{"workloads": ["ok"], "strategies": ["raw"], "plans": ["no-such-profile"]}]}, "malformed plan"),
        ({"groups": [{"workloads": ["ok"], "strategies": ["raw"], "plans": [42]}]}, "malformed plan"),
        ({"groups": [{"workloads": ["missing"], "strategies": ["raw"]}]}, "unknown workload"),
        ({"workloads": {"ok": {"kind": "command", "argv": [PY, "no/such/script.py"]}}}, "not found"),
        ({"workloads": {"r": {"kind": "repro", "argv": ["r99_no_such_repro"]}}}, "no repro script"),
        ({"workloads": {"d": {"kind": "dflash", "argv": ["--preset", "tiny-gpu"]}}}, "no dflash preset"),
        ({"trials": 0}, "must be >= 1"),
        ({"trails": 3}, "unknown key"),
        ({"workloads": {"ok": {"kind": "command", "argv": [PY, "-c", "0"], "gpu_slots": 0}}}, "gpu_slots must be >= 1"),
        ({"workloads": {"ok": {"kind": "command", "argv": [PY, "-c", "0"], "gpu_slots": 1.5}}}, "whole number"),
    ],
)
def test_bad_specs_fail_before_anything_runs(tmp_path, change, message):
    d = _spec(tmp_path, **change)
    with pytest.raises(MatrixError, match=message):
        expand(spec_from_dict(d))
    assert not (tmp_path / "store").exists()


def test_a_fix_on_a_command_workload_is_rejected(tmp_path):
    d = _spec(tmp_path, groups=[{"workloads": ["ok"], "strategies": ["global-lock"]}])
    with pytest.raises(MatrixError, match="is a command"):
        expand(spec_from_dict(d))


def test_run_matrix_records_every_trial_and_classifies_them(tmp_path):
    spec = spec_from_dict(_spec(tmp_path))
    stream = io.StringIO()
    done = run_matrix(spec, stream=stream, live=False, num_gpus=0)
    assert done.ran == 6 and done.resumed == 0 and done.left == 0
    outcomes = {r.trial_id: r.outcome for r in Store(tmp_path / "store").load()}
    assert outcomes == {
        **{f"t/ok:raw@-/{i}": Outcome.OK for i in range(3)},
        **{f"t/bad:raw@-/{i}": Outcome.CRASH for i in range(3)},
    }
    lines = stream.getvalue().splitlines()
    assert len(lines) == 6
    assert any(line.endswith(": bad:raw@-: 3 runs so far, 3 failures (100.00%)") for line in lines)
    # A second run finds everything done and runs nothing.
    again = run_matrix(spec, stream=io.StringIO(), live=False, num_gpus=0)
    assert again.ran == 0 and again.resumed == 6 and len(again.records) == 6


def test_max_failures_stops_scheduling_a_failing_cell(tmp_path):
    spec = spec_from_dict(
        _spec(
            tmp_path,
            trials=10,
            workers=1,
            max_failures=2,
            groups=[
                {"workloads": ["bad"], "strategies": ["raw"]},
                {"workloads": ["ok"], "strategies": ["raw"], "trials": 3},
            ],
        )
    )
    done = run_matrix(spec, stream=io.StringIO(), live=False, num_gpus=0)
    cells = [r.cell for r in done.records]
    assert cells.count("bad:raw@-") == 2
    assert cells.count("ok:raw@-") == 3
    assert done.left == 8 and done.left_by_time == 0


def test_max_time_starts_no_trial_after_the_deadline(tmp_path):
    spec = spec_from_dict(
        _spec(tmp_path, trials=30, workers=1, max_time_s=1.0, workloads={"slow": _cmd("import time; time.sleep(0.3)")})
    )
    start = time.monotonic()
    done = run_matrix(spec, stream=io.StringIO(), live=False, num_gpus=0)
    assert 1 <= done.ran < 30
    assert done.ran + done.left == 30
    assert done.left_by_time == done.left  # the clock ended them, not a failure rule
    assert time.monotonic() - start < 20


def test_a_worker_exception_surfaces_and_stops_the_pool(tmp_path):
    spec = spec_from_dict(_spec(tmp_path, trials=5))

    def broken(trial, artefacts):
        raise RuntimeError(f"harness bug on {trial.trial_id}")

    with pytest.raises(ExceptionGroup) as info:
        run_matrix(spec, stream=io.StringIO(), live=False, num_gpus=0, run_fn=broken)
    assert all(isinstance(e, RuntimeError) for e in info.value.exceptions)
    assert not Store(tmp_path / "store").load()


def test_gpu_slots_keep_at_most_per_gpu_trials_on_each_gpu():
    slots = GpuSlots(2, per_gpu=1)
    stop = threading.Event()
    assert slots.acquire(1, stop) == [0]
    assert slots.acquire(1, stop) == [1]
    got = []
    waiter = threading.Thread(target=lambda: got.append(slots.acquire(1, stop)), name="test-gpu-waiter")
    waiter.start()
    time.sleep(0.3)
    assert got == []  # both GPUs full: the third trial waits
    slots.release([1])
    waiter.join(timeout=5)
    assert got == [[1]]
    stop.set()
    assert slots.acquire(1, stop) is None
    assert GpuSlots(0, per_gpu=1).acquire(1, stop) == []  # CPU host: no assignment


def test_gpu_slots_weigh_each_trial_by_its_workloads_gpu_slots():
    # A trial weighing 3 slots of 4 (presets.CAMPAIGN_GPU_SLOTS weighs gpu-bound trials so).
    slots = GpuSlots(1, per_gpu=4)
    stop = threading.Event()
    assert slots.acquire(1, stop, weight=3) == [0]
    assert slots.acquire(1, stop, weight=1) == [0]  # the last slot still fits a small trial
    got = []
    waiter = threading.Thread(target=lambda: got.append(slots.acquire(1, stop, weight=3)), name="test-gpu-waiter")
    waiter.start()
    time.sleep(0.3)
    assert got == []  # 4/4 in use: the big trial waits
    slots.release([0], weight=3)
    waiter.join(timeout=5)
    assert got == [[0]]
    slots.release([0], weight=3)
    slots.release([0], weight=1)
    # A weight above per_gpu means the GPU alone, not a wait that can never end.
    assert slots.acquire(1, stop, weight=9) == [0]
    stop.set()
    assert slots.acquire(1, stop, weight=1) is None


def test_cell_line_is_in_go_stress_format():
    state = matrix_progress.CellState(name="r06:raw@fx-widen", runs=12, failures=3)
    assert state.line(65) == "1m05s: r06:raw@fx-widen: 12 runs so far, 3 failures (25.00%)"
    # Device memory exhaustion is counted apart and never feeds the max-failures stop rule.
    state.add(TrialResult(trial_id="t", cell=state.name, trial_index=12, outcome=Outcome.RESOURCE))
    assert (state.runs, state.failures, state.resources) == (12, 3, 1)
    assert state.line(65).endswith("3 failures (25.00%), 1 out of memory")


def _wait_for_records(path: Path, count: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.exists() and path.read_bytes().count(b"\n") >= count:
            return
        time.sleep(0.05)
    raise AssertionError(f"{path} did not reach {count} records")


def test_sigkill_mid_matrix_then_rerun_runs_only_the_missing_trials(tmp_path):
    d = _spec(
        tmp_path,
        trials=8,
        workers=2,
        workloads={
            "a": _cmd("import time; time.sleep(0.4)"),
            "b": _cmd("import sys, time; time.sleep(0.4); sys.exit(1)"),
        },
    )
    spec_path = tmp_path / "spec.json"
    spec_path.write_text(json.dumps(d))
    argv = [PY, "-m", "harness", "matrix", "--file", str(spec_path), "--no-live"]
    trials_path = tmp_path / "store" / "trials.jsonl"
    first = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_for_records(trials_path, 3, timeout_s=60)
        os.kill(first.pid, signal.SIGKILL)
    finally:
        first.wait(timeout=30)
    before = Store(tmp_path / "store").load()
    assert 3 <= len(before) < 16, "the kill must land mid-matrix"
    second = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert second.returncode == 0, second.stderr
    after = Store(tmp_path / "store").load()
    ids = [r.trial_id for r in after]
    assert len(ids) == len(set(ids)) == 16
    assert [r.to_json() for r in after[: len(before)]] == [r.to_json() for r in before]
    assert f"ran {16 - len(before)} trials" in second.stdout
    assert f"{len(before)} already in" in second.stdout


def test_dflash_trials_get_their_own_out_dir_under_their_artefacts(tmp_path):
    d = {"name": "m", "trials": 2, "workloads": {"tiny": {"kind": "dflash", "argv": ["--preset", "tiny-cpu"]}}}
    a, b = expand(spec_from_dict(d))
    ra, rb = with_run_dir(a, tmp_path / "a"), with_run_dir(b, tmp_path / "b")
    assert ra.workload.argv[-2:] == ("--set", f"train.out_dir={(tmp_path / 'a').resolve() / 'run'}")
    assert ra.workload.argv[-1] != rb.workload.argv[-1]
    assert a.workload.argv == ("--preset", "tiny-cpu")  # the expanded spec is not mutated


@pytest.mark.parametrize("sig,rc", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_interrupt_kills_running_trials_and_records_none_of_them(tmp_path, sig, rc):
    marker = f"harness-test-interrupt-{sig.name}"
    d = _spec(
        tmp_path,
        trials=2,
        workers=2,
        workloads={"slow": _cmd(f"import time; time.sleep(60)  # {marker}", timeout_s=120)},
    )
    spec_path = tmp_path / "spec.json"
    spec_path.write_text(json.dumps(d))
    # SIGINT back to its default in the child: a test run started in the background by a
    # non-interactive shell (`... &`) inherits SIGINT ignored, and Python then never installs
    # its KeyboardInterrupt handler (seen: CI launched that way timed out here every time).
    proc = subprocess.Popen(
        [PY, "-m", "harness", "matrix", "--file", str(spec_path), "--no-live"],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    artefacts = tmp_path / "store" / "artefacts"
    deadline = time.monotonic() + 60
    while not (artefacts.exists() and len(list(artefacts.glob("*/output.txt"))) == 2):
        assert time.monotonic() < deadline, "trials did not start"
        time.sleep(0.1)
    time.sleep(0.5)
    start = time.monotonic()
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == rc, err
    assert time.monotonic() - start < 20
    assert "killed 2 running trial(s)" in err
    assert Store(tmp_path / "store").load() == []
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert marker not in ps


def test_gpu_trials_get_cuda_visible_devices_and_share_gpus_up_to_per_gpu(tmp_path):
    code = "import os, time; print('GPU=' + os.environ.get('CUDA_VISIBLE_DEVICES', 'none')); time.sleep(0.3)"
    w = {**_cmd(code), "gpus": 1}
    spec = spec_from_dict(_spec(tmp_path, trials=4, workers=4, per_gpu=1, workloads={"g": w}))
    done = run_matrix(spec, stream=io.StringIO(), live=False, num_gpus=2)
    seen = []
    for r in done.records:
        out = (Path(r.artefacts) / "output.txt").read_text()
        seen.append(out.split("GPU=")[1].split()[0])
    assert sorted(seen) == ["0", "0", "1", "1"]
    assert json.loads((Path(done.records[0].artefacts) / "spec.json").read_text())["env"]["CUDA_VISIBLE_DEVICES"] in (
        "0",
        "1",
    )


@pytest.mark.parametrize(
    "name", ["cpu-quick", "cpu-trainer", "gpu-campaign", "gpu-repros", "gpu-topology", "gpu-topology-4"]
)
def test_every_preset_expands_against_the_real_fixes_scripts_and_profiles(name):
    from harness.campaign.matrix import presets as matrix_presets

    spec = matrix_presets.get(name)
    trials = expand(spec)
    assert len({t.trial_id for t in trials}) == len(trials) >= 20
    assert all(t.trial_id.startswith(f"{name}/") for t in trials)


def test_a_trial_waiting_for_a_gpu_slot_does_not_start_after_the_deadline(tmp_path):
    # 3 workers pop 3 trials at once, but one GPU slot runs them one at a time: the two that
    # waited for the slot past --max-time must be left, not started.
    w = {**_cmd("import time; time.sleep(1.0)"), "gpus": 1}
    spec = spec_from_dict(_spec(tmp_path, trials=3, workers=3, per_gpu=1, max_time_s=0.5, workloads={"g": w}))
    done = run_matrix(spec, stream=io.StringIO(), live=False, num_gpus=1)
    assert done.ran == 1 and done.left == 2 and done.left_by_time == 2


def test_a_trial_whose_cell_stopped_while_it_waited_for_a_slot_is_left_to_the_rule(tmp_path):
    # 3 workers pop bad's 3 trials at once; one GPU slot runs them one at a time. The first fails
    # and max_failures 1 stops the cell: the two waiting must not run once they get the slot.
    w = {**_cmd("import sys, time; time.sleep(0.3); sys.exit(1)"), "gpus": 1}
    spec = spec_from_dict(_spec(tmp_path, trials=3, workers=3, per_gpu=1, max_failures=1, workloads={"bad": w}))
    done = run_matrix(spec, stream=io.StringIO(), live=False, num_gpus=1)
    assert (done.ran, done.left, done.left_by_time) == (1, 2, 0)


def test_resume_reruns_out_of_memory_trials_and_pending_counts_them(tmp_path, capsys):
    # A RESOURCE record measured the packing, not the cell: the next run tries that trial again.
    spec = spec_from_dict(
        _spec(
            tmp_path, trials=2, max_failures=1, workloads={"ok": _cmd("pass"), "bad": _cmd("import sys; sys.exit(1)")}
        )
    )
    store = Store(tmp_path / "store")
    store.append(
        TrialResult(trial_id="t/ok:raw@-/0", cell="ok:raw@-", trial_index=0, outcome=Outcome.RESOURCE, duration_s=4.0)
    )
    store.append(
        TrialResult(trial_id="t/bad:raw@-/0", cell="bad:raw@-", trial_index=0, outcome=Outcome.CRASH, duration_s=2.0)
    )
    plans = {p.cell: p for p in planning.pending_plan(spec)}
    assert (plans["ok:raw@-"].pending, plans["ok:raw@-"].other, plans["ok:raw@-"].stopped) == (2, 1, False)
    assert (plans["bad:raw@-"].pending, plans["bad:raw@-"].stopped) == (0, True)  # max_failures 1
    from harness.commands.matrix import _print_pending

    _print_pending(spec)
    out = capsys.readouterr().out
    assert "(stopped by --max-failures)" in out and "2 pending, 1 cells stopped" in out
    done = run_matrix(spec, stream=io.StringIO(), live=False, num_gpus=0)
    assert done.ran == 2
    ok = [r for r in store.load() if r.trial_id == "t/ok:raw@-/0"]
    assert [r.outcome for r in ok] == [Outcome.RESOURCE, Outcome.OK]  # the old record stays
    assert ok[1].artefacts.endswith("-attempt1") and ok[1].artefacts != ok[0].artefacts
    assert all(p.pending == 0 for p in planning.pending_plan(spec))


def test_cells_filter_runs_a_subset_under_the_full_matrix_ids_and_resumes_into_its_store(tmp_path):
    d = _spec(
        tmp_path, trials=2, groups=[{"workloads": ["ok", "bad"], "strategies": ["raw"], "plans": [None, "switch"]}]
    )
    import dataclasses

    full = spec_from_dict(d)
    subset = dataclasses.replace(full, only=("ok:*@switch", "bad:raw@-"))
    assert [c.name for c in subset.cells()] == ["ok:raw@switch", "bad:raw@-"]
    # Same ids and plan seeds as the full matrix's trials of those cells.
    ids = {t.trial_id: t.plan_seed for t in expand(full)}
    assert all(ids[t.trial_id] == t.plan_seed for t in expand(subset))
    done = run_matrix(subset, stream=io.StringIO(), live=False, num_gpus=0)
    assert done.ran == 4 and {r.cell for r in done.records} == {"ok:raw@switch", "bad:raw@-"}
    # The full matrix resumes: only the other two cells' trials are left.
    assert sum(p.pending for p in planning.pending_plan(full)) == 4
    rest = run_matrix(full, stream=io.StringIO(), live=False, num_gpus=0)
    assert rest.ran == 4 and rest.resumed == 4


def test_a_cells_glob_that_matches_nothing_is_bad_input(tmp_path):
    import dataclasses

    with pytest.raises(MatrixError, match="no cell of matrix 't' matches 'ok:global-lock@-'"):
        dataclasses.replace(spec_from_dict(_spec(tmp_path)), only=("ok:global-lock@-",))
    assert not (tmp_path / "store").exists()


def _waiter(slots, order, name, weight, event):
    """A daemon thread waiting for `weight` slots; it records (name, ids) once served."""
    t = threading.Thread(
        target=lambda: order.append((name, slots.acquire(1, event, weight=weight))), name=f"test-{name}", daemon=True
    )
    t.start()
    time.sleep(0.3)
    return t


def test_gpu_slots_serve_waiters_in_order_so_a_big_trial_is_not_starved_by_small_ones():
    slots = GpuSlots(1, per_gpu=4, max_bypass=0)  # strict order: no backfill
    stop = threading.Event()
    try:
        assert slots.acquire(1, stop, weight=2) == [0]
        assert slots.acquire(1, stop, weight=1) == [0]  # 3 of 4 in use
        order = []
        big = _waiter(slots, order, "big", 3, stop)
        # One slot is free, but a 1-slot trial that comes after the waiting 3-slot one waits its turn.
        small = _waiter(slots, order, "small", 1, stop)
        assert order == []
        slots.release([0], weight=2)  # 1 in use: the big trial fits (4/4)
        big.join(timeout=5)
        time.sleep(0.3)
        assert order == [("big", [0])]
        slots.release([0], weight=1)  # 3/4: now the small one
        small.join(timeout=5)
        assert order == [("big", [0]), ("small", [0])]
        # A waiter that gives up leaves the queue: the one behind it gets the next free slot.
        gives_up = threading.Event()
        first = _waiter(slots, order, "first", 1, gives_up)
        second = _waiter(slots, order, "second", 1, stop)
        gives_up.set()
        first.join(timeout=5)
        slots.release([0], weight=1)
        second.join(timeout=5)
        assert order[2:] == [("first", None), ("second", [0])]
    finally:
        stop.set()  # no waiter outlives a failed assertion


def test_gpu_slots_backfill_a_slot_the_head_cannot_use_but_only_max_bypass_times():
    # 6 + 1 of 12 slots in use and a 6-slot trial at the head: 5 slots idle under strict order.
    # Up to max_bypass later 1-slot trials start in them; then they wait.
    slots = GpuSlots(1, per_gpu=12, max_bypass=2)
    stop = threading.Event()
    try:
        assert slots.acquire(1, stop, weight=6) == [0]
        assert slots.acquire(1, stop, weight=1) == [0]
        order = []
        big = _waiter(slots, order, "big", 6, stop)
        smalls = [_waiter(slots, order, f"small{k}", 1, stop) for k in range(3)]
        assert order == [("small0", [0]), ("small1", [0])]  # the third waits for the head
        slots.release([0], weight=6)  # 3 in use: the head fits (9/12)
        big.join(timeout=5)
        smalls[2].join(timeout=5)
        assert order[2] == ("big", [0])  # the head before the third small one
        assert order[3] == ("small2", [0])  # a new head: it fits at once (10/12)
        # Each head has its own count: behind a new 6-slot head, a 1-slot trial passes again.
        _waiter(slots, order, "big2", 6, stop)  # 10 + 6 > 12: waits
        _waiter(slots, order, "small3", 1, stop)
        assert order[4:] == [("small3", [0])]
        # A head that gives up leaves with its count: behind the next one, passes start again.
        slots4 = GpuSlots(1, per_gpu=4, max_bypass=1)
        assert slots4.acquire(1, stop, weight=2) == [0]
        order4 = []
        quits = threading.Event()
        _waiter(slots4, order4, "head", 3, quits)  # 2 + 3 > 4: waits
        _waiter(slots4, order4, "passer", 1, stop)  # the one pass it allows
        _waiter(slots4, order4, "next-head", 3, stop)  # cannot pass: count used up
        quits.set()
        time.sleep(0.6)
        _waiter(slots4, order4, "behind", 1, stop)  # 3 of 4 in use, next-head does not fit
        assert order4 == [("passer", [0]), ("head", None), ("behind", [0])]
        # A waiter passes a head that does not fit...
        slots2 = GpuSlots(1, per_gpu=4, max_bypass=10)
        assert slots2.acquire(1, stop, weight=3) == [0]
        order2 = []
        head = _waiter(slots2, order2, "head", 2, stop)  # 3 + 2 > 4: waits
        late = _waiter(slots2, order2, "late", 1, stop)  # 3 + 1 fits, and the head cannot: passes
        assert order2 == [("late", [0])]
        slots2.release([0], weight=3)  # 1 in use: the head fits
        head.join(timeout=5)
        late.join(timeout=5)
        assert order2[1] == ("head", [0])
        # ...never one that fits (its thread has been woken and takes the slots next): a head
        # queued by hand, never served, keeps a later waiter out of slots both would fit in.
        slots3 = GpuSlots(1, per_gpu=4, max_bypass=10)
        slots3.enqueue(1, 2)  # queued, never waited on
        gives_up = threading.Event()
        order3 = []
        behind = _waiter(slots3, order3, "behind", 1, gives_up)
        gives_up.set()
        behind.join(timeout=5)
        assert order3 == [("behind", None)]
    finally:
        stop.set()


def test_pending_estimates_cells_never_run_from_the_whole_stores_median(tmp_path, capsys):
    import dataclasses

    from harness.commands.matrix import _print_pending

    spec = spec_from_dict(_spec(tmp_path, trials=2))
    store = Store(tmp_path / "store")
    for i, d in enumerate((30.0, 90.0)):
        store.append(
            TrialResult(trial_id=f"t/ok:raw@-/{i}", cell="ok:raw@-", trial_index=i, outcome=Outcome.OK, duration_s=d)
        )
    _print_pending(dataclasses.replace(spec, only=("bad:*",)))
    out = capsys.readouterr().out
    assert "1 cells, 2 planned trials" in out and "~2 trial-minutes" in out  # 2 x the median 60 s


def test_pending_packs_the_estimate_as_the_pool_would(tmp_path, capsys):
    from harness.commands.matrix import _print_pending

    # A GPU trial taking 6 of 12 slots holds half a GPU (2 at once), whatever the 16 workers allow;
    # a CPU trial holds 1 of the 4 workers.
    d = _spec(tmp_path, trials=4, workers=16, per_gpu=12)
    d["workloads"] = {"big": {**_cmd("pass"), "gpus": 1, "gpu_slots": 6}, "cpu": _cmd("pass")}
    spec = spec_from_dict(d)
    store = Store(tmp_path / "store")
    for cell in ("big:raw@-", "cpu:raw@-"):
        store.append(
            TrialResult(trial_id=f"t/{cell}/0", cell=cell, trial_index=0, outcome=Outcome.OK, duration_s=120.0)
        )
    plans = {p.cell: p for p in planning.pending_plan(spec)}
    assert plans["big:raw@-"].share == 0.5 and plans["cpu:raw@-"].share == 1 / 16
    assert planning.pending_plan(spec, gpus=2)[0].share == 0.25
    _print_pending(spec)
    out = capsys.readouterr().out
    # 3 pending each: 12 trial-minutes; packed: 3 x 2 min x 0.5 + 3 x 2 min / 16 = 3.4 minutes.
    assert "~12 trial-minutes" in out and "at least ~3 minutes of wall time" in out and "on 1 GPU" in out
    # As the pool runs them: two big trials at once, the third after them (the CPU ones beside).
    assert plans["big:raw@-"].pending_indices == (1, 2, 3) and plans["big:raw@-"].slots == 6
    assert (
        "(harness.campaign.matrix.slots.simulate, the stored medians): ~4 minutes of wall time; in strict order ~4"
        in out
    )


def test_pending_replays_backfill_where_strict_order_would_leave_slots_idle(tmp_path, capsys):
    from harness.campaign.matrix.slots import Job, simulate
    from harness.commands.matrix import _print_pending

    # small (1 of 4 slots, 10 min) before big (3 slots, 1 min) in cell order; 4 pending each, run
    # as index 1 small, index 1 big, index 2 small, ...: strict order leaves slots idle behind a
    # big trial that does not fit, backfill fills them.
    d = _spec(tmp_path, trials=5, workers=16, per_gpu=4)
    d["workloads"] = {
        "small": {**_cmd("pass"), "gpus": 1, "gpu_slots": 1},
        "big": {**_cmd("pass"), "gpus": 1, "gpu_slots": 3},
    }
    spec = spec_from_dict(d)
    store = Store(tmp_path / "store")
    for cell, seconds in (("small:raw@-", 600.0), ("big:raw@-", 60.0)):
        store.append(
            TrialResult(trial_id=f"t/{cell}/0", cell=cell, trial_index=0, outcome=Outcome.OK, duration_s=seconds)
        )
    jobs = [Job(600.0, 1, 1), Job(60.0, 1, 3)] * 4
    want = {b: simulate(jobs, workers=16, num_gpus=1, per_gpu=4, max_bypass=b).wall_s / 60 for b in (None, 0)}
    assert round(want[None]) < round(want[0])
    _print_pending(spec)
    out = capsys.readouterr().out
    assert f"~{want[None]:.0f} minutes of wall time; in strict order ~{want[0]:.0f}" in out


def test_pending_reports_each_gpu_workloads_peak_memory_against_its_packing(tmp_path, capsys):
    from harness.commands.matrix import _print_pending

    d = _spec(tmp_path, trials=4, workers=16, per_gpu=12)
    d["workloads"] = {"big": {**_cmd("pass"), "gpus": 1, "gpu_slots": 6}, "cpu": _cmd("pass")}
    spec = spec_from_dict(d)
    store = Store(tmp_path / "store")
    finals = [
        {"gpu_mem_peak_gib": {"cuda:0": 31.5}},
        {"gpu_mem_peak_gib": {"cuda:0": 48.25, "cuda:1": 2.0}},
        None,
        {"gpu_mem_peak_gib": None},
    ]  # a crash has no final event; a CPU plan says None
    for i, final in enumerate(finals):
        store.append(
            record(
                f"t/big:raw@-/{i}",
                duration_s=60.0,
                final=final,
            )
        )
    (peak,) = planning.memory_peaks(spec, store.load())
    assert (peak.workload, peak.peak_gib, peak.trials, peak.at_once) == ("big", 48.25, 2, 2)
    _print_pending(spec)
    assert (
        "GPU memory, big: peak 48.2 GiB over 2 trial(s) that have one; 2 at once on a GPU need ~96 GiB"
        in capsys.readouterr().out
    )
    # A run that failed reports what it held in its `failed` event (dflash), which counts too.
    store.append(
        record(
            "t/big:raw@-/4",
            Outcome.CRASH,
            duration_s=40.0,
            final={"event": "failed", "gpu_mem_peak_gib": {"cuda:0": 50.0}},
        )
    )
    (peak,) = planning.memory_peaks(spec, store.load())
    assert (peak.peak_gib, peak.trials) == (50.0, 3)
    # A hang reports nothing itself; the runner's nvidia-smi samples (gpu_mem_gib) count for it.
    store.append(
        record(
            "t/big:raw@-/5",
            Outcome.HANG,
            duration_s=200.0,
            gpu_mem_gib=55.0,
        )
    )
    (peak,) = planning.memory_peaks(spec, store.load())
    assert (peak.peak_gib, peak.trials) == (55.0, 4)


def test_a_matrix_warns_before_packing_more_peak_memory_than_a_gpu_holds(tmp_path):
    d = _spec(tmp_path, trials=2, workers=4, per_gpu=12)
    d["workloads"] = {"big": {**_cmd("pass"), "gpus": 1, "gpu_slots": 4}}
    spec = spec_from_dict(d)
    held = [
        record(
            "t/big:raw@-/0",
            final={"gpu_mem_peak_gib": {"cuda:0": 60.5}},
        )
    ]
    # 12 // 4 = 3 at once x 60.5 GiB > 139.8 GiB: warned; 2 at once would fit; no peaks: silent.
    (line,) = planning.memory_warnings(spec, held, {"big"}, totals_gib=[139.8])
    assert line.startswith("warning: GPU memory: big: peak 60.5 GiB over 1 trial(s) that have one; 3 at once")
    assert "more than the 139.8 GiB" in line
    assert planning.memory_warnings(spec, held, {"big"}, totals_gib=[200.0]) == []
    assert planning.memory_warnings(spec, held, set(), totals_gib=[139.8]) == []  # nothing of it pending
    assert planning.memory_warnings(spec, [], {"big"}, totals_gib=[139.8]) == []


def test_gpu_memory_totals_come_from_nvidia_smi(tmp_path, monkeypatch):
    from harness.trial import gpu

    fake = tmp_path / "nvidia-smi"
    fake.write_text("#!/bin/bash\nprintf '143771\\n143771\\n'\n")
    fake.chmod(0o755)
    monkeypatch.setattr(gpu, "nvidia_smi", lambda: str(fake))
    assert gpu.total_memory_gib() == pytest.approx([140.4, 140.4], abs=0.1)
    fake.write_text("#!/bin/bash\necho 'No devices were found'\n")
    assert gpu.total_memory_gib() is None
    monkeypatch.setattr(gpu, "nvidia_smi", lambda: None)
    assert gpu.total_memory_gib() is None


def test_packing_by_memory_gives_a_cell_measured_smaller_fewer_slots_and_never_more(tmp_path):
    d = _spec(tmp_path, trials=4, workers=16, per_gpu=12)
    d["workloads"] = {"big": {**_cmd("pass"), "gpus": 1, "gpu_slots": 6}, "cpu": _cmd("pass")}
    d["strategies"] = {"a": {}, "b": {}, "c": {}}
    d["groups"] = [{"workloads": ["big", "cpu"], "strategies": ["raw", "a", "b", "c"]}]
    spec = spec_from_dict(d)

    def rec(cell, i, final, outcome=Outcome.OK):
        return TrialResult(trial_id=f"t/{cell}/{i}", cell=cell, trial_index=i, outcome=outcome, final=final)

    records = [
        rec("big:a@-", 0, {"gpu_mem_peak_gib": {"cuda:0": 20.0}}),
        rec("big:a@-", 1, {"gpu_mem_peak_gib": {"cuda:0": 24.4}}),  # the cell's highest
        rec("big:b@-", 0, {"event": "failed", "gpu_mem_peak_gib": {"cuda:0": 9.0}}, Outcome.CRASH),
        rec("big:c@-", 0, {"gpu_mem_peak_gib": {"cuda:0": 67.3}}),
        rec("cpu:a@-", 0, {"gpu_mem_peak_gib": None}),
    ]
    assert set(planning.cell_slots(spec, records).values()) == {6, 1}  # without the flag: gpu_slots
    packed = planning.cell_slots(dataclasses.replace(spec, gpu_mem_gib=139.8), records)
    # 139.8 / 12 = 11.65 GiB a slot: a 24.4 * 1.1 + 1 = 27.8 GiB -> 3 slots; the failed trial's 9 GiB
    # (b) -> 1; c needs 7 but never more than gpu_slots' 6; raw has no peak of its own: 6; CPU: 1.
    assert packed == {
        "big:raw@-": 6,
        "big:a@-": 3,
        "big:b@-": 1,
        "big:c@-": 6,
        "cpu:raw@-": 1,
        "cpu:a@-": 1,
        "cpu:b@-": 1,
        "cpu:c@-": 1,
    }
    # The runner's samples (context included, so no allowance added) pack a cell whose trials
    # report nothing, a hang or a native crash: raw's 21 GiB * 1.1 = 23.1 -> 2 slots (with the
    # allowance, 24.1 would take 3). A sample above a reported peak wins: b's 12 GiB * 1.1 = 13.2
    # -> 2 slots, not the 1 its 9 GiB gave.
    sampled = records + [
        dataclasses.replace(rec("big:raw@-", 0, None, Outcome.HANG), gpu_mem_gib=21.0),
        dataclasses.replace(rec("big:b@-", 1, None, Outcome.ABORT), gpu_mem_gib=12.0),
    ]
    packed = planning.cell_slots(dataclasses.replace(spec, gpu_mem_gib=139.8), sampled)
    assert (packed["big:raw@-"], packed["big:b@-"], packed["big:a@-"]) == (2, 2, 3)
    # A cell that ran out of memory keeps gpu_slots: its figures were too low for it once.
    oom = sampled + [rec("big:a@-", 2, None, Outcome.RESOURCE)]
    packed = planning.cell_slots(dataclasses.replace(spec, gpu_mem_gib=139.8), oom)
    assert (packed["big:raw@-"], packed["big:b@-"], packed["big:a@-"]) == (2, 2, 6)
    with pytest.raises(MatrixError, match="gpu_mem_gib must be > 0"):
        dataclasses.replace(spec, gpu_mem_gib=0.0)
    # The --pending estimate packs the same way: a's trials 4 at once (3 of 12 slots), not 2.
    store = Store(tmp_path / "store")
    for r in records:
        store.append(r)
    plans = {p.cell: p for p in planning.pending_plan(dataclasses.replace(spec, gpu_mem_gib=139.8))}
    assert plans["big:a@-"].share == 3 / 12 and plans["big:raw@-"].share == 6 / 12


def test_a_run_packed_by_memory_puts_two_trials_of_a_small_cell_on_one_gpu_at_once(tmp_path):
    # One GPU of 2 slots; the workload takes both (gpu_slots 2), the cell's stored peak needs one.
    d = _spec(tmp_path, trials=3, workers=2, per_gpu=2)
    d["workloads"] = {"big": {**_cmd("pass"), "gpus": 1, "gpu_slots": 2}}
    d["groups"] = [{"workloads": ["big"], "strategies": ["raw"]}]
    spec = spec_from_dict(d)
    Store(tmp_path / "store").append(
        record(
            "t/big:raw@-/0",
            final={"gpu_mem_peak_gib": {"cuda:0": 10.0}},
        )
    )

    def together(spec_run):
        barrier = threading.Barrier(2, timeout=3)  # passes only if trials 1 and 2 run at once

        def run(trial, artefacts):
            try:
                barrier.wait()
                outcome = Outcome.OK
            except threading.BrokenBarrierError:
                outcome = Outcome.CRASH
            return TrialResult(trial_id=trial.trial_id, cell=trial.cell, trial_index=trial.trial_index, outcome=outcome)

        done = run_matrix(spec_run, stream=io.StringIO(), live=False, num_gpus=1, run_fn=run)
        return sorted(r.outcome.name for r in done.records if r.trial_index > 0)

    # 80 GiB / 2 slots = 40 GiB a slot >= 10 x 1.1 + 1: one slot each, both at once; without the
    # flag each trial takes the GPU's two slots, and waits at the barrier alone.
    shutil.copytree(tmp_path / "store", tmp_path / "packed")
    assert together(dataclasses.replace(spec, gpu_mem_gib=80.0, store=str(tmp_path / "packed"))) == ["OK", "OK"]
    shutil.copytree(tmp_path / "store", tmp_path / "fixed")
    assert together(dataclasses.replace(spec, store=str(tmp_path / "fixed"))) == ["CRASH", "CRASH"]


def test_finish_by_starts_only_trials_whose_cell_median_ends_in_time(tmp_path):
    # Stored: slow's trials took 30 s, quick's 0.1 s. With 5 s left to finish, the slow cell's
    # pending trials are left to the clock, the quick cell's still run.
    spec = spec_from_dict(
        _spec(
            tmp_path,
            trials=3,
            workers=1,
            finish_by_s=5.0,
            workloads={"slow": _cmd("0"), "quick": _cmd("0")},
            groups=[{"workloads": ["slow", "quick"], "strategies": ["raw"]}],
        )
    )
    store = Store(tmp_path / "store")
    for cell, seconds in (("slow:raw@-", 30.0), ("quick:raw@-", 0.1)):
        store.append(
            TrialResult(trial_id=f"t/{cell}/0", cell=cell, trial_index=0, outcome=Outcome.OK, duration_s=seconds)
        )
    done = run_matrix(spec, stream=io.StringIO(), live=False, num_gpus=0)
    ran = sorted(r.trial_id for r in done.records[2:])
    assert ran == ["t/quick:raw@-/1", "t/quick:raw@-/2"]
    assert (done.left, done.left_by_time) == (2, 2)
    # Without the limit the slow cell runs too.
    again = run_matrix(dataclasses.replace(spec, finish_by_s=None), stream=io.StringIO(), live=False, num_gpus=0)
    assert again.ran == 2 and again.left == 0


def test_finish_by_must_be_positive(tmp_path):
    with pytest.raises(MatrixError, match="finish_by_s must be > 0"):
        spec_from_dict(_spec(tmp_path, finish_by_s=0))


def test_gpu_slots_serve_trials_in_the_order_they_were_queued_not_the_order_their_threads_came():
    # WorkerPool enqueues each trial as it pops it; the worker threads may then reach acquire in
    # either order. packing.simulate replays a run in pop order, so the pool must serve it so.
    slots = GpuSlots(1, per_gpu=2, max_bypass=0)
    stop = threading.Event()
    try:
        assert slots.acquire(1, stop, weight=1) == [0]  # 1 of 2 in use
        first, second = slots.enqueue(1, 1), slots.enqueue(1, 1)
        got = []
        late = threading.Thread(
            target=lambda: got.append(("second", slots.acquire(1, stop, 1, ticket=second))),
            name="test-second",
            daemon=True,
        )
        late.start()
        late.join(timeout=1.0)
        # One slot is free and "second" asked first, but "first" holds the head: under strict
        # order, second waits (FIFO by arrival would have given it the slot at once).
        assert got == [] and late.is_alive()
        assert slots.acquire(1, stop, 1, ticket=first) == [0]
        slots.release([0], weight=1)
        late.join(timeout=5)
        assert got == [("second", [0])]
    finally:
        stop.set()


@pytest.mark.parametrize("path", sorted((REPO / "harness" / "campaign" / "specs").glob("*.json")), ids=lambda p: p.stem)
def test_every_shipped_spec_file_loads_and_expands(path):
    # A spec for a GPU host is first run there: a typo must fail here, before that host's run.
    spec = load_spec(path)
    assert spec.name == path.stem and expand(spec)
