"""The streaming data pipeline: document sources, filters, dedup, mixing, determinism, memory."""

from __future__ import annotations

import importlib
import io
import json
import logging
import math
import random
import tracemalloc

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from marketplace.protocol.spec import DedupSpec, FilterSpec, SpecError
from node.data import (
    MAX_DOCUMENT_BYTES,
    ByteEncoder,
    Deduplicator,
    Pipeline,
    PipelineError,
    PipelineStats,
    documents,
    synthetic,
)
from node.data.parquet_pages import chunk_bytes, page_sizes
from node.data.quality import QualityFilter
from node.engine import (
    DataError,
    LocalData,
    SpecOverLimits,
    UnitLimits,
    load_spec,
    run_unit,
    unit_shard,
)
from node.engine import data as engine_data
from node.engine.data import Sampler, load_corpora

from .conftest import SPECS, write_jsonl, write_parquet


def all_tokens(corpus) -> list[int]:
    return torch.cat([corpus.train, corpus.eval]).tolist()


def byte_stream(texts: list[str]) -> list[int]:
    return list("".join(t + "\n\n" for t in texts).encode())


@pytest.fixture(autouse=True)
def fresh_cache():
    """Every test reads its sources itself, not a corpus an earlier test left in the cache."""
    engine_data._CACHE.clear()


def test_every_document_source_kind_yields_the_same_tokens(tmp_path, storage, texts, spec_on):
    texts = texts[:80] + ["Ünïcode survives: naïve café, 東京, \U0001f600."]
    jsonl = write_jsonl(tmp_path / "c.jsonl", [{"body": t, "n": i} for i, t in enumerate(texts)])
    parquet = write_parquet(tmp_path / "c.parquet", texts)
    text = tmp_path / "c.txt"
    text.write_text("\n\n\n".join(t.replace(". ", ".\n") for t in texts))  # paragraphs of lines
    cid = storage.add_file(jsonl)
    sources = [
        {"kind": "jsonl", "path": str(jsonl), "field": "body"},
        {"kind": "parquet", "path": str(parquet)},
        {"kind": "jsonl", "cid": cid, "field": "body"},
    ]
    spec = spec_on(sources)
    corpora = load_corpora(spec.data, storage, LocalData((tmp_path,)))
    assert [c.name for c in corpora] == [
        "jsonl:" + str(jsonl),
        "parquet:" + str(parquet),
        f"jsonl:ipfs:{cid}",
    ]
    expected = byte_stream(texts)
    for corpus in corpora:
        assert all_tokens(corpus) == expected
        assert corpus.train.dtype == torch.int32
    assert (
        len({c.sha256 for c in corpora}) == 1
    )  # the digest is of the tokens, wherever they came from
    (paragraphs,) = load_corpora(
        spec_on([{"kind": "text", "path": str(text)}]).data, local=LocalData((tmp_path,))
    )
    assert all_tokens(paragraphs) == byte_stream(
        [t.replace(". ", ".\n") + "\n" for t in texts[:-1]] + [texts[-1].replace(". ", ".\n")]
    )


def test_quality_filters_drop_what_they_say():
    keep = QualityFilter(
        FilterSpec(min_chars=20, max_chars=200, min_alpha_ratio=0.7, max_repeated_line_ratio=0.3)
    ).keep
    assert keep("The patient farmer repairs the old bridge near the coast.")
    assert not keep("Too short.")  # under min_chars
    assert not keep("word " * 50)  # over max_chars
    assert not keep("12345|0.1234 99871|0.9981 43110|0.5512 10001|0.0001")  # mostly digits
    assert not keep("A line said twice.\nA line said twice.\nA line said twice.\nAnother.")
    assert keep("Lines differ here.\nEach one is new.\nNothing repeats at all.")


def test_exact_and_near_duplicates_are_dropped_and_distinct_documents_kept(texts):
    dedup = Deduplicator(DedupSpec(exact=True, near=True, threshold=0.8))
    fresh = texts[:300]
    assert all(dedup.keep(t) for t in fresh)  # no false positives among distinct documents
    assert not dedup.keep(fresh[5])
    assert not dedup.keep("  " + fresh[6].upper().replace(" ", "\n  "))  # case and spacing
    assert dedup.exact_dropped == 2
    rng = random.Random(0)
    near = [synthetic.near_copy(rng, t) for t in fresh[:100] if len(t.split()) >= 50]
    # one word in fifty changed: a Jaccard similarity near 0.9, which 64 permutations in LSH
    # bands tuned for 0.8 catch nine times in ten
    assert sum(not dedup.keep(t) for t in near) >= 0.8 * len(near)
    assert dedup.near_dropped >= 0.8 * len(near)


