"""Data sources, mixing and deterministic shards."""

from __future__ import annotations

import hashlib
import sys
import types
from pathlib import Path

import pytest
import torch

from node.engine import DataError, Shard
from node.engine.data import LocalData, Sampler, load_corpora


def test_stdlib_corpus_is_python_source_in_a_fixed_order(small_spec):
    spec = small_spec()
    first, again = load_corpora(spec.data), load_corpora(spec.data)
    assert first[0].sha256 == again[0].sha256
    assert first[0].name.startswith("stdlib:python3.")
    text = bytes(first[0].train[:100_000].tolist())
    assert b"def " in text and b"import " in text
    assert len(first[0].train) + len(first[0].eval) == 2_000_000


@pytest.mark.parametrize("generator", ["markov", "arithmetic"])
def test_synthetic_sources_are_reproducible_and_seeded(small_spec, generator):
    def corpus(seed):
        source = {"kind": "synthetic", "generator": generator, "num_bytes": 4096, "seed": seed}
        return load_corpora(small_spec(data={"sources": [source]}).data)[0]

    assert corpus(1).sha256 == corpus(1).sha256
    assert corpus(1).sha256 != corpus(2).sha256


def test_same_shard_position_gives_the_same_batch(small_spec):
    spec = small_spec()
    sampler = Sampler(load_corpora(spec.data), seq_len=32, batch_size=4, seed=7)
    x, y = sampler.batch(stream=3, cursor=11, micro=0)
    x2, y2 = sampler.batch(stream=3, cursor=11, micro=0)
    assert torch.equal(x, x2) and torch.equal(y, y2)
    assert torch.equal(x[:, 1:], y[:, :-1])  # targets are the inputs shifted by one byte
    assert x.shape == (4, 32) and x.dtype == torch.long
    for other in [(4, 11, 0), (3, 12, 0), (3, 11, 1)]:
        assert not torch.equal(x, sampler.batch(*other)[0])


def test_mixing_follows_the_weights(tmp_path, small_spec):
    (tmp_path / "a.txt").write_bytes(b"a" * 10_000)
    (tmp_path / "b.txt").write_bytes(b"b" * 10_000)
    sources = [
        {"kind": "file", "path": str(tmp_path / "a.txt"), "weight": 3.0},
        {"kind": "file", "path": str(tmp_path / "b.txt"), "weight": 1.0},
    ]
    spec = small_spec(data={"sources": sources})
    sampler = Sampler(
        load_corpora(spec.data, local=LocalData((tmp_path,))), seq_len=32, batch_size=50, seed=0
    )
    rows = torch.cat([sampler.batch(0, cursor, 0)[0] for cursor in range(40)])
    from_a = (rows[:, 0] == ord("a")).float().mean().item()
    assert 0.70 < from_a < 0.80
    assert torch.all((rows == rows[:, :1]).all(dim=1))  # no row crosses sources


def test_eval_batches_come_from_the_held_out_tail(tmp_path, small_spec):
    (tmp_path / "data.bin").write_bytes(b"t" * 9_000 + b"e" * 1_000)
    spec = small_spec(
        data={
            "sources": [{"kind": "file", "path": str(tmp_path / "data.bin")}],
            "eval_fraction": 0.1,
        }
    )
    sampler = Sampler(
        load_corpora(spec.data, local=LocalData((tmp_path,))), seq_len=32, batch_size=4, seed=0
    )
    assert all(torch.all(x == ord("e")) for x, _ in sampler.eval_batches(3))
    assert torch.all(sampler.batch(0, 0, 0)[0] == ord("t"))


class FakeStore:
    """Stands in for marketplace.storage.Storage: only `cat` is used by the engine."""

    def __init__(self, blobs):
        self.blobs = blobs
        self.asked = []

    def cat(self, cid, max_bytes=None):
        """As Storage.cat: refused with a ValueError (ContentTooLarge) past `max_bytes`."""
        self.asked.append((cid, max_bytes))
        if max_bytes is not None and len(self.blobs[cid]) > max_bytes:
            raise ValueError(f"{cid} holds more than {max_bytes} bytes")
        return self.blobs[cid]


def test_ipfs_source_reads_through_the_given_storage(small_spec):
    cid = "bafkreiexampleexampleexampleexampleexampleexampleexamplex"
    store = FakeStore({cid: b"0123456789" * 1000})
    spec = small_spec(data={"sources": [{"kind": "ipfs", "cid": cid}]})
    (corpus,) = load_corpora(spec.data, storage=store)
    assert [asked for asked, _ in store.asked] == [cid]
    assert corpus.name == f"ipfs:{cid}"
    assert bytes(corpus.train[:10].tolist()) == b"0123456789"


