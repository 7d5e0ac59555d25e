"""The seeds preset, the shipped length index and `python -m dflash plan`: the plan varies with
the shuffle as the seeds' two launches did, the budget is what its calibration says, the command
prints the table beside the seeds' figures, reads only lengths, and answers bad input with one
line and exit 2."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from dflash import cli, presets
from dflash.buckets import batch_sizes, bucket_of
from dflash.data import TokenDataset, write_token_file
from dflash.lengths import (
    MAX_LENGTH,
    SHIPPED_BUCKET_SAMPLES,
    SHIPPED_SAMPLES,
    calibrate_budget,
    fit_bucket_samples,
    shipped_lengths,
    synthetic_lengths,
)
from dflash.plan import half_open, plan_table
from dflash.seeds import SEEDS

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def shipped() -> np.ndarray:
    return shipped_lengths()


def _counts(lengths, cfg, seed: int, epoch: int) -> tuple[int, ...]:
    d = cfg.data
    return tuple(
        int(s.size)
        for s in batch_sizes(
            lengths,
            d.bucket_boundaries,
            d.token_budget,
            seed,
            epoch,
            batching=d.batching,
            max_batch_rows=d.max_batch_rows,
        )
    )


def test_seeds_buckets_are_their_half_open_bounds_as_inclusive_ones() -> None:
    cfg = presets.get("seeds")
    assert cfg.data.bucket_boundaries == (769, 1215, 1727, 2431, 3295, 8192)
    assert half_open(cfg.data.bucket_boundaries) == (
        (0, 770),
        (770, 1216),
        (1216, 1728),
        (1728, 2432),
        (2432, 3296),
        (3296, 8193),
    )
    # Each seeds' [lo, hi) holds lo and hi - 1 and sends hi to the next bucket.
    edges = [x for lo, hi in zip((0, *SEEDS.upper_bounds[:-1]), SEEDS.upper_bounds) for x in (lo, hi - 1)]
    assert bucket_of(np.array(edges), cfg.data.bucket_boundaries).tolist() == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5]
    assert (cfg.data.batching, cfg.data.max_batch_rows, cfg.fixes) == ("token-budget", 64, ())
    assert presets.get("tiny-cpu").data.batching == "fixed"  # the other presets keep their rule


def test_shipped_index_is_generated_the_same_in_a_few_seconds(shipped) -> None:
    start = time.perf_counter()
    again = shipped_lengths()
    assert time.perf_counter() - start < 5.0  # generated on every plan: it must stay cheap
    assert np.array_equal(again, shipped)
    which = bucket_of(shipped, SEEDS.bucket_boundaries())
    assert tuple(np.bincount(which).tolist()) == SHIPPED_BUCKET_SAMPLES
    assert shipped.shape == (SHIPPED_SAMPLES,) == (1_095_082,) and shipped.dtype == np.int64
    assert 1 <= shipped.min() and shipped.max() <= MAX_LENGTH == 8192
    assert not np.array_equal(synthetic_lengths(1000, seed=1), synthetic_lengths(1000, seed=2))


def test_seeds_token_budget_is_its_calibration_on_the_shipped_index(shipped) -> None:
    budget = calibrate_budget(shipped, SEEDS.bucket_boundaries(), SEEDS.avg_batch, max_batch_rows=SEEDS.max_batch)
    assert budget == presets.SEEDS_TOKEN_BUDGET == presets.get("seeds").data.token_budget


def test_the_seeds_plan_has_their_share_of_batches_in_every_bucket(shipped) -> None:
    table = plan_table(shipped, presets.get("seeds"), seed=0, epoch=0)
    for b, want in enumerate(SEEDS.share_pct):
        assert abs(table.share_pct(b) - want) < 2.0, (b, table.share_pct(b), want)
    assert abs(table.total.batches - SEEDS.batches) <= 0.001 * SEEDS.batches


def test_the_bucket_samples_are_the_fits_answer() -> None:
    counts, budget = fit_bucket_samples()
    assert counts == SHIPPED_BUCKET_SAMPLES and budget == presets.SEEDS_TOKEN_BUDGET


def test_two_shuffles_give_different_batch_counts_per_bucket(shipped) -> None:
    # As the seeds' two launches did (27,881 and 27,889 batches in their last bucket).
    cfg = presets.get("seeds")
    first = _counts(shipped, cfg, 0, 0)
    assert _counts(shipped, cfg, 1, 0) != first
    assert _counts(shipped, cfg, 0, 1) != first


def test_batch_sizes_vary_with_the_data_up_to_the_cap(shipped) -> None:
    table = plan_table(shipped, presets.get("seeds"), seed=0, epoch=0)
    assert table.total.min < table.total.max <= 64
    assert all(b.min < b.max for b in table.buckets)
    assert table.samples == sum(round(b.avg * b.batches) for b in table.buckets)


def test_plan_command_prints_the_table_beside_the_seeds(shipped, capsys) -> None:
    assert cli.main(["plan", "--preset", "seeds"]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    lines = out.splitlines()
    assert lines[0] == "plan: preset seeds, batching token-budget, shuffle seed 0, epoch 0"
    assert "1,095,082 lengths" in lines[1]
    assert f"token budget: {presets.SEEDS_TOKEN_BUDGET:,} real tokens a batch, at most 64 rows" in lines[2]
    assert "averages nearest the seeds' 18.3" in lines[2]
    table = plan_table(shipped, presets.get("seeds"), seed=0, epoch=0)
    rows = {ln.split()[0]: ln for ln in lines if ln.startswith("[")}
    assert list(rows) == ["[0,770)", "[770,1216)", "[1216,1728)", "[1728,2432)", "[2432,3296)", "[3296,8193)"]
    for b, line in enumerate(rows.values()):
        s = table.buckets[b]
        mine, seeds, dist = (part.split() for part in line.split("|"))
        assert mine[1:] == [f"{s.batches:,}", f"{table.share_pct(b):.1f}", str(s.min), str(s.max), f"{s.avg:.1f}"]
        assert seeds[-1] == f"{SEEDS.share_pct[b]:.1f}"
        assert dist[-1] == f"{table.share_pct(b) - SEEDS.share_pct[b]:+.1f}"
    last = rows["[3296,8193)"]
    assert "27,881 / 27,889" in last
    assert f"{table.buckets[-1].batches - 27_881:+,} / {table.buckets[-1].batches - 27_889:+,}" in last
    totals = {
        name: [part.split() for part in ln[len(name) :].split("|")]
        for ln in lines
        for name in ("samples", "batches", "min batch", "max batch", "avg batch")
        if ln.startswith(name)
    }
    assert totals["samples"] == [["1,095,082"], ["1,095,082"], ["+0"]]
    assert totals["batches"] == [[f"{table.total.batches:,}"], ["59,828"], [f"{table.total.batches - 59_828:+,}"]]
    assert totals["min batch"] == [
        [str(table.total.min)],
        ["2", "/", "6"],
        [f"{table.total.min - 2:+}", "/", f"{table.total.min - 6:+}"],
    ]
    assert totals["max batch"] == [["64"], ["64"], ["+0"]]
    assert totals["avg batch"] == [[f"{table.total.avg:.2f}"], ["18.3"], [f"{table.total.avg - 18.3:+.2f}"]]


def test_plan_seed_and_epoch_and_fixed_rule(tmp_path, capsys) -> None:
    path = str(tmp_path / "lengths.npy")
    np.save(path, np.array([100, 700, 900, 1500, 2000, 3000, 5000, 8000] * 40))
    assert cli.main(["plan", "--seed", "3", "--epoch", "2", "--set", "data.batching=fixed", "--lengths", path]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "plan: preset seeds, batching fixed, shuffle seed 3, epoch 2"
    assert f"lengths: {path}, 320 rows" in out
    assert "padded tokens a batch" in out and "averages nearest" not in out


def _bad_inputs(tmp_path) -> dict[str, tuple[list[str], str]]:
    np.save(tmp_path / "two_d.npy", np.zeros((3, 3), dtype=np.int64))
    np.save(tmp_path / "floats.npy", np.ones(5))
    np.save(tmp_path / "negative.npy", np.array([5, -1, 7]))
    np.save(tmp_path / "empty.npy", np.zeros(0, dtype=np.int64))
    np.save(tmp_path / "long.npy", np.array([10, 9000]))
    (tmp_path / "garbage.npy").write_bytes(b"not numpy at all")
    (tmp_path / "garbage.arrow").write_bytes(b"not arrow at all")
    return {
        "missing npy": (["--lengths", str(tmp_path / "nope.npy")], "no such file"),
        "missing dataset": (["--lengths", str(tmp_path / "nope.arrow")], "no such file"),
        "2-D": (["--lengths", str(tmp_path / "two_d.npy")], "1-D integer array"),
        "floats": (["--lengths", str(tmp_path / "floats.npy")], "1-D integer array"),
        "negative": (["--lengths", str(tmp_path / "negative.npy")], "negative length -1 at row 1"),
        "empty": (["--lengths", str(tmp_path / "empty.npy")], "empty"),
        "too long": (["--lengths", str(tmp_path / "long.npy")], "row 1 has length 9000 > largest bucket 8192"),
        "garbage npy": (["--lengths", str(tmp_path / "garbage.npy")], "not a .npy length index"),
        "garbage arrow": (["--lengths", str(tmp_path / "garbage.arrow")], "Arrow"),
        "epoch": (["--epoch", "-1"], "--epoch must be >= 0"),
        "preset": (["--preset", "nope"], "unknown preset"),
        "rule": (["--set", "data.batching=packed"], "data.batching must be one of"),
    }


@pytest.mark.parametrize(
    "case",
    [
        "missing npy",
        "missing dataset",
        "2-D",
        "floats",
        "negative",
        "empty",
        "too long",
        "garbage npy",
        "garbage arrow",
        "epoch",
        "preset",
        "rule",
    ],
)
def test_plan_bad_input_is_one_error_line_and_exit_2(case, tmp_path, capsys) -> None:
    argv, match = _bad_inputs(tmp_path)[case]
    assert cli.main(["plan", *argv]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert len(err.strip().splitlines()) == 1 and err.startswith("error: ") and match in err, err


def test_plan_bad_input_exits_2_in_a_fresh_process_without_torch(tmp_path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "dflash", "plan", "--lengths", str(tmp_path / "nope.npy")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"error: {tmp_path / 'nope.npy'}: no such file" and "Traceback" not in proc.stderr
    probe = "import sys, dflash.cli, dflash.plan; assert 'torch' not in sys.modules"
    assert subprocess.run([sys.executable, "-c", probe], cwd=ROOT, timeout=120, check=False).returncode == 0


def test_plan_reads_only_the_lengths_of_a_dataset(tmp_path, monkeypatch, capsys) -> None:
    rng = np.random.default_rng(0)
    rows = [(rng.integers(1, 200, size=n).tolist(), [1] * n) for n in rng.integers(1, 3000, size=300).tolist()]
    path = str(tmp_path / "data.arrow")
    write_token_file(path, iter(rows))

    def touched(*_args, **_kwargs):
        raise AssertionError("plan read the token columns")

    # row() reads input_ids and loss_mask; _row_stats scans them (vocab check, supervised counts).
    monkeypatch.setattr(TokenDataset, "row", touched)
    monkeypatch.setattr(TokenDataset, "_row_stats", touched)
    assert cli.main(["plan", "--lengths", path]) == 0
    out = capsys.readouterr().out
    assert f"lengths: {path}, 300 rows" in out
    samples = next(ln for ln in out.splitlines() if ln.startswith("samples"))
    assert samples.split("|")[0].split() == ["samples", "300"]
