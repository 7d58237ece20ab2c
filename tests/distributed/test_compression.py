"""Compression: exact byte counts, faithful round trips, and error feedback that loses nothing."""

from __future__ import annotations

import math

import pytest
import torch

from node.distributed.compression import CompressionError, Compressor, ErrorFeedback, Payload

SETTINGS = [
    Compressor(),
    Compressor(bits=8),
    Compressor(bits=4, chunk=64),
    Compressor(ratio=0.01),
    Compressor(ratio=0.05, bits=8, chunk=32),
    Compressor(ratio=0.1, bits=4, chunk=7),
    Compressor(bits=2, chunk=16),
    Compressor(ratio=0.1, bits=2, selection="random"),
    Compressor(ratio=0.25, selection="random"),
]


@pytest.mark.parametrize("compressor", SETTINGS, ids=repr)
@pytest.mark.parametrize("numel", [1, 999, 4096])
def test_payload_bytes_are_exact(compressor: Compressor, numel: int) -> None:
    payload = compressor.compress(torch.randn(numel, generator=torch.Generator().manual_seed(0)))
    k = compressor.kept(numel)
    values = 4 * k if compressor.bits == 32 else math.ceil(k * compressor.bits / 8)
    indices = 0 if k == numel or compressor.selection == "random" else 4 * k
    scales = 0 if compressor.bits == 32 else 4 * math.ceil(k / compressor.chunk)
    assert payload.nbytes == values + indices + scales == compressor.payload_bytes(numel)
    assert sum(t.numel() * t.element_size() for t in payload.tensors()) == payload.nbytes


def test_fp32_dense_is_the_identity() -> None:
    x = torch.randn(1000)
    compressor = Compressor()
    assert torch.equal(compressor.decompress(compressor.compress(x), 1000), x)


def test_topk_keeps_the_largest_entries_exactly() -> None:
    x = torch.tensor([0.1, -5.0, 0.2, 3.0, -0.3, 0.0, 1.0, -0.05, 0.4, 0.6])
    compressor = Compressor(ratio=0.3)
    out = compressor.decompress(compressor.compress(x), 10)
    assert torch.equal(out, torch.tensor([0, -5.0, 0, 3.0, 0, 0, 1.0, 0, 0, 0]))


@pytest.mark.parametrize("bits, tolerance", [(8, 1 / 127), (4, 1 / 7)])
def test_quantization_error_is_bounded_by_half_a_step(bits: int, tolerance: float) -> None:
    x = torch.randn(1000, generator=torch.Generator().manual_seed(1))
    compressor = Compressor(bits=bits, chunk=100)
    out = compressor.decompress(compressor.compress(x), 1000)
    step = x.view(10, 100).abs().amax(dim=1).repeat_interleave(100) * tolerance  # (1000,)
    assert torch.all((out - x).abs() <= step / 2 + 1e-6)


@pytest.mark.parametrize("compressor", SETTINGS[1:], ids=repr)
def test_error_feedback_sum_of_sent_converges_to_sum_of_true_updates(
    compressor: Compressor,
) -> None:
    g = torch.Generator().manual_seed(2)
    feedback = ErrorFeedback(compressor)
    true_total = torch.zeros(500)
    sent_total = torch.zeros(500)
    gaps = {}
    for round_ in range(1, 1001):
        update = torch.randn(500, generator=g) * 0.01 + 0.001  # a small drift under noise
        true_total += update
        sent_total += feedback.compress(update, round_)[1]
        # what is missing is exactly the residual still held back
        assert torch.allclose(sent_total + feedback.residual, true_total, atol=1e-4)
        if round_ in (250, 1000):
            gaps[round_] = float((sent_total - true_total).norm() / true_total.norm())
    assert gaps[1000] < 0.05
    assert gaps[1000] <= gaps[250] / 2 or gaps[250] < 1e-3


def test_two_bits_are_four_levels_of_the_chunk_rms() -> None:
    x = torch.tensor([-3.0, -0.5, 0.2, 2.0, 0.0, 0.0, 0.0, 0.0, 9.0])
    compressor = Compressor(bits=2, chunk=4)
    out = compressor.decompress(compressor.compress(x), 9)
    rms = float(x[:4].square().mean().sqrt())
    assert torch.allclose(out[:4], torch.tensor([-1.5, -0.5, 0.5, 1.5]) * rms)
    assert torch.equal(out[4:8], torch.full((4,), 0.0))  # an all-zero chunk has scale 0
    assert out[8] == 1.5 * 9.0  # the padded last chunk: RMS over its one entry, 9


def test_random_selection_is_shared_by_seed_and_round_and_sends_no_positions() -> None:
    x = torch.randn(1000, generator=torch.Generator().manual_seed(4))
    compressor = Compressor(ratio=0.05, selection="random", seed=9)
    payload = compressor.compress(x, round_=3)
    assert payload.indices.numel() == 0
    kept = compressor.decompress(payload, 1000, round_=3).nonzero().flatten()
    assert torch.equal(x[kept], payload.values) and kept.numel() == 50
    # another rank's vector in the same round is kept at the same positions
    other = Compressor(ratio=0.05, selection="random", seed=9).compress(x + 100, round_=3)
    assert torch.equal(other.values, payload.values + 100)
    elsewhere = compressor.decompress(compressor.compress(x, round_=4), 1000, round_=4)
    assert not torch.equal(elsewhere.nonzero().flatten(), kept)


