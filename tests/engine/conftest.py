"""Fixtures for the engine tests: the shipped specs and small variants of them."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

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
