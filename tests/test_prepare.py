"""prepare_jsonl with a tokenizer built offline: plain concat, chat template, messages, errors, CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from dflash.data import open_dataset
from dflash.prepare import load_tokenizer, prepare_jsonl
from dflash.trainer_errors import DataError
from tests.datautil import CHAT_TEMPLATE, build_tokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def plain_tok(tmp_path_factory) -> str:
    return build_tokenizer(str(tmp_path_factory.mktemp("tok_plain")))


@pytest.fixture(scope="module")
def chat_tok(tmp_path_factory) -> str:
    return build_tokenizer(str(tmp_path_factory.mktemp("tok_chat")), chat_template=CHAT_TEMPLATE)


def _jsonl(path, objs) -> str:
    path.write_text("".join((o if isinstance(o, str) else json.dumps(o)) + "\n" for o in objs))
    return str(path)


def _tokens(tok_dir: str, ids) -> list[str]:
    return load_tokenizer(tok_dir).convert_ids_to_tokens([int(i) for i in ids])


def test_plain_concat_supervises_completion_and_eos(tmp_path, plain_tok: str) -> None:
    src = _jsonl(tmp_path / "in.jsonl", [{"prompt": "the cat", "completion": "sat on a mat"}])
    out = str(tmp_path / "out.arrow")
    stats = prepare_jsonl(src, plain_tok, out, max_len=64)
    assert (stats.written, stats.skipped_long) == (1, 0)
    ids, mask = open_dataset(out).row(0)
    assert _tokens(plain_tok, ids) == ["the", "cat", "sat", "on", "a", "mat", "</s>"]
    assert mask.tolist() == [0, 0, 1, 1, 1, 1, 1]


def test_chat_template_masks_only_the_assistant_turn(tmp_path, chat_tok: str) -> None:
    src = _jsonl(tmp_path / "in.jsonl", [{"prompt": "the cat", "completion": "sat on"}])
    out = str(tmp_path / "out.arrow")
    prepare_jsonl(src, chat_tok, out, max_len=64)
    ids, mask = open_dataset(out).row(0)
    toks = _tokens(chat_tok, ids)
    assert toks == ["<user>", "the", "cat", "</s>", "<assistant>", "sat", "on", "</s>"]
    assert [t for t, m in zip(toks, mask) if m] == ["sat", "on", "</s>"]


def test_messages_format_supervises_every_assistant_turn(tmp_path, chat_tok: str) -> None:
    msgs = [
        {"role": "system", "content": "yes"},
        {"role": "user", "content": "hello"},
        {"role": "assistant", "content": "world"},
        {"role": "user", "content": "red"},
        {"role": "assistant", "content": "blue green"},
    ]
    src = _jsonl(tmp_path / "in.jsonl", [{"messages": msgs}])
    out = str(tmp_path / "out.arrow")
    prepare_jsonl(src, chat_tok, out, max_len=64)
    ids, mask = open_dataset(out).row(0)
    toks = _tokens(chat_tok, ids)
    assert [t for t, m in zip(toks, mask) if m] == ["world", "</s>", "blue", "green", "</s>"]
    assert toks.count("<assistant>") == 2


def test_long_and_unsupervised_lines_are_skipped_and_counted(tmp_path, plain_tok: str) -> None:
    rows = [
        {"prompt": "the cat", "completion": "sat"},
        {"prompt": "the " * 40, "completion": "cat"},
        "",
        {"prompt": "dog", "completion": ""},
        {"prompt": "a", "completion": "red dog"},
    ]
    out = str(tmp_path / "out.arrow")
    stats = prepare_jsonl(_jsonl(tmp_path / "in.jsonl", rows), plain_tok, out, max_len=16)
    assert (stats.written, stats.skipped_long, stats.skipped_empty) == (2, 1, 1)
    assert len(open_dataset(out)) == 2


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", r"in.jsonl:2: invalid JSON"),
        (json.dumps({"prompt": "a"}), r"in.jsonl:2: expected"),
        (json.dumps({"messages": [{"role": "user"}]}), r"in.jsonl:2: 'messages' must be"),
    ],
)
def test_bad_line_names_its_number_and_writes_nothing(tmp_path, plain_tok: str, line: str, message: str) -> None:
    src = _jsonl(tmp_path / "in.jsonl", [{"prompt": "a", "completion": "cat"}, line])
    out = tmp_path / "out.arrow"
    with pytest.raises(DataError, match=message):
        prepare_jsonl(src, plain_tok, str(out), max_len=64)
    assert sorted(os.listdir(tmp_path)) == ["in.jsonl"]


def test_messages_without_chat_template_is_an_error(tmp_path, plain_tok: str) -> None:
    src = _jsonl(tmp_path / "in.jsonl", [{"messages": [{"role": "user", "content": "a"}]}])
    with pytest.raises(DataError, match="in.jsonl:1: 'messages' lines need a tokenizer with a chat template"):
        prepare_jsonl(src, plain_tok, str(tmp_path / "o.arrow"), max_len=64)


def test_missing_inputs_are_data_errors(tmp_path, plain_tok: str) -> None:
    with pytest.raises(DataError, match="cannot read"):
        prepare_jsonl(str(tmp_path / "none.jsonl"), plain_tok, str(tmp_path / "o.arrow"), max_len=64)
    src = _jsonl(tmp_path / "in.jsonl", [{"prompt": "a", "completion": "cat"}])
    with pytest.raises(DataError, match="cannot load tokenizer"):
        prepare_jsonl(src, str(tmp_path / "no_tok"), str(tmp_path / "o.arrow"), max_len=64)
    with pytest.raises(DataError, match="no usable samples"):
        prepare_jsonl(src, plain_tok, str(tmp_path / "o.arrow"), max_len=2)


def _cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": ROOT}
    return subprocess.run(
        [sys.executable, "-m", "dflash.prepare", *args], capture_output=True, text=True, env=env, cwd=ROOT, timeout=120
    )


def test_cli_bad_input_exits_2_with_one_error_line(tmp_path, plain_tok: str) -> None:
    src = _jsonl(tmp_path / "in.jsonl", ["[1, 2"])
    out = tmp_path / "out.arrow"
    proc = _cli(src, "--tokenizer", plain_tok, "--out", str(out))
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].startswith("error: ")
    assert "in.jsonl:1: invalid JSON" in proc.stderr
    assert not out.exists()


def test_cli_writes_a_readable_dataset(tmp_path, plain_tok: str) -> None:
    src = _jsonl(tmp_path / "in.jsonl", [{"prompt": "the", "completion": "cat sat"}] * 3)
    out = tmp_path / "out.arrow"
    proc = _cli(src, "--tokenizer", plain_tok, "--out", str(out), "--max-len", "32")
    assert proc.returncode == 0, proc.stderr
    assert "wrote 3 samples" in proc.stderr
    assert open_dataset(str(out)).lengths.tolist() == [4, 4, 4]