def test_dedup_remembers_only_its_window(texts):
    dedup = Deduplicator(DedupSpec(exact=True, near=True, window=50))
    for t in texts[:200]:
        assert dedup.keep(t)
        assert dedup.remembered <= 50
    assert not dedup.keep(texts[199])  # within the window: still caught
    assert dedup.keep(texts[0])  # past the window: forgotten, so kept again


def test_pipeline_counts_and_the_engine_applies_filters_and_dedup(tmp_path, spec_on):
    docs = list(
        synthetic.documents(800, seed=5, duplicates=0.1, near_duplicates=0.1, junk_share=0.1)
    )
    path = write_jsonl(tmp_path / "c.jsonl", [{"text": t} for t in docs])
    filters = {"min_chars": 40, "min_alpha_ratio": 0.6, "max_repeated_line_ratio": 0.3}
    dedup = {"near": True}
    stats = Pipeline(ByteEncoder(), FilterSpec(**filters), DedupSpec(**dedup)).run(
        docs, io.BytesIO()
    )
    assert stats.documents == 800
    assert 50 <= stats.filtered <= 110  # the junk share
    assert 50 <= stats.exact_duplicates <= 110
    assert 40 <= stats.near_duplicates <= 110
    assert stats.kept == 800 - stats.filtered - stats.exact_duplicates - stats.near_duplicates
    spec = spec_on([{"kind": "jsonl", "path": str(path)}], filters=filters, dedup=dedup)
    (corpus,) = load_corpora(spec.data, local=LocalData((tmp_path,)))
    assert len(all_tokens(corpus)) == stats.tokens


def test_sources_mix_by_weight(tmp_path, spec_on):
    a = write_jsonl(tmp_path / "a.jsonl", [{"text": "a" * 300}] * 20)
    b = write_jsonl(tmp_path / "b.jsonl", [{"text": "b" * 300}] * 20)
    spec = spec_on(
        [
            {"kind": "jsonl", "path": str(a), "weight": 3},
            {"kind": "jsonl", "path": str(b), "weight": 1},
        ]
    )
    sampler = Sampler(load_corpora(spec.data, local=LocalData((tmp_path,))), 32, 50, seed=0)
    rows = torch.cat([sampler.batch(0, cursor, 0)[0] for cursor in range(40)])  # (2000, 32)
    from_a = (rows == ord("a")).any(dim=1) & ~(rows == ord("b")).any(dim=1)
    assert abs(float(from_a.float().mean()) - 0.75) < 0.03


def test_shards_are_reproducible_alone_and_across_runs(tmp_path, storage, bpe_json, texts, spec_on):
    cid = storage.add_bytes(bpe_json)
    path = write_jsonl(tmp_path / "c.jsonl", [{"text": t} for t in texts])
    spec = spec_on(
        [{"kind": "jsonl", "path": str(path)}], tokenizer={"cid": cid, "vocab_size": 400}
    )
    local = LocalData((tmp_path,))
    first = Sampler(load_corpora(spec.data, storage, local), 32, 8, seed=7)
    for stream in range(4):  # streams 0..2 drawn before stream 3
        for cursor in range(6):
            first.batch(stream, cursor, 0)
    engine_data._CACHE.clear()  # a verifier: its own pipeline run, then only shard 3, step 5
    alone = Sampler(load_corpora(spec.data, storage, local), 32, 8, seed=7)
    x, y = alone.batch(3, 5, 1)
    assert torch.equal(x, first.batch(3, 5, 1)[0]) and torch.equal(y, first.batch(3, 5, 1)[1])
    assert not torch.equal(x, alone.batch(2, 5, 1)[0])  # shards are different streams
    assert int(x.max()) < 400 and x.dtype == torch.long


