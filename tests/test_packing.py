"""harness.campaign.matrix.slots: the pool's admission rule and its replay on a virtual clock (`--pending`)."""

import pytest

from harness.campaign.matrix.slots import Job, admit, simulate


def test_admit_serves_the_head_and_lets_a_later_waiter_pass_only_a_head_that_does_not_fit():
    queue = [(1, 3), (1, 1)]
    assert admit(queue, 0, [0], 4, bypassed=0, max_bypass=4) == [0]
    assert admit(queue, 1, [2], 4, bypassed=0, max_bypass=4) == [0]  # the head (3) does not fit in 2
    assert admit(queue, 1, [0], 4, bypassed=0, max_bypass=4) is None  # the head fits: its turn
    assert admit(queue, 1, [2], 4, bypassed=4, max_bypass=4) is None  # passed often enough
    assert admit(queue, 1, [2], 4, bypassed=0, max_bypass=0) is None  # strict order
    assert admit(queue, 1, [4], 4, bypassed=0, max_bypass=4) is None  # it does not fit either
    assert admit([(2, 1)], 0, [3, 0, 1], 4, bypassed=0, max_bypass=4) == [1, 2]  # least loaded GPUs
    # Behind the head, order holds too: waiter 2 does not take the slots waiter 1 fits in.
    assert admit([(1, 6), (1, 2), (1, 1)], 2, [9], 12, bypassed=0, max_bypass=1) is None
    assert admit([(1, 6), (1, 4), (1, 1)], 2, [9], 12, bypassed=0, max_bypass=1) == [0]


def test_backfill_finishes_a_mixed_queue_sooner_than_strict_order():
    # per_gpu 4: A and B take 3 slots, C and D one, 10 s each. Strict: A | B+C | D = 30 s.
    # Backfill: A+C | B+D = 20 s (C passes B, which cannot fit beside A).
    jobs = [Job(10, 1, 3), Job(10, 1, 3), Job(10, 1, 1), Job(10, 1, 1)]
    strict = simulate(jobs, workers=4, num_gpus=1, per_gpu=4, max_bypass=0)
    assert (strict.wall_s, strict.starts) == (30, (0, 10, 10, 20))
    backfill = simulate(jobs, workers=4, num_gpus=1, per_gpu=4)
    assert (backfill.wall_s, backfill.starts) == (20, (0, 10, 0, 10))
    # Only a waiting trial can pass, and a worker waits with the trial it took: with 2 workers,
    # one runs A and the other waits with B, so C is not taken before A ends (as strict order).
    assert simulate(jobs, workers=2, num_gpus=1, per_gpu=4).starts == (0, 10, 10, 20)


def test_cpu_trials_wait_for_a_worker_only_and_a_big_trial_takes_a_gpu_alone():
    assert simulate([Job(10)] * 4, workers=2, num_gpus=0, per_gpu=4).wall_s == 20
    assert simulate([Job(10, 1, 9)] * 2, workers=2, num_gpus=1, per_gpu=4).starts == (0, 10)  # weight > per_gpu
    assert simulate([Job(10, 2, 1)] * 2, workers=2, num_gpus=1, per_gpu=1).starts == (0, 10)  # 2 GPUs of 1: 1
    assert simulate([Job(10, 1, 1)] * 2, workers=2, num_gpus=2, per_gpu=1).starts == (0, 0)
    assert simulate([], workers=2, num_gpus=1, per_gpu=4).wall_s == 0


def test_the_bound_on_passes_keeps_a_big_trial_from_waiting_behind_every_small_one():
    # per_gpu 2: a 5 s small trial runs, a 2-slot trial waits, then 10 s small ones. Their ends
    # are staggered, so a slot is always busy: unbounded, every small trial passes the big one.
    jobs = [Job(5, 1, 1), Job(10, 1, 2)] + [Job(10, 1, 1)] * 8
    unbounded = simulate(jobs, workers=10, num_gpus=1, per_gpu=2, max_bypass=1000)
    assert unbounded.starts[1] == max(unbounded.starts)  # the big one starts last
    bounded = simulate(jobs, workers=10, num_gpus=1, per_gpu=2, max_bypass=2)
    # Two pass it (at 0 and 5); then nobody starts until both have ended at 15.
    assert bounded.starts[:4] == (0, 15, 0, 5)
    assert bounded.starts[1] < unbounded.starts[1]


def test_each_head_has_its_own_count_of_passes():
    # As above, then a second 2-slot trial (F) after three small ones: once the first big one has
    # started, the count starts again, and g passes F at 25 although two passed the first head.
    a, big, small = Job(5, 1, 1), Job(10, 1, 2), Job(10, 1, 1)
    got = simulate([a, big, small, small, small, big, small, small], workers=10, num_gpus=1, per_gpu=2, max_bypass=2)
    assert got.starts[:7] == (0, 15, 0, 5, 25, 45, 25)


def test_a_job_that_can_never_start_is_an_error_not_a_wall_time():
    with pytest.raises(ValueError, match="can never start"):
        simulate([Job(10)], workers=0, num_gpus=0, per_gpu=4)


def test_replay_last_packs_a_runs_records_at_the_slots_the_store_before_it_gave(tmp_path):
    from harness.campaign.matrix.planning import replay_last
    from harness.campaign.matrix.specfile import spec_from_dict
    from harness.trial.outcome import Outcome, TrialResult

    spec = spec_from_dict(
        {
            "name": "t",
            "store": str(tmp_path / "s"),
            "trials": 4,
            "workers": 4,
            "per_gpu": 4,
            "workloads": {
                "big": {"kind": "command", "argv": ["true"], "gpus": 1, "gpu_slots": 3},
                "small": {"kind": "command", "argv": ["true"], "gpus": 1, "gpu_slots": 1},
            },
        }
    )

    def rec(cell, i, start):
        return TrialResult(
            trial_id=f"t/{cell}/{i}",
            cell=cell,
            trial_index=i,
            outcome=Outcome.CRASH,
            duration_s=10.0,
            started_at=f"2026-12-01T10:00:{start:02d}+00:00",
        )

    # The run, in the pool's order (trial index, then cell): big 1 and 2, small 2 and 3, as the
    # strict pool ran them (A | B+C | D, 30 s); stored in the order they ended.
    run = [rec("big:raw@-", 1, 0), rec("small:raw@-", 2, 10), rec("big:raw@-", 2, 10), rec("small:raw@-", 3, 20)]
    got = replay_last(spec, [rec("big:raw@-", 0, 0)] + run, 4)
    assert got == {"strict": 30.0, "backfill": 20.0, "recorded": 30.0}
    for bad in (0, 6):
        with pytest.raises(ValueError, match="--replay-last must be between 1 and"):
            replay_last(spec, run, bad)


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["--preset", "no-such-preset", "--replay-last", "3"], "no-such-preset"),
        (["--preset", "gpu-campaign", "--replay-last", "0"], "--replay-last"),
        (["--preset", "gpu-campaign", "--replay-last", "three"], "--replay-last"),
    ],
)
def test_replaying_a_run_rejects_bad_input_with_one_line_and_exit_2(capsys, argv, needle):
    from harness.cli import main

    assert main(["matrix", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and needle in err[0], err
