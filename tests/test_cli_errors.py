"""`python -m harness`'s one rule for bad input: every error that says "the user can fix this"
derives from harness.runtime.errors.UserInputError, which the CLI prints as one `error:` line and
exits 2."""

from __future__ import annotations

import pytest

from harness import cli
from harness.analysis.bench_records import BenchError
from harness.analysis.crosstab import CrosstabError
from harness.args import UsageError
from harness.campaign.matrix.spec import MatrixError
from harness.campaign.replay import ReplayError
from harness.diagnosis.catalogue import CatalogueError
from harness.diagnosis.diagnose import DiagnoseError
from harness.faults.pct import InvalidPct
from harness.faults.scheduler import InvalidPlan
from harness.runtime.errors import ConfigError, UserInputError
from harness.stores.merge import MergeError
from harness.stores.retire import RetireError
from harness.stores.store import StoreError
from harness.stores.zips import PackError
from harness.trial.spec import InvalidSpec

BAD_INPUT = (
    UsageError,
    MatrixError,
    InvalidSpec,
    InvalidPlan,
    InvalidPct,
    StoreError,
    MergeError,
    PackError,
    RetireError,
    ReplayError,
    BenchError,
    CrosstabError,
    CatalogueError,
    DiagnoseError,
    ConfigError,
)
"""The classes the CLI once listed by hand, and the stores' and plans' own."""


@pytest.mark.parametrize("error", BAD_INPUT, ids=lambda e: e.__name__)
def test_every_bad_input_error_is_a_user_input_error(error):
    assert issubclass(error, UserInputError) and issubclass(error, ValueError)


@pytest.mark.parametrize("error", BAD_INPUT, ids=lambda e: e.__name__)
def test_the_cli_prints_any_of_them_as_one_line_and_exits_2(error, monkeypatch, capsys):
    def fail(opts):
        raise error("bad\n  input")

    monkeypatch.setattr(cli.command_module("glossary"), "run", fail)
    assert cli.main(["glossary"]) == 2
    assert capsys.readouterr().err == "error: bad input\n"


def test_a_programming_error_is_not_bad_input(monkeypatch):
    def fail(opts):
        raise KeyError("a bug")

    monkeypatch.setattr(cli.command_module("glossary"), "run", fail)
    with pytest.raises(KeyError):
        cli.main(["glossary"])
