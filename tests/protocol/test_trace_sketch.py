"""The weight sketch every trajectory record carries: its bits are part of the protocol (a record's
digest binds them), so they are pinned here, whether a tensor's hashing is drawn or kept."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import torch
import yaml

from marketplace.protocol import trace
from marketplace.protocol.spec import parse_spec

TINY = Path(__file__).resolve().parents[2] / "node" / "specs" / "tiny.yaml"
# sha256 of the JSON of _model()'s sketch, as the protocol has defined it since records began
PINNED = "e36f52272446456667c79df8c53a8290ed4c05b58821e3c5d7157a6e894fc4d7"


def _model() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(7)
    return {
        "b.weight": torch.randn(33, 17, generator=g),
        "a.bias": torch.randn(5, generator=g).to(torch.bfloat16),
        "steps": torch.tensor(3),  # not a float: left out
    }


def _digest(sketch: list[float]) -> str:
    return hashlib.sha256(json.dumps(sketch).encode()).hexdigest()


@pytest.mark.parametrize("kept_bytes", [0, 64 << 20], ids=["drawn-each-time", "kept"])
def test_the_sketch_has_its_pinned_bits(monkeypatch, kept_bytes):
    monkeypatch.setattr(trace, "_HASHING_CACHE_BYTES", kept_bytes)
    monkeypatch.setattr(trace, "_hashings", {})
    monkeypatch.setattr(trace, "_hashings_bytes", 0)
    assert [_digest(trace.sketch(_model())) for _ in range(2)] == [PINNED, PINNED]
    assert len(trace._hashings) == (2 if kept_bytes else 0)


def test_the_sketch_is_linear():
    a, b = _model(), {k: v * 3 for k, v in _model().items() if v.is_floating_point()}
    difference = {k: b[k].double() - a[k].double() for k in b}
    expected = [y - x for x, y in zip(trace.sketch(a), trace.sketch(b), strict=True)]
    assert trace.sketch(difference) == pytest.approx(expected, abs=1e-9)


@pytest.mark.parametrize(
    ("every", "k"),
    [(8, 1), (16, 2), (50, 5), (48, 6), (100, 10), (250, 10), (97, 1)],
)
def test_a_unit_has_about_eight_segments_and_none_longer_than_the_calibration(every, k):
    """k divides H, so unit boundaries are segment boundaries; past 8 x 16 steps a unit has more
    segments rather than ones longer than the honest drift the tolerance measured."""
    raw = yaml.safe_load(TINY.read_text())
    raw["checkpoint"]["every"], raw["training"]["max_steps"] = every, 4 * every
    spec = parse_spec(raw)
    assert trace.segment_steps(spec) == k <= trace.MAX_SEGMENT_STEPS
    assert trace.boundaries(spec, every, every)[-1] == 2 * every
