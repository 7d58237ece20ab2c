"""Dropout masks hashed from where they fall: the same bits on any device, from no generator."""

from __future__ import annotations

import hashlib

import pytest
import torch
import torch.nn.functional as F

from node.engine import dropout as hashed
from node.engine import parse_spec, run_unit, unit_shard
from node.engine.dropout import CountedDropout, keep_mask

from .test_devices import TWO_DEVICES

CPU = torch.device("cpu")
needs_cuda = pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA device (none here)"
)


def test_a_mask_keeps_its_share_and_differs_by_key():
    shape = torch.Size([512, 1024])
    first = keep_mask(shape, 0.1, b"\x01" * 8, CPU)
    assert abs(first.float().mean().item() - 0.9) < 0.002
    other = keep_mask(shape, 0.1, b"\x02" * 8, CPU)
    # independent masks agree where both keep or both drop: 0.9^2 + 0.1^2 of the entries
    assert abs((first == other).float().mean().item() - 0.82) < 0.003
    # neighbouring entries are not alike either
    assert abs((first[:, 1:] == first[:, :-1]).float().mean().item() - 0.82) < 0.003
    assert torch.equal(first, keep_mask(shape, 0.1, b"\x01" * 8, CPU))


def test_a_mask_is_pinned():
    """Provider and verifier must hash the same masks: a change here is a change of every unit
    with dropout."""
    mask = keep_mask(torch.Size([37, 1001]), 0.1, b"zoo-mask", CPU)
    digest = hashlib.sha256(mask.numpy().tobytes()).hexdigest()
    assert digest == "cfd0567235ce708c757aa54d8bb4c5d6a6a6009e43063993bd78656946f5bfec"


def test_the_masks_follow_the_batch_and_the_call_not_the_generator():
    x = torch.ones(64, 64)
    torch.manual_seed(0)
    before = torch.get_rng_state()
    with CountedDropout(7, 0, 3, 1):
        a, b = F.dropout(x, 0.5), F.dropout(x, 0.5)
    assert torch.equal(torch.get_rng_state(), before)
    assert not torch.equal(a, b)  # the second call of the batch has its own mask
    with CountedDropout(7, 0, 3, 1):
        assert torch.equal(F.dropout(x, 0.5), a)
    with CountedDropout(7, 0, 3, 0):  # another micro-batch
        assert not torch.equal(F.dropout(x, 0.5), a)
    with CountedDropout(7, 0, 3, 1):  # eval and a rate of 0 leave the input as it is
        assert F.dropout(x, 0.5, training=False) is x and F.dropout(x, 0.0) is x
    assert set(a.unique().tolist()) == {0.0, 2.0}


@pytest.mark.parametrize(
    "case",
    [
        {"is_causal": True},
        {"attn_mask": torch.rand(6, 6) > 0.3},
        {"attn_mask": torch.randn(6, 6)},
        {"is_causal": True, "enable_gqa": True, "scale": 0.3},
    ],
    ids=["causal", "bool-mask", "float-mask", "gqa"],
)
def test_attention_with_dropout_is_the_softmax_attention_sdpa_computes(case, monkeypatch):
    """With every entry kept, the attention it computes to apply its mask is SDPA's."""
    q = torch.randn(2, 4, 6, 8)
    kv_heads = 2 if case.get("enable_gqa") else 4
    k, v = torch.randn(2, kv_heads, 6, 8), torch.randn(2, kv_heads, 6, 8)
    expected = F.scaled_dot_product_attention(q, k, v, **case)
    monkeypatch.setattr(hashed, "keep_mask", lambda shape, *_: torch.ones(shape, dtype=torch.bool))
    with CountedDropout(1, 0, 0, 0):
        got = F.scaled_dot_product_attention(q, k, v, dropout_p=0.2, **case)
    torch.testing.assert_close(got, expected / 0.8)


GPT2 = {"architecture": "hf", "family": "gpt2", "config": {"n_embd": 32, "n_layer": 1, "n_head": 2}}
LLAMA = {
    "architecture": "hf",
    "family": "llama",
    "config": {
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 1,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "attention_dropout": 0.1,
    },
}


@pytest.mark.parametrize(
    "model",
    [
        {**TWO_DEVICES["model"], "dropout": 0.2},
        GPT2 | {"attn_implementation": "sdpa"},  # gpt2's dropout is on by default
        GPT2 | {"attn_implementation": "eager"},
        LLAMA,
    ],
    ids=["gpt", "hf-gpt2-sdpa", "hf-gpt2-eager", "hf-llama"],
)
def test_a_unit_with_dropout_reruns_bit_for_bit_and_draws_nothing(model):
    """Every dropout of the built-in GPT and of the `transformers` families (on embeddings,
    residuals, attention weights, in SDPA or not) takes the hashed masks."""
    spec = parse_spec(
        {key: value for key, value in TWO_DEVICES.items() if key != "resources"} | {"model": model}
    )
    assert spec.model.has_dropout()
    shard = unit_shard(spec, 0)
    first = run_unit(spec, None, shard, 4, device="cpu")
    assert first.state_hash == run_unit(spec, None, shard, 4, device="cpu").state_hash
    # the generator saved with the state is where the model's init left it
    torch.manual_seed(spec.reproducibility.seed)
    spec.build_model()
    assert torch.equal(first.checkpoint.state["rng"]["torch"], torch.get_rng_state())


@needs_cuda
def test_on_a_gpu_the_masks_are_the_cpus_bits():
    shape = torch.Size([3, 1000, 77])
    for key in (b"\x00" * 8, b"zoo-mask", bytes(range(8))):
        gpu = keep_mask(shape, 0.1, key, torch.device("cuda"))
        assert torch.equal(gpu.cpu(), keep_mask(shape, 0.1, key, CPU))
