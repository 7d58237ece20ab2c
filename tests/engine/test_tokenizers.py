"""Tokenizers: trained by the CLI, stored by CID, named in a spec, refused when they are not one."""

from __future__ import annotations

import json
import re

import pytest
from click.testing import CliRunner

from marketplace.cli import main
from marketplace.protocol import tokenizer
from node.engine import DataError, LocalData
from node.engine.data import load_corpora

from .conftest import write_jsonl


@pytest.mark.parametrize("kind", ["bpe", "unigram"])
def test_trained_tokenizer_round_trips_through_its_json(kind, texts):
    trained = tokenizer.train(kind, 400, texts)
    loaded = tokenizer.load(trained.to_str().encode())
    sample = texts[0] + " Ünïcode, emoji \U0001f600 and tabs\t"
    assert loaded.encode(sample).ids == trained.encode(sample).ids
    assert loaded.decode(loaded.encode(sample).ids) == sample  # byte-level: nothing is lost
    assert loaded.token_to_id(tokenizer.END_OF_TEXT) == 0
    assert 257 < loaded.get_vocab_size() <= 400


def test_cli_trains_adds_and_a_spec_trains_on_its_cid(
    tmp_path, ipfs_api, storage, texts, spec_on, monkeypatch
):
    corpus = write_jsonl(tmp_path / "corpus.jsonl", [{"text": t} for t in texts])
    out = tmp_path / "tokenizer.json"
    monkeypatch.setenv("ZOO_IPFS_API", ipfs_api)
    monkeypatch.setenv("ZOO_IPFS_REPLICAS", "[]")
    result = CliRunner().invoke(
        main,
        ["tokenizers", "train", "--vocab-size", "300", "--out", str(out), "--add", str(corpus)],
    )
    assert result.exit_code == 0, result.output
    cid = re.search(r"added as (\S+);", result.output).group(1)
    assert storage.cat(cid) == out.read_bytes()
    assert f"tokenizer: {{cid: {cid}, vocab_size: 300}}" in result.output

    spec = spec_on(
        [{"kind": "jsonl", "path": str(corpus)}], tokenizer={"cid": cid, "vocab_size": 300}
    )
    assert spec.vocab_size == 300
    (loaded,) = load_corpora(spec.data, storage, LocalData((tmp_path,)))
    trained = tokenizer.load(out.read_bytes())
    first = trained.encode(texts[0]).ids
    assert loaded.train[: len(first) + 1].tolist() == first + [0]  # then <|endoftext|>
    assert int(loaded.train.max()) < 300


def test_cli_refuses_a_file_that_is_not_a_corpus(tmp_path):
    bad = tmp_path / "table.parquet"
    bad.write_bytes(b"not parquet")
    result = CliRunner().invoke(
        main, ["tokenizers", "train", "--vocab-size", "300", "--out", str(tmp_path / "t"), str(bad)]
    )
    assert result.exit_code == 1
    assert "Error: not a Parquet file" in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize(
    "blob, reason",
    [
        (b"\x89PNG\r\n\x1a\n" + bytes(100), "not JSON"),
        (json.dumps({"model": {"type": "Pickle"}}).encode(), "not a tokenizer.json"),
        (json.dumps([1, 2, 3]).encode(), "not a tokenizer.json"),
        (
            json.dumps({"model": {"type": "BPE", "vocab": "nope"}}).encode(),
            "a BPE tokenizer that does not load",
        ),
    ],
)
def test_a_cid_that_is_not_a_tokenizer_is_refused(blob, reason, tmp_path, storage, texts, spec_on):
    cid = storage.add_bytes(blob)
    corpus = write_jsonl(tmp_path / "c.jsonl", [{"text": t} for t in texts[:50]])
    spec = spec_on(
        [{"kind": "jsonl", "path": str(corpus)}], tokenizer={"cid": cid, "vocab_size": 300}
    )
    with pytest.raises(DataError, match=f"data.tokenizer: {cid} is not a tokenizer: {reason}"):
        load_corpora(spec.data, storage, LocalData((tmp_path,)))


def test_a_tokenizer_too_large_or_of_another_size_is_refused(
    tmp_path, storage, bpe_json, texts, spec_on
):
    with pytest.raises(tokenizer.NotATokenizer, match="more than 100 bytes"):
        tokenizer.load(bpe_json, max_bytes=100)
    cid = storage.add_bytes(bpe_json)
    corpus = write_jsonl(tmp_path / "c.jsonl", [{"text": t} for t in texts[:50]])
    spec = spec_on(
        [{"kind": "jsonl", "path": str(corpus)}], tokenizer={"cid": cid, "vocab_size": 512}
    )
    with pytest.raises(DataError, match="vocab_size is 512, but the tokenizer at .* has 400"):
        load_corpora(spec.data, storage, LocalData((tmp_path,)))