def test_a_unit_on_a_tokenized_corpus_is_bit_identical_on_rerun(
    tmp_path, storage, bpe_json, texts, spec_on
):
    cid = storage.add_bytes(bpe_json)
    path = write_jsonl(tmp_path / "c.jsonl", [{"text": t} for t in texts])
    spec = spec_on(
        [{"kind": "jsonl", "path": str(path)}], tokenizer={"cid": cid, "vocab_size": 400}
    )
    local = LocalData((tmp_path,))
    shard = unit_shard(spec, slot=0)
    first = run_unit(spec, None, shard, 4, storage=storage, local_data=local)
    engine_data._CACHE.clear()
    again = run_unit(spec, None, shard, 4, storage=storage, local_data=local)
    assert first.state_hash == again.state_hash
    assert first.checkpoint.state["model"]["transformer.wte.weight"].shape[0] == 400
    (digest,) = first.checkpoint.metadata["unit"]["data_sha256"].values()
    assert digest == load_corpora(spec.data, storage, local)[0].sha256


def test_a_corpus_many_times_the_buffer_streams_through_in_bounded_memory(tmp_path):
    buffer = 8 << 10

    def traced(documents_count: int) -> tuple[int, int, Pipeline, PipelineStats]:
        """The corpus's size, and the most Python and NumPy held while it streamed through."""
        path = tmp_path / f"corpus-{documents_count}.jsonl"
        size = synthetic.write_jsonl(path, synthetic.documents(documents_count, duplicates=0.05))
        pipeline = Pipeline(
            ByteEncoder(), dedup=DedupSpec(near=True, window=100), buffer_bytes=buffer
        )
        tracemalloc.start()
        with path.open("rb") as f:
            stats = pipeline.run(documents("jsonl", f), _Sink())
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        return size, peak, pipeline, stats

    small_size, small_peak, _, _ = traced(500)
    size, peak, pipeline, stats = traced(2000)
    assert size > 100 * buffer and size > 3.5 * small_size
    assert peak < 1.25 * small_peak  # four times the corpus, the same memory
    assert peak < size / 2  # the buffer, the dedup window of 100 documents, MinHash's tables
    assert stats.peak_buffered_bytes <= 6 * buffer  # text, its ids (4 bytes a byte), one document
    assert pipeline.dedup.remembered == 100


class _Sink(io.RawIOBase):
    """Counts what is written without keeping it, so only the pipeline's own memory is traced."""

    written = 0

    def writable(self):
        return True

    def write(self, data):
        self.written += len(data)
        return len(data)


def test_malformed_jsonl_lines_are_skipped_and_a_source_of_none_is_refused(tmp_path, spec_on):
    path = tmp_path / "c.jsonl"
    long_line = json.dumps({"text": "x" * MAX_DOCUMENT_BYTES})
    lines = [
        '{"text": "first good one"}',
        "{not json",
        '["a list"]',
        '{"text": 7}',
        "[" * 100_000 + "]" * 100_000,  # nested past the parser's recursion limit
        '{"text": ' + "9" * 5000 + "}",  # an int past Python's digit limit
        "",
        long_line,
        '{"text": "second good one"}',
    ]
    path.write_text("".join(line + "\n" for line in lines))
    with path.open("rb") as f:
        docs = documents("jsonl", f)
        assert list(docs) == ["first good one", "second good one"]
    assert docs.skipped == 6
    bad = write_jsonl(tmp_path / "bad.jsonl", [{"body": "no text field"}] * 5)
    spec = spec_on([{"kind": "jsonl", "path": str(bad)}])
    with pytest.raises(
        DataError, match=r"data.sources\[0\] \(jsonl:.*bad.jsonl\) has no documents left"
    ):
        load_corpora(spec.data, local=LocalData((tmp_path,)))


def test_parquet_without_the_column_or_of_another_type_is_refused(tmp_path, texts, spec_on):
    local = LocalData((tmp_path,))
    path = write_parquet(tmp_path / "c.parquet", texts[:10], column="body")
    cases = [
        ({"kind": "parquet", "path": str(path)}, r"has no column 'text' \(columns: body, id\)"),
        (
            {"kind": "parquet", "path": str(path), "column": "id"},
            "column 'id' holds int64, not strings",
        ),
        (
            {"kind": "parquet", "path": str(write_jsonl(tmp_path / "x.parquet", [{}]))},
            "not a Parquet file",
        ),
    ]
    for source, message in cases:
        with pytest.raises(DataError, match=r"data.sources\[0\] \(parquet:.*\): .*" + message):
            load_corpora(spec_on([source]).data, local=local)


