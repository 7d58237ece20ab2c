"""Hugging Face causal LMs in job specs: validated configs, the engine's contract, bit-identical
units and resumes, and the trained model as a folder `transformers` loads."""

from __future__ import annotations

import math

import pytest
import torch

from marketplace.protocol.checkpoint import Checkpoint
from marketplace.protocol.hf import save_folder
from node.engine import Shard, SpecError, parse_spec, run_unit
from node.engine.limits import parameter_count

from .conftest import SMALL

LLAMA = {
    "architecture": "hf",
    "family": "llama",
    "config": {
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
    },
}
GPT2 = {
    "architecture": "hf",
    "family": "gpt2",
    "config": {"n_embd": 64, "n_layer": 2, "n_head": 4, "embd_pdrop": 0.1},
}


def hf_spec(model, **config):
    return parse_spec({**SMALL, "model": {**model, "config": {**model["config"], **config}}})


@pytest.mark.parametrize("model", [LLAMA, GPT2], ids=["llama", "gpt2"])
def test_a_family_trains_under_the_engines_contract(model):
    spec = hf_spec(model)
    torch.manual_seed(0)
    module = spec.build_model().eval()
    idx = torch.randint(256, (2, 32))
    logits, loss = module(idx, torch.randint(256, (2, 32)))
    assert logits.shape == (2, 32, 256)
    assert abs(loss.item() - math.log(256)) < 0.5  # near-uniform predictions at init
    changed = idx.clone()
    changed[:, 20] = (changed[:, 20] + 1) % 256
    after, _ = module(changed)
    assert torch.equal(logits[:, :20], after[:, :20])  # the future does not leak backwards
    assert not torch.equal(logits[:, 20:], after[:, 20:])
    with torch.device("meta"):
        counted = spec.build_model()
    assert parameter_count(spec) == sum(p.numel() for p in counted.parameters())
    assert parameter_count(spec) == sum(p.numel() for p in module.parameters())


@pytest.mark.parametrize("model", [LLAMA, GPT2], ids=["llama", "gpt2"])
def test_units_rerun_and_resume_bit_identically(model):
    spec = hf_spec(model)
    shard = Shard.of(spec, 0, 0, 40)
    half, _, first = run_unit(spec, None, shard, 4)
    again = run_unit(spec, None, shard, 4)
    assert again.state_hash == half.state_hash()
    resumed = run_unit(spec, Checkpoint.load(half.to_bytes()), shard, 4)
    whole = run_unit(spec, None, shard, 8)
    assert resumed.state_hash == whole.state_hash
    assert resumed.metrics["losses"][-1] < first["losses"][0]


def test_the_trained_model_loads_into_transformers_with_the_same_logits(tmp_path):
    from transformers import AutoModelForCausalLM

    spec = hf_spec(LLAMA, tie_word_embeddings=True)
    checkpoint, _, _ = run_unit(spec, None, Shard.of(spec, 0, 0, 40), 3)
    weights = Checkpoint.load(checkpoint.to_bytes()).state["model"]
    save_folder(spec.model, spec.data.seq_len, spec.vocab_size, weights, tmp_path / "model")
    assert {p.name for p in (tmp_path / "model").iterdir()} >= {"config.json", "model.safetensors"}
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "model").eval()
    engine = spec.build_model().eval()
    engine.load_state_dict(weights)
    idx = torch.randint(256, (2, 32))
    with torch.no_grad():
        assert torch.equal(loaded(input_ids=idx).logits, engine(idx)[0])


@pytest.mark.parametrize(
    ("model", "field", "message"),
    [
        (
            {**LLAMA, "family": "bert"},
            "model.family",
            "unknown family 'bert'; allowed: gpt2, llama",
        ),
        (
            {**LLAMA, "config": {**LLAMA["config"], "auto_map": {"AutoModel": "x.Y"}}},
            "model.config",
            "unknown key 'auto_map' for family llama",
        ),
        (
            {**LLAMA, "config": {**LLAMA["config"], "trust_remote_code": True}},
            "model.config",
            "unknown key 'trust_remote_code'",
        ),
        (
            {**LLAMA, "config": {**LLAMA["config"], "_name_or_path": "meta-llama/Llama-3"}},
            "model.config",
            "unknown key '_name_or_path'",
        ),
        (
            {**GPT2, "config": {"n_embd": 64, "n_layer": 2, "n_head": 5}},
            "model.config",
            "n_head (5) must divide n_embd (64)",
        ),
        (
            {**LLAMA, "config": {**LLAMA["config"], "num_hidden_layers": 5000}},
            "model.config",
            "num_hidden_layers must be at most 1024",
        ),
        (
            {**LLAMA, "config": {**LLAMA["config"], "hidden_act": "os.system"}},
            "model.config",
            "hidden_act must be one of",
        ),
        (
            {**LLAMA, "config": {"hidden_size": 64}},
            "model.config",
            "num_hidden_layers is required",
        ),
        (
            {**LLAMA, "config": {**LLAMA["config"], "max_position_embeddings": 16}},
            "model.config.max_position_embeddings",
            "must be at least data.seq_len (32)",
        ),
    ],
)
def test_a_config_that_does_not_fit_is_a_spec_error_naming_the_field(model, field, message):
    with pytest.raises(SpecError) as caught:
        parse_spec({**SMALL, "model": model})
    assert [f for f, _ in caught.value.errors] == [field]
    assert message in str(caught.value)


def test_a_config_the_library_refuses_is_a_spec_error_when_built():
    with pytest.raises(SpecError, match="model.config.vocab_size: must be the job's vocabulary"):
        hf_spec(LLAMA, vocab_size=1000).build_model()
    with pytest.raises(SpecError, match="model.config.eos_token_id: must be below"):
        hf_spec(LLAMA, eos_token_id=300).build_model()


def test_a_checkpoint_fits_the_bound_its_readers_put_on_it():
    """A tied weight is stored once for each of its names, and the bound counts it so."""
    from node.engine.limits import checkpoint_bytes

    spec = hf_spec(GPT2)  # GPT-2 ties its embeddings to its head
    checkpoint, _, _ = run_unit(spec, None, Shard.of(spec, 0, 0, 40), 1)
    tensors = [t for part in ("model", "optimizer") for t in _tensors(checkpoint.state[part])]
    # the weights and the moments; AdamW's step counts go in the room left for the rest
    stored = sum(t.numel() * t.element_size() for t in tensors if t.dim())
    assert stored <= checkpoint_bytes(spec) - (64 << 20)
    assert len(checkpoint.to_bytes()) <= checkpoint_bytes(spec)


def _tensors(node):
    if isinstance(node, torch.Tensor):
        yield node
    elif isinstance(node, dict):
        for value in node.values():
            yield from _tensors(value)
    elif isinstance(node, (list, tuple)):
        for value in node:
            yield from _tensors(value)
