"""Tokenizers a job spec names by CID: trained with Hugging Face `tokenizers`, shared as its JSON.

A tokenizer is data the user hands every provider and verifier of the job, so it is read as
hostile: a bounded number of bytes, JSON parsed by the `tokenizers` library (a Rust parser; no
code runs, unlike a pickled or `trust_remote_code` tokenizer), and a model of a known type.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Literal

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from marketplace.errors import ZooError

MAX_TOKENIZER_BYTES = 32 << 20  # a 250k-token BPE with its merges is ~10 MB of JSON
END_OF_TEXT = "<|endoftext|>"  # the token trained tokenizers put between documents
MODEL_TYPES = ("BPE", "Unigram", "WordPiece", "WordLevel")
TokenizerKind = Literal["bpe", "unigram"]


class NotATokenizer(ZooError, ValueError):
    """Bytes that are not a tokenizer this engine can load."""


def train(kind: TokenizerKind, vocab_size: int, texts: Iterable[str]) -> Tokenizer:
    """A byte-level tokenizer trained on `texts`: every string encodes, whatever its characters,
    and `END_OF_TEXT` is id 0. A unigram model may come out smaller than `vocab_size` on a small
    corpus (it keeps only pieces it saw); `Tokenizer.get_vocab_size()` says what it got."""
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    if kind == "bpe":
        tokenizer = Tokenizer(models.BPE())
        trainer: trainers.Trainer = trainers.BpeTrainer(
            vocab_size=vocab_size,
            special_tokens=[END_OF_TEXT],
            initial_alphabet=alphabet,
            show_progress=False,
        )
    else:
        tokenizer = Tokenizer(models.Unigram())
        trainer = trainers.UnigramTrainer(
            vocab_size=vocab_size,
            special_tokens=[END_OF_TEXT],
            initial_alphabet=alphabet,
            unk_token=END_OF_TEXT,
            show_progress=False,
        )
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.train_from_iterator(texts, trainer)
    return tokenizer


def load(raw: bytes, max_bytes: int = MAX_TOKENIZER_BYTES) -> Tokenizer:
    """A tokenizer from its JSON (`Tokenizer.to_str()`), or NotATokenizer saying why not."""
    if len(raw) > max_bytes:
        raise NotATokenizer(f"holds more than {max_bytes} bytes")
    try:
        document = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise NotATokenizer(f"not JSON ({exc})") from None
    kind = document.get("model", {}).get("type") if isinstance(document, dict) else None
    if kind not in MODEL_TYPES:
        raise NotATokenizer(f"not a tokenizer.json (model type {kind!r}; known: {MODEL_TYPES})")
    try:
        return Tokenizer.from_str(raw.decode())
    except Exception as exc:  # noqa: BLE001 (the library raises a bare Exception on bad input)
        raise NotATokenizer(f"a {kind} tokenizer that does not load: {exc}") from None


def separator(tokenizer: Tokenizer) -> list[int]:
    """The ids put between two documents: END_OF_TEXT when the tokenizer has it, else none."""
    eot = tokenizer.token_to_id(END_OF_TEXT)
    return [] if eot is None else [eot]
