"""The GPU gate's record (tools/gpu_gate.py) from canned pytest and corpus outputs: green only when
no race test failed and every program's fix held where its entry expects it to."""

from __future__ import annotations

import json

from tools import gpu_gate

JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">
<testcase classname="tests.race.test_gpu_catalogue" name="test_row[r01]"/>
<testcase classname="tests.race.test_gpu_catalogue" name="test_row[r02]">{failure}</testcase>
<testcase classname="tests.test_r23" name="test_help"><skipped message="no"/></testcase>
</testsuite></testsuites>"""


def _row(name: str, fixed: str, *, holds: bool = True, ok: bool = True) -> dict:
    return {
        "name": name,
        "raw": "4/4",
        "fix": "cstash-tls-init,global-lock",
        "fixed": fixed,
        "fix_holds": holds,
        "skipped": False,
        "as_expected": ok,
        "verdict": "as expected" if ok else "differs",
    }


def _record(tmp_path, failure: str, rows: list[dict]) -> dict:
    (tmp_path / "j.xml").write_text(JUNIT.format(failure=failure))
    (tmp_path / "c.json").write_text(json.dumps({"torch": "2.11.0", "fixes": rows}))
    out = tmp_path / "gate" / "2026-12-04.json"
    rc = gpu_gate.main(
        [
            "record",
            "--junit",
            str(tmp_path / "j.xml"),
            "--corpus",
            str(tmp_path / "c.json"),
            "--commit",
            "abc",
            "--out",
            str(out),
        ]
    )
    record = json.loads(out.read_text())
    assert rc == (0 if record["green"] else 1)
    return record


def test_green_when_every_race_test_passed_and_every_fix_held(tmp_path):
    record = _record(tmp_path, "", [_row("pt123177", "0/4")])
    assert record["green"] and (record["passed"], record["failed"], record["skipped"]) == (2, 0, 1)
    assert record["commit"] == "abc" and record["programs"][0]["fixed"] == "0/4"


def test_red_on_a_failed_race_test_or_a_fix_that_did_not_hold(tmp_path):
    failed = _record(tmp_path, '<failure message="NOT REPRODUCED"/>', [_row("p", "0/4")])
    assert not failed["green"] and failed["failed_tests"] == ["tests.race.test_gpu_catalogue::test_row[r02]"]
    leaked = _record(tmp_path, "", [_row("p", "2/4", ok=False)])
    assert not leaked["green"]


def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys):
    rc = gpu_gate.main(
        ["record", "--junit", str(tmp_path / "none.xml"), "--commit", "x", "--out", str(tmp_path / "o.json")]
    )
    assert rc == 2 and capsys.readouterr().err.startswith("error: --junit ")
    assert not (tmp_path / "o.json").exists()


def test_programs_deals_the_gpu_entries_with_a_fix_into_shards(capsys):
    assert gpu_gate.main(["programs", "--shards", "2"]) == 0
    shards = [line.split(",") for line in capsys.readouterr().out.splitlines() if line]
    names = [n for shard in shards for n in shard]
    assert len(names) == len(set(names)) and len(shards) <= 2


def test_sets_measured_beside_the_fix_are_recorded_and_do_not_colour_the_gate(tmp_path):
    also = [{"fix": "cstash-tls-init,global-lock,cublas-handle-init", "failed": 3, "runs": 4, "row": "..."}]
    record = _record(tmp_path, "", [_row("p", "0/4") | {"also": also}])
    assert record["green"]
    assert record["programs"][0]["also"] == [{"fix": also[0]["fix"], "failed": 3, "runs": 4}]
    assert _record(tmp_path, "", [_row("q", "0/4")])["programs"][0]["also"] == []


def test_the_generated_gpu_programs_are_counted_right_wrong_or_unconfirmed(tmp_path):
    shape = 'classname="tests.shapes.test_shapes" name="test_stress_reads_the_generated_gpu_program[{0}]"'
    cases = (
        f"<testcase {shape.format('a')}/>"
        f'<testcase {shape.format("b")}><skipped message="the fault did not fire"/></testcase>'
        f'<testcase {shape.format("c")}><failure message="races differ"/></testcase>'
    )
    (tmp_path / "j.xml").write_text(f'<testsuites><testsuite name="pytest">{cases}</testsuite></testsuites>')
    counts = gpu_gate.junit_counts(tmp_path / "j.xml")
    assert counts["gpu_shapes"] == {"right": 1, "wrong": 1, "unconfirmed": 1}
    assert counts["failed"] == 1 and "gpu_shapes" not in gpu_gate.junit_counts(_junit(tmp_path))


def _junit(tmp_path):
    path = tmp_path / "plain.xml"
    path.write_text(JUNIT.format(failure=""))
    return path
