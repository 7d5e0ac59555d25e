"""tools/start_steps.py: the target's start, one timed step a line."""

from __future__ import annotations

import re

from tools import start_steps


def test_each_step_of_the_targets_start_is_timed(capsys):
    assert start_steps.main(["--preset", "tiny-cpu"]) == 0
    lines = capsys.readouterr().out.splitlines()
    names = [re.split(r"\s{2,}", line)[0] for line in lines]
    assert names == [
        "import torch",
        "import the trainer",
        "import transformers' model classes",
        "seeded build, on cpu in float32",
        "first forward [8, 128]",
        "second forward [8, 128]",
        "the trainer's optimizer, one step",
        "import torch._dynamo",
    ]
    at = [float(re.search(r"\(at +([\d.]+)s\)", line).group(1)) for line in lines]
    assert at == sorted(at)


def test_the_native_target_has_no_transformers_step(capsys):
    assert start_steps.main(["--preset", "tiny-cpu", "--impl", "native"]) == 0
    names = [re.split(r"\s{2,}", line)[0] for line in capsys.readouterr().out.splitlines()]
    assert names == [
        "import torch",
        "import the trainer",
        "seeded build, on cpu in float32",
        "first forward [8, 128]",
        "second forward [8, 128]",
        "the trainer's optimizer, one step",
        "import torch._dynamo",
    ]