def test_document_paths_keep_the_local_data_guard(tmp_path, spec_on):
    path = write_jsonl(tmp_path / "c.jsonl", [{"text": "hello"}])
    spec = spec_on([{"kind": "jsonl", "path": str(path)}])
    with pytest.raises(DataError, match="file sources are not read here"):
        load_corpora(spec.data)
    with pytest.raises(DataError, match="outside the local data directories"):
        load_corpora(spec.data, local=LocalData((tmp_path / "elsewhere",)))


def test_ipfs_documents_past_the_limit_are_refused(tmp_path, storage, texts, spec_on):
    cid = storage.add_file(write_jsonl(tmp_path / "c.jsonl", [{"text": t} for t in texts]))
    spec = spec_on([{"kind": "jsonl", "cid": cid}])
    with pytest.raises(DataError, match=f"data.sources\\[0\\]: ipfs source {cid}: "):
        load_corpora(spec.data, storage, max_ipfs_bytes=1000)


@pytest.mark.parametrize(
    "data, message",
    [
        ({"sources": [{"kind": "jsonl"}]}, "give exactly one of path and cid"),
        (
            {"sources": [{"kind": "text", "path": "a", "cid": "b"}]},
            "give exactly one of path and cid",
        ),
        (
            {"sources": [{"kind": "stdlib"}], "tokenizer": {"cid": "Qm", "vocab_size": 300}},
            "a tokenizer reads document sources",
        ),
        (
            {"sources": [{"kind": "stdlib"}], "dedup": {}},
            "filters and dedup apply to document sources",
        ),
    ],
)
def test_spec_refuses_a_pipeline_it_cannot_run(data, message, spec_on):
    with pytest.raises(SpecError, match=message):
        spec_on(**data)


def test_the_shipped_jsonl_spec_trains_on_its_corpus_and_tokenizer(storage, monkeypatch):
    spec = load_spec(SPECS / "llama-jsonl.yaml")
    data = SPECS / "data"
    assert storage.add_file(data / "stories-bpe.json") == spec.data.tokenizer.cid
    monkeypatch.chdir(SPECS.parents[1])  # the spec's path is relative to the repository
    result = run_unit(
        spec, None, unit_shard(spec, 0), 2, storage=storage, local_data=LocalData((data,))
    )
    assert spec.vocab_size == 2048
    assert type(spec.build_model().hf).__name__ == "LlamaForCausalLM"
    assert math.isfinite(result.metrics["loss"]) and result.metrics["loss"] < math.log(2048) + 1


def test_a_provider_caps_the_dedup_window(tmp_path, spec_on):
    spec = spec_on(
        [{"kind": "jsonl", "path": "c.jsonl"}], dedup={"near": True, "window": 2_000_000}
    )
    with pytest.raises(SpecOverLimits, match=r"a dedup window of ~3,890 MiB \(at most 2,048\)"):
        UnitLimits().check(spec)
    UnitLimits(max_dedup_bytes=4 << 30).check(spec)


@settings(max_examples=200, deadline=None)
@given(raw=st.binary(max_size=4096) | st.text(max_size=2048).map(str.encode))
def test_hostile_bytes_give_documents_or_a_pipeline_error(raw):
    for kind in ("jsonl", "text"):
        assert all(isinstance(d, str) for d in documents(kind, io.BytesIO(raw)))
    try:
        list(documents("parquet", io.BytesIO(raw)))
    except PipelineError:
        pass


documents_module = importlib.import_module("node.data.documents")  # the name is a function too


def zstd_parquet(texts: list[str]) -> io.BytesIO:
    raw = io.BytesIO()
    pq.write_table(pa.table({"text": texts}), raw, compression="zstd")
    raw.seek(0)
    return raw


def test_a_parquet_file_that_decompresses_past_the_bound_is_refused_before_it_is_read(
    monkeypatch,
):
    """A few kilobytes of zstd that honestly declare 4 MiB of text: with the bound lowered to
    1 MiB (it is 256 MiB) the file is refused from its page headers, and nothing is decoded."""
    monkeypatch.setattr(documents_module, "MAX_PARQUET_CHUNK_BYTES", 1 << 20)
    bomb = zstd_parquet(["a" * (4 << 20)])
    assert len(bomb.getvalue()) < 8192
    allocated = pa.total_allocated_bytes()
    with pytest.raises(PipelineError, match=r"decompresses to over 1 MiB \(write it with smaller"):
        list(documents("parquet", bomb))
    assert pa.total_allocated_bytes() - allocated < 1 << 20


