"""Helpers for the extraction tests: a tiny word-level tokenizer trained in-process (nothing downloaded)."""

from __future__ import annotations

from pathlib import Path

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
