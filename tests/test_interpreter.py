"""Trials under another interpreter (`--python`): the child runs it, the record says which torch
and Python it ran, and a store named with {torch} keeps one version's trials apart."""

from __future__ import annotations

import json
import sys
import venv

import pytest

from harness.campaign.matrix.specfile import spec_from_dict
from harness.cli import main
from harness.trial.interpreter import interpreter_versions
from harness.trial.runner import run_trial
from harness.trial.spec import InvalidSpec, TrialSpec, WorkloadSpec


@pytest.fixture(scope="module")
def other_python(tmp_path_factory):
    # A second interpreter that sees the same packages: what another venv is, minus the torch.
    root = tmp_path_factory.mktemp("venv")
    venv.EnvBuilder(system_site_packages=True, with_pip=False).create(root)
    return str(root / "bin" / "python")


def test_a_trial_runs_under_the_interpreter_asked_for_and_records_its_versions(other_python, tmp_path):
    spec = TrialSpec(
        trial_id="t/c/0",
        cell="c",
        workload=WorkloadSpec(kind="command", argv=("python", "-c", "import sys; print('exe', sys.executable)")),
        python=other_python,
        timeout_s=60,
        exposure=False,
    )
    result = run_trial(spec, tmp_path / "a")
    assert result.outcome.value == "ok", result.detail
    assert f"exe {other_python}" in (tmp_path / "a" / "output.txt").read_text()
    assert (result.torch_version, result.python) == interpreter_versions(other_python)
    assert TrialSpec.from_json(json.dumps(spec.to_json())).python == other_python


def test_a_bad_interpreter_or_a_non_python_command_is_bad_input(tmp_path):
    spec = TrialSpec(
        trial_id="t/c/0",
        cell="c",
        workload=WorkloadSpec(kind="repro", argv=("r06_fx_tracing_flag",)),
        python=str(tmp_path / "nope"),
    )
    with pytest.raises(InvalidSpec, match="is not an interpreter file"):
        spec.validate()
    spec = TrialSpec(
        trial_id="t/c/0", cell="c", workload=WorkloadSpec(kind="command", argv=("true",)), python=sys.executable
    )
    with pytest.raises(InvalidSpec, match="not a Python interpreter to replace"):
        spec.validate()


def test_a_matrix_under_another_interpreter_fills_its_own_store(other_python, tmp_path, capsys):
    spec = {
        "name": "v",
        "store": str(tmp_path / "v-torch{torch}"),
        "trials": 1,
        "workers": 1,
        "workloads": {"w": {"kind": "command", "argv": ["python", "-c", "0"], "timeout_s": 60}},
    }
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec))
    torch = interpreter_versions(other_python)[0] or "none"
    assert spec_from_dict(spec).store_dir.name == f"v-torch{interpreter_versions(None)[0] or 'none'}"
    assert main(["matrix", "--file", str(path), "--python", other_python, "--no-live"]) == 0
    record = json.loads((tmp_path / f"v-torch{torch}" / "trials.jsonl").read_text().splitlines()[0])
    assert record["torch_version"] == interpreter_versions(other_python)[0]
    capsys.readouterr()
    assert main(["stress", "--python", str(tmp_path / "nope"), "--max-runs", "1", "--", "python", "-c", "0"]) == 2
    assert "--python: no interpreter at" in capsys.readouterr().err