def test_page_sizes_come_from_the_page_headers_not_the_footer():
    """A hand-written page header declaring 2 GiB over ten bytes of payload: the walk reports
    the declared size (what a reader would allocate), and the chunk is refused."""
    uncompressed, compressed = (1 << 31) - 1, 10

    def zigzag_varint(n: int) -> bytes:
        n, out = (n << 1) ^ (n >> 63), b""
        while n >= 0x80:
            out, n = out + bytes([n & 0x7F | 0x80]), n >> 7
        return out + bytes([n])

    header = (
        b"\x15"
        + zigzag_varint(0)  # field 1, i32: page type DATA_PAGE
        + b"\x15"
        + zigzag_varint(uncompressed)  # field 2, i32
        + b"\x15"
        + zigzag_varint(compressed)  # field 3, i32
        + b"\x2c"
        + b"\x15\x02\x00"  # field 5, a struct with one i32, then its stop
        + b"\x00"  # the header's stop
    )
    chunk = io.BytesIO(header + bytes(compressed))
    assert list(page_sizes(chunk, 0, len(chunk.getvalue()))) == [(uncompressed, compressed)]
    with pytest.raises(PipelineError, match="decompresses to over 256 MiB"):
        chunk_bytes(chunk, 0, len(chunk.getvalue()), 256 << 20)
    with pytest.raises(PipelineError, match="runs past its column chunk"):
        list(page_sizes(chunk, 0, len(chunk.getvalue()) - 1))


def test_a_long_text_repeated_on_every_row_is_held_once_and_an_over_long_one_skipped():
    long_text = "b" * (MAX_DOCUMENT_BYTES // 2)
    source = documents(
        "parquet", zstd_parquet([long_text] * 2000 + ["c" * (MAX_DOCUMENT_BYTES + 1)])
    )
    peak, base = 0, pa.total_allocated_bytes()
    for text in source:
        assert text == long_text
        peak = max(peak, pa.total_allocated_bytes() - base)
    assert source.skipped == 1
    assert peak < 16 * MAX_DOCUMENT_BYTES  # a batch of 1,024 expanded rows would be 512 MiB


def test_parquet_documents_are_the_columns_strings_in_file_order_across_batches_and_groups():
    """Rows repeated and unique, nulls and an over-long row, in row groups of 700 whose
    dictionaries overflow into plain pages, read in batches cut at 1,024 rows and at each group's
    end: the documents are exactly the column's strings in file order, nulls and the over-long
    row left out."""
    rng = random.Random(7)
    texts: list[str | None] = [
        rng.choice(["same", "again", f"unique {i} " + "é漢🦓" * rng.randint(0, 40)])
        for i in range(5_000)
    ]
    for row in (0, 699, 700, 1023, 1024, 4999):
        texts[row] = None
    texts[2100] = "x" * (MAX_DOCUMENT_BYTES + 1)
    raw = io.BytesIO()
    pq.write_table(
        pa.table({"text": texts}), raw, row_group_size=700, dictionary_pagesize_limit=4096
    )
    source = documents("parquet", io.BytesIO(raw.getvalue()))
    assert list(source) == [t for t in texts if t is not None and len(t) <= MAX_DOCUMENT_BYTES]
    assert source.skipped == 1


def test_an_empty_parquet_file_has_no_documents():
    """A file of no rows (a filtered-out shard, say) keeps a row group whose chunk has a
    dictionary page but no data page; it is read as empty, not refused."""
    raw = io.BytesIO()
    pq.write_table(pa.table({"text": pa.array([], pa.string())}), raw)
    raw.seek(0)
    assert list(documents("parquet", raw)) == []


def test_the_skip_log_names_an_over_long_documents_row_in_the_file(caplog):
    over_long = "c" * (MAX_DOCUMENT_BYTES + 1)
    texts = ["a"] * 3_000
    texts[5] = texts[1_030] = texts[2_500] = over_long  # in the first, second and third batches
    with caplog.at_level(logging.DEBUG, logger="node.data.documents"):
        source = documents("parquet", zstd_parquet(texts))
        assert list(source) == ["a"] * 2_997
    assert source.skipped == 3
    assert [r.getMessage() for r in caplog.records] == [
        f"parquet row {row} skipped: longer than {MAX_DOCUMENT_BYTES} bytes"
        for row in (5, 1_030, 2_500)
    ]
