"""harness stress on the terminal: each distinct failure echoed once, as a short excerpt, and
counted in the report; every run's whole output stays in its folder."""

from __future__ import annotations

import sys
import textwrap

from harness.campaign.stress.options import _python_note
from harness.campaign.stress.report import EXCERPT_FRAMES, EXCERPT_LINES, excerpt
from harness.cli import main

PY = sys.executable

# Run i (its folder's name, the heartbeat's parent) fails in a worker thread, five frames deep: an
# even run with a ValueError, an odd one with a KeyError.
PROGRAM = textwrap.dedent(
    """
    import os, sys, threading
    run = int(os.environ["HARNESS_HEARTBEAT"].split("/")[-2])
    def outermost_frame(n):
        if n:
            return outermost_frame(n - 1)
        raise (ValueError("even run") if run % 2 == 0 else KeyError("odd run"))
    t = threading.Thread(target=outermost_frame, args=(4,), name="worker")
    t.start(); t.join()
    """
)


def _stress(tmp_path, runs: int, *extra: str) -> list[str]:
    out = tmp_path / "o"
    args = ["stress", "-p", "1", "--max-runs", str(runs), "--timeout", "60", "-o", str(out), *extra]
    assert main([*args, "--", PY, "-c", PROGRAM]) == 1
    return sorted(p.name for p in out.iterdir() if p.is_dir())


def test_each_distinct_failure_is_echoed_once_and_counted(tmp_path, capsys):
    assert _stress(tmp_path, 4, "--keep-going") == ["0", "1", "2", "3"]
    captured = capsys.readouterr()
    echoed = [line for line in captured.err.splitlines() if line.startswith("--- run ")]
    assert [line.split(":")[0] for line in echoed] == ["--- run 0", "--- run 1"]
    assert "ValueError: even run (thread worker)" in captured.err
    assert "KeyError: 'odd run' (thread worker)" in captured.err
    # An excerpt, not the traceback: the thread's outer frames stay in the run's folder.
    assert "Traceback (most recent call last)" not in captured.err and "threading.py" not in captured.err
    out = captured.out.splitlines()
    assert sum(line.startswith("  2 x ") for line in out) == 2, out
    artefacts = next(line for line in out if "runs' artefacts: " in line)
    assert artefacts.endswith(f"(each run's whole output: {tmp_path / 'o'}/<run>/output.txt)")
    # The whole traceback of every run, the ones not echoed included, is in its folder.
    for run in ("2", "3"):
        whole = (tmp_path / "o" / run / "output.txt").read_text()
        assert "Traceback (most recent call last)" in whole and "threading.py" in whole


def test_an_excerpt_is_the_exception_and_its_innermost_frames():
    frames = "".join(f'  File "prog.py", line {i}, in f{i}\n    f{i + 1}()\n' for i in range(1, 9))
    text = f"starting\nException in thread w:\nTraceback (most recent call last):\n{frames}RuntimeError: boom\n"
    lines = excerpt(text)
    assert lines[0] == "RuntimeError: boom (thread w)"
    assert len(lines) == 1 + EXCERPT_FRAMES and all(line.startswith("  at f") for line in lines[1:])
    assert "f8" in lines[1]  # innermost first


def test_an_excerpt_without_a_traceback_is_the_outputs_last_lines():
    text = "\n".join(f"line {i}" for i in range(10)) + "\n\n"
    assert excerpt(text) == [f"line {i}" for i in range(10 - EXCERPT_LINES, 10)]
    assert excerpt("x" * 500)[0].endswith("...") and len(excerpt("x" * 500)[0]) == 200
    assert excerpt("") == []


def test_the_first_line_says_when_every_run_compiles_torch_first(torch_bytecode_written):
    note = _python_note("python", sys.executable, given=False)
    assert note.startswith(f"`python` in CMD runs {sys.executable} (torch ")
    assert ("every run compiles torch's modules first" in note) is not torch_bytecode_written


def test_a_bytecode_cache_gets_each_runs_bytecode_where_writing_it_is_off(tmp_path, monkeypatch, capsys):
    (tmp_path / "helper.py").write_text("VALUE = 3\n")
    prog = tmp_path / "prog.py"
    prog.write_text("import sys, helper\nsys.exit(0 if helper.VALUE == 3 else 1)\n")
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")  # as an image without bytecode sets it
    cache = tmp_path / "cache"
    args = ["stress", "-p", "1", "--max-runs", "2", "--timeout", "60", "-o", str(tmp_path / "o")]
    assert main([*args, "--bytecode-cache", str(cache), "--", "python", str(prog)]) == 0  # ours
    assert list(cache.rglob("helper.*.pyc")) and not (tmp_path / "__pycache__").exists()
    assert f"; bytecode cached in {cache}" in capsys.readouterr().err.splitlines()[0]


def test_a_bytecode_cache_that_cannot_be_made_is_bad_input(tmp_path, capsys):
    (tmp_path / "file").write_text("")
    args = ["stress", "--max-runs", "1", "-o", str(tmp_path / "o"), "--bytecode-cache", str(tmp_path / "file" / "x")]
    assert main([*args, "--", PY, "-c", "pass"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: --bytecode-cache: cannot make") and not (tmp_path / "o").exists()
