"""`python -m harness crosstab`: trials with a fix against trials without, per failure family."""

from __future__ import annotations

import json
from pathlib import Path

from harness.cli import main
from harness.stores.store import Store
from harness.trial.outcome import Outcome, TrialResult

SEGV = "Segmentation fault: during garbage collection"
F1 = (
    "AssertionError in dflash-train at torch._inductor.cudagraph_trees:get_obj < "
    "torch._inductor.cudagraph_trees:get_container < torch._inductor.cudagraph_trees:cudagraphify"
)


def _store(root: Path, name: str, rows: list[tuple[str, Outcome, str | None]]) -> Path:
    d = root / name
    for i, (cell, outcome, summary) in enumerate(rows):
        Store(d).append(
            TrialResult(
                trial_id=f"{name}/{cell}/{i}",
                cell=cell,
                trial_index=i,
                outcome=outcome,
                signature="k" if summary else None,
                signature_summary=summary,
                duration_s=1.0,
                started_at="2026-12-01T00:00:00+00:00",
            )
        )
    return d


def _stores(tmp_path: Path) -> list[str]:
    a = _store(
        tmp_path,
        "a",
        [
            ("lb:cstash-tls-init+global-lock@-", Outcome.ABORT, SEGV),
            ("lb:cstash-tls-init+global-lock@-", Outcome.ABORT, SEGV),
            ("lb:cstash-tls-init+global-lock@-", Outcome.OK, None),
            ("lb:cstash-tls-init-like@-", Outcome.ABORT, SEGV),  # another fix: not "holds"
            ("lb:raw@-", Outcome.CRASH, F1),  # a failure, not the family
            ("lb:raw@-", Outcome.RESOURCE, "torch.OutOfMemoryError"),  # left out
            ("gb:no-cudagraphs@-", Outcome.OK, None),
        ],
    )
    b = _store(tmp_path, "b", [("lb:cstash-tls-init@p", Outcome.OK, None), ("lb:eager@p", Outcome.OK, None)])
    return [str(a), str(b)]


def test_counts_split_by_whether_the_strategy_holds_the_fix(tmp_path, capsys):
    a, b = _stores(tmp_path)
    assert main(["crosstab", "cstash-tls-init", "--family", "segv-gc", "--store", a, "--store", b, "--json"]) == 0
    rows = {r["store"]: r for r in json.loads(capsys.readouterr().out)["rows"]}
    assert (rows["a"]["k_with"], rows["a"]["n_with"], rows["a"]["k_without"], rows["a"]["n_without"]) == (2, 3, 1, 3)
    assert (rows["b"]["k_with"], rows["b"]["n_with"], rows["b"]["k_without"], rows["b"]["n_without"]) == (0, 1, 0, 1)
    assert (rows["total"]["k_with"], rows["total"]["n_with"]) == (2, 4)
    assert 0 < rows["total"]["p_more"] < 1
    # 2/4 with against 1/3 without: more often with the fix, so "less often" is the weaker claim.
    assert rows["total"]["p_less"] > rows["total"]["p_more"]
    # Without --family every failure counts (raw's F1 too); --cells narrows the trials.
    assert main(["crosstab", "cstash-tls-init", "--store", a, "--cells", "lb:*", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["rows"]
    assert (row["k_with"], row["n_with"], row["k_without"], row["n_without"]) == (2, 3, 2, 2)
    assert main(["crosstab", "cstash-tls-init", "--store", a]) == 0
    out = capsys.readouterr().out
    assert "| a | 2/3 [" in out and "by whether the strategy holds `cstash-tls-init`" in out
    assert "| store | with cstash-tls-init | without | p more | p less |" in out


def test_p_less_answers_whether_a_fix_stops_a_failure(tmp_path, capsys):
    # The shape of the H200's stash-incref question: 0/12 with the fix against 9/25 without.
    rows = [("lb:cstash-tls-init+stash-incref@-", Outcome.OK, None)] * 12
    rows += [("lb:cstash-tls-init@-", Outcome.ABORT, SEGV)] * 9 + [("lb:cstash-tls-init@-", Outcome.OK, None)] * 16
    d = _store(tmp_path, "s", rows)
    assert main(["crosstab", "stash-incref", "--family", "segv-gc", "--store", str(d), "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["rows"]
    assert (row["k_with"], row["n_with"], row["k_without"], row["n_without"]) == (0, 12, 9, 25)
    assert row["p_more"] == 1.0 and row["p_less"] < 0.05
    # --without: the count as it stood before the fix's cells ran (only trials without it left).
    assert (
        main(
            [
                "crosstab",
                "cstash-tls-init",
                "--family",
                "segv-gc",
                "--store",
                str(d),
                "--without",
                "stash-incref",
                "--json",
            ]
        )
        == 0
    )
    (row,) = json.loads(capsys.readouterr().out)["rows"]
    assert (row["k_with"], row["n_with"], row["n_without"]) == (9, 25, 0)


def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys):
    a, _ = _stores(tmp_path)
    for argv, msg in (
        (["crosstab", "no-such-fix", "--store", a], "no stored trial's strategy holds"),
        (["crosstab", "cstash-tls-init", "--family", "segv,nope", "--store", a], "unknown family 'nope'"),
        (["crosstab", "cstash-tls-init", "--store", str(tmp_path / "missing")], "no result store"),
        (["crosstab", "cstash-tls-init", "--without", "cstash-tls-init", "--store", a], "leaves no trial with the fix"),
    ):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error: ") and msg in err[0]