def test_without_error_feedback_topk_loses_the_small_entries() -> None:
    update = torch.full((100,), 0.01)
    update[0] = 0.3
    compressor = Compressor(ratio=0.01)
    naive = sum(compressor.decompress(compressor.compress(update), 100) for _ in range(50))
    feedback = ErrorFeedback(compressor)
    fed = sum(feedback.compress(update)[1] for _ in range(50))
    assert naive[1:].abs().sum() == 0
    assert fed[1:].abs().sum() > 0


def test_payload_hash_changes_with_the_update() -> None:
    compressor = Compressor(ratio=0.1, bits=8)
    x = torch.randn(300, generator=torch.Generator().manual_seed(3))
    assert compressor.compress(x).sha256() == compressor.compress(x.clone()).sha256()
    assert compressor.compress(x).sha256() != compressor.compress(x * 1.01).sha256()


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"ratio": 0}, "ratio"),
        ({"bits": 16}, "bits"),
        ({"chunk": 0}, "chunk"),
        ({"selection": "first"}, "selection"),
    ],
)
def test_bad_settings_name_the_field(kwargs: dict, field: str) -> None:
    with pytest.raises(CompressionError, match=field):
        Compressor(**kwargs)


def test_a_payload_of_the_wrong_size_is_refused() -> None:
    compressor = Compressor(ratio=0.1)
    with pytest.raises(CompressionError, match="bytes"):
        compressor.decompress(compressor.compress(torch.randn(100)), 200)


@pytest.mark.parametrize("compressor", SETTINGS, ids=repr)
def test_a_payload_is_explained_by_any_vector_within_rounding_of_its_own(
    compressor: Compressor,
) -> None:
    """What a verifier of another class relies on: the payload its honest rank made from a
    vector a rounding away from the verifier's is explained within a slack that covers it,
    whichever positions swapped or levels flipped; a payload of a noised vector is not."""
    g = torch.Generator().manual_seed(5)
    x = torch.randn(4096, generator=g)
    rounding = torch.randn(4096, generator=g) * 1e-6
    assert compressor.explains(compressor.compress(x, 2), x, 0.0, 2) is None
    assert compressor.explains(compressor.compress(x + rounding, 2), x, 1e-5, 2) is None
    noised = x + torch.randn(4096, generator=g) * 0.05
    assert compressor.explains(compressor.compress(noised, 2), x, 1e-4, 2) is not None


def test_a_level_flipped_away_from_its_edge_is_not_explained() -> None:
    """A verifier allows a 2-bit entry the next level only where it lies within the slack of
    that level's edge: entry 0 (0.27 of the RMS) is far from every edge, entry 1 (zero) is on
    the edge between codes 1 and 2."""
    x = torch.tensor([0.2, 0.0, -1.0, -0.3] * 4)
    compressor = Compressor(bits=2, chunk=16)
    payload = compressor.compress(x)
    for entry, explained in ((0, False), (1, True)):
        flipped = payload.values.clone()
        flipped[0] ^= 0b11 << (2 * entry)  # code 2 (the level above zero) becomes 1
        changed = Payload(flipped, payload.indices, payload.scales)
        assert (compressor.explains(changed, x, 1e-3) is None) is explained


def test_kept_positions_must_be_the_largest_within_the_slack() -> None:
    x = torch.tensor([0.1, -5.0, 0.2, 3.0, -0.3, 0.0, 1.0, -0.05, 0.4, 0.6])
    compressor = Compressor(ratio=0.3)
    kept = compressor.compress(x)
    swapped = Payload(kept.values, torch.tensor([1, 3, 9], dtype=torch.int32), kept.scales)
    assert "largest" in (compressor.explains(swapped, x, 1e-3) or "")
    assert compressor.explains(swapped, x, 0.5) is None  # 0.6 and 1.0 within the slack


@pytest.mark.parametrize("positions", [[3, 1, 6], [1, 3, 10], [-1, 3, 6], [1, 1, 6]])
def test_a_payload_whose_positions_are_not_in_order_inside_the_vector_is_refused(positions):
    """A payload comes from another rank, or from a bundle: a position past the vector would
    crash whoever aggregates it."""
    compressor = Compressor(ratio=0.3)
    kept = compressor.compress(torch.randn(10))
    data = Payload(kept.values, torch.tensor(positions, dtype=torch.int32), kept.scales)
    with pytest.raises(CompressionError, match="positions"):
        compressor.parse(data.to_bytes(), 10)


def test_a_non_finite_scale_or_value_is_never_explained() -> None:
    x = torch.randn(512, generator=torch.Generator().manual_seed(6))
    quantized = Compressor(bits=8)
    payload = quantized.compress(x)
    scales = payload.scales.clone()
    scales[0] = float("nan")
    assert quantized.explains(Payload(payload.values, payload.indices, scales), x, 1e9) is not None
    dense = Compressor()
    values = x.clone()
    values[3] = float("inf")
    assert dense.explains(Payload(values, torch.empty(0), torch.empty(0)), x, 1e9) is not None


@pytest.mark.parametrize("compressor", [Compressor(), Compressor(ratio=0.1, bits=8)], ids=repr)
def test_a_payload_that_is_not_finite_is_refused(compressor: Compressor) -> None:
    """A rank's NaN would reach every member's weights through the aggregate."""
    x = torch.randn(300, generator=torch.Generator().manual_seed(7))
    x[5] = float("nan")
    with pytest.raises(CompressionError, match="finite"):
        compressor.parse(compressor.compress(x).to_bytes(), 300)
