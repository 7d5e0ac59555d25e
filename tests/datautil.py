"""Shared test data for the data-layer tests: token rows, real dataset files, a local tokenizer."""

from __future__ import annotations

import os

import numpy as np

CHAT_TEMPLATE = (
    "{% for m in messages %}<{{ m['role'] }}> {{ m['content'] }} </s> {% endfor %}"
    "{% if add_generation_prompt %}<assistant> {% endif %}"
)
WORDS = "the cat sat on a mat and dog ran to red blue green hello world yes no".split()


def make_rows(
    n: int, seed: int, *, min_len: int = 3, max_len: int = 100, vocab: int = 256
) -> list[tuple[list[int], list[int]]]:
    """n rows (input_ids, loss_mask): random ids in [1, vocab-2], prompt masked 0, rest 1."""
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(n):
        length = int(rng.integers(min_len, max_len + 1))
        ids = [int(t) for t in rng.integers(1, vocab - 1, size=length)]
        split = int(rng.integers(1, length)) if length > 1 else 0
        rows.append((ids, [0] * split + [1] * (length - split)))
    return rows


def write_save_to_disk(folder: str, rows: list[tuple[list[int], list[int]]], *, num_shards: int = 1) -> str:
    """A real `datasets.save_to_disk` folder (Arrow IPC stream shards + state.json)."""
    import datasets

    ds = datasets.Dataset.from_dict({"input_ids": [r[0] for r in rows], "loss_mask": [r[1] for r in rows]})
    ds.save_to_disk(folder, num_shards=num_shards)
    return folder


def arrow_files(folder: str) -> list[str]:
    return sorted(os.path.join(folder, f) for f in os.listdir(folder) if f.endswith(".arrow"))


def affine_generate(prompts: list[list[int]], max_new_tokens: int, vocab: int = 256) -> list[list[int]]:
    """Deterministic stand-in for the target's greedy generator: t_{k+1} = (5 t_k + 3) mod (vocab-2) + 1."""
    out = []
    for p in prompts:
        t, new = p[-1], []
        for _ in range(max_new_tokens):
            t = (5 * t + 3) % (vocab - 2) + 1
            new.append(t)
        out.append(new)
    return out


def build_tokenizer(folder: str, *, chat_template: str | None = None) -> str:
    """A WordLevel tokenizer saved with save_pretrained, built offline (no network)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    specials = ["<pad>", "<unk>", "<s>", "</s>", "<user>", "<assistant>", "<system>"]
    vocab = {w: i for i, w in enumerate(specials + WORDS)}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok = PreTrainedTokenizerFast(
        tokenizer_object=core, pad_token="<pad>", unk_token="<unk>", bos_token="<s>", eos_token="</s>"
    )
    if chat_template is not None:
        tok.chat_template = chat_template
    tok.save_pretrained(folder)
    return folder
