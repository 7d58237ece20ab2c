"""The built-in architectures and the registry that lets new ones plug in."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from node.engine import ARCHITECTURES, ModelSpec, parse_spec, register
from node.engine.models import GPTSpec, MLPSpec

from .conftest import SMALL


@pytest.mark.parametrize(
    "spec",
    [
        GPTSpec(architecture="gpt", n_layer=2, n_embd=32, n_head=4),
        MLPSpec(architecture="mlp", context=4),
    ],
)
def test_forward_shapes_loss_and_causality(spec):
    torch.manual_seed(0)
    model = spec.build(seq_len=16)
    idx = torch.randint(256, (2, 16))
    logits, loss = model(idx, idx)
    assert logits.shape == (2, 16, 256)
    assert abs(loss.item() - math.log(256)) < 0.5  # near-uniform predictions at init
    changed = idx.clone()
    changed[:, 10] = (changed[:, 10] + 1) % 256
    after, _ = model(changed)
    assert torch.equal(logits[:, :10], after[:, :10])  # the future does not leak backwards
    assert not torch.equal(logits[:, 10:], after[:, 10:])


def test_same_seed_same_initial_weights():
    spec = GPTSpec(architecture="gpt", n_layer=1, n_embd=32, n_head=2)
    torch.manual_seed(3)
    a = spec.build(8).state_dict()
    torch.manual_seed(3)
    b = spec.build(8).state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_a_registered_architecture_is_accepted_by_specs(monkeypatch):
    class BigramSpec(ModelSpec):
        scale: float = 1.0  # logit multiplier

        def build(self, seq_len: int) -> nn.Module:
            return nn.Embedding(256, 256)

    monkeypatch.delitem(ARCHITECTURES, "bigram", raising=False)
    register("bigram")(BigramSpec)
    spec = parse_spec({**SMALL, "model": {"architecture": "bigram", "scale": 2.0}})
    assert isinstance(spec.model, BigramSpec) and spec.model.scale == 2.0
    assert spec.model_dump()["model"] == {"architecture": "bigram", "scale": 2.0}
    monkeypatch.delitem(ARCHITECTURES, "bigram")


def test_registering_a_name_twice_is_refused():
    with pytest.raises(ValueError, match="already registered"):
        register("gpt")(GPTSpec)
