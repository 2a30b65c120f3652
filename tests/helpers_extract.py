"""Helpers for the extraction tests: a tiny word-level tokenizer trained in-process (nothing downloaded)."""

from __future__ import annotations

import json
from pathlib import Path

from helpers import ROOT

from yamltrace.examples.tiny import TinyConfig

TEXTS = [
    "the cat sat on the mat",
    "a dog ran in the park",
    "the bird sang a song",
    "it rained all day long",
    "we read a book by the fire",
    "the sun rose over the hills",
    "a fish swam in the lake",
]


def tiny_tokenizer(directory: Path, texts: list[str] = TEXTS) -> Path:
    """Train a word-level tokenizer on `texts`, save it as a transformers tokenizer in `directory`."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    model = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    model.pre_tokenizer = pre_tokenizers.Whitespace()
    model.train_from_iterator(texts, trainers.WordLevelTrainer(vocab_size=128, special_tokens=["[PAD]", "[UNK]", "[EOS]"]))
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=model, pad_token="[PAD]", unk_token="[UNK]", eos_token="[EOS]")
    tokenizer.save_pretrained(str(directory))
    return directory


SPEC = str(ROOT / "specs" / "tiny-last-layers.yaml")
MODEL = "yamltrace.examples.tiny:TinyModel"


def cli_inputs(tmp_path: Path) -> dict[str, Path]:
    """The files `yamltrace extract` reads (the tiny model's config, a JSONL data file with a text and a number
    per row, a tokenizer) and the output folder it writes, under `tmp_path`."""
    config = tmp_path / "config.json"
    TinyConfig().save(config)
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps({"text": t, "n": i}) + "\n" for i, t in enumerate(TEXTS * 2)), encoding="utf-8")
    return {"config": config, "data": data, "tokenizer": tiny_tokenizer(tmp_path / "tok"), "out": tmp_path / "out"}


def command(inputs: dict[str, Path], *extra: str) -> list[str]:
    return [
        "extract", "--model", MODEL, "--config", str(inputs["config"]), "--spec", SPEC, "--data", str(inputs["data"]),
        "--tokenizer", str(inputs["tokenizer"]), "--max-length", "6", "--batch-size", "4", "--out", str(inputs["out"]), *extra,
    ]  # fmt: skip
