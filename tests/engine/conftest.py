"""Fixtures for the engine tests: the shipped specs and small variants of them, an IPFS node,
and generated corpora for the data pipeline."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from marketplace.protocol import tokenizer
from marketplace.storage import Storage
from node.data import synthetic
from node.engine import JobSpec, parse_spec

SPECS = Path(__file__).resolve().parents[2] / "node" / "specs"

# a model small enough that a unit of a few dozen steps takes well under a second
SMALL = {
    "model": {"architecture": "gpt", "n_layer": 1, "n_embd": 32, "n_head": 2},
    "data": {"seq_len": 32, "sources": [{"kind": "stdlib", "max_bytes": 2_000_000}]},
    "training": {
        "lr": 1.0e-2,
        "batch_size": 8,
        "max_steps": 40,
        "warmup_steps": 5,
        "eval_batches": 2,
    },
    "checkpoint": {"every": 10},
    "reproducibility": {"seed": 7, "num_threads": 2},
}


def merge(base: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """`base` with `overrides` applied recursively (lists are replaced, not merged)."""
    out = copy.deepcopy(base)
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


@pytest.fixture
def tiny_raw() -> dict[str, Any]:
    return yaml.safe_load((SPECS / "tiny.yaml").read_text())


@pytest.fixture
def small_spec():
    """Build a validated spec from SMALL plus overrides."""

    def make(**overrides: Any) -> JobSpec:
        return parse_spec(merge(SMALL, overrides))

    return make


@pytest.fixture
def storage(ipfs_api: str) -> Iterator[Storage]:
    with Storage(ipfs_api, []) as store:
        yield store


@pytest.fixture(scope="session")
def texts() -> list[str]:
    """Fresh generated documents, none a copy of another."""
    return list(synthetic.documents(600, seed=3))


@pytest.fixture(scope="session")
def bpe_json(texts: list[str]) -> bytes:
    return tokenizer.train("bpe", 400, texts).to_str().encode()


def write_jsonl(path: Path, records: list[object]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def write_parquet(path: Path, texts: list[str], column: str = "text") -> Path:
    pq.write_table(
        pa.table({column: texts, "id": list(range(len(texts)))}), path, row_group_size=64
    )
    return path


@pytest.fixture
def spec_on():
    """A small spec whose data is `sources` (plus other data fields), validated."""

    def make(sources: list[dict[str, Any]], **data: Any) -> JobSpec:
        return parse_spec(merge(SMALL, {"data": {"sources": sources, **data}}))

    return make