def test_missing_file_names_the_source(small_spec, tmp_path):
    spec = small_spec(
        data={"sources": [{"kind": "stdlib"}, {"kind": "file", "path": str(tmp_path / "nope")}]}
    )
    with pytest.raises(DataError, match=r"data.sources\[1\]: cannot read file .*nope"):
        load_corpora(spec.data, local=LocalData((tmp_path,)))


def test_source_too_small_for_the_sequence_length(small_spec, tmp_path):
    (tmp_path / "short.txt").write_bytes(b"x" * 50)
    spec = small_spec(data={"sources": [{"kind": "file", "path": str(tmp_path / "short.txt")}]})
    with pytest.raises(DataError, match="has 50 bytes"):
        load_corpora(spec.data, local=LocalData((tmp_path,)))


def test_shard_is_named_by_sources_index_and_steps(small_spec):
    spec = small_spec()
    shard = Shard.of(spec, index=2, start_step=10, end_step=20)
    assert shard.to_dict() == {
        "sources": [spec.data.sources[0].name],
        "index": 2,
        "start_step": 10,
        "end_step": 20,
    }
    assert Shard.from_dict(shard.to_dict()) == shard
    with pytest.raises(DataError, match="empty"):
        Shard.of(spec, index=0, start_step=5, end_step=5)
    with pytest.raises(DataError, match="index"):
        Shard.of(spec, index=-1, start_step=0, end_step=5)


def test_ipfs_source_without_storage_uses_the_marketplace_default(small_spec, monkeypatch):
    cid = "bafkreidefaultdefaultdefaultdefaultdefaultdefaultdefaultx"
    store = FakeStore({cid: b"abcdefghij" * 1000})
    module = types.ModuleType("marketplace.storage")
    module.Storage = lambda api_addr=None: store
    monkeypatch.setitem(sys.modules, "marketplace.storage", module)
    spec = small_spec(data={"sources": [{"kind": "ipfs", "cid": cid}]})
    (corpus,) = load_corpora(spec.data)
    assert [asked for asked, _ in store.asked] == [cid]
    assert bytes(corpus.train[:10].tolist()) == b"abcdefghij"


@pytest.fixture
def private_file(tmp_path):
    """A secret beside the provider's data directory, as ~/.ssh/id_ed25519 would be."""
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "corpus.txt").write_bytes(b"c" * 10_000)
    secret = tmp_path / "id_ed25519"
    secret.write_bytes(b"-----BEGIN OPENSSH PRIVATE KEY-----" + b"k" * 10_000)
    return secret


@pytest.mark.parametrize(
    "path, local, refusal",
    [
        ("{secret}", LocalData(), "file sources are not read here"),
        ("{secret}", LocalData(("{data}",)), "outside the local data directories"),
        ("{data}/../id_ed25519", LocalData(("{data}",)), "outside the local data directories"),
        ("{data}/link", LocalData(("{data}",)), "outside the local data directories"),
        ("/dev/zero", LocalData((Path("/dev"),)), "not a regular file"),
        ("{data}/corpus.txt", LocalData(("{data}",), max_bytes=1000), "more than 1000 bytes"),
    ],
)
def test_a_spec_cannot_make_a_provider_read_outside_its_data(
    small_spec, private_file, path, local, refusal
):
    """A job spec is written by a stranger: its file sources reach only the provider's own data
    directories, as regular files of bounded size, whatever path or symlink it names."""
    data = private_file.parent / "data"
    (data / "link").symlink_to(private_file)
    named = {"secret": private_file, "data": data}
    local = LocalData(
        tuple(Path(str(r).format(**named)) for r in local.roots), max_bytes=local.max_bytes
    )
    spec = small_spec(data={"sources": [{"kind": "file", "path": path.format(**named)}]})
    with pytest.raises(DataError, match=refusal):
        load_corpora(spec.data, local=local)


def test_a_file_in_the_data_directory_is_read(small_spec, private_file):
    data = private_file.parent / "data"
    spec = small_spec(data={"sources": [{"kind": "file", "path": str(data / "corpus.txt")}]})
    (corpus,) = load_corpora(spec.data, local=LocalData((data,)))
    assert corpus.sha256 == hashlib.sha256(b"c" * 10_000).hexdigest()
