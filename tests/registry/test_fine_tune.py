"""Fine-tuning a registered model: `from: org/name@N` is pinned to the version's folder CID when the
job is submitted, and every unit 0 starts from those weights, bit for bit on every re-run."""

from __future__ import annotations

import pytest
import torch
import yaml

from marketplace.catalog import push
from marketplace.chain.errors import ChainError
from marketplace.chain.ledger import Ledger
from marketplace.devnet.accounts import devnet_account
from marketplace.jobs import resolve_base
from marketplace.protocol.hf import save_folder
from marketplace.protocol.terms import Kind
from node.engine import DataError, Shard, parse_spec, run_unit
from node.engine.base import load_base

CONFIG = {
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "tie_word_embeddings": True,
}
SPEC = {
    "model": {"architecture": "hf", "family": "llama", "config": CONFIG},
    "data": {"seq_len": 16, "sources": [{"kind": "synthetic", "generator": "arithmetic"}]},
    "training": {"lr": 1.0e-2, "batch_size": 4, "max_steps": 4, "eval_batches": 1},
    "checkpoint": {"every": 2},
    "reproducibility": {"seed": 3, "num_threads": 1},
}


def fine_tuning(name: str, config: dict = CONFIG) -> str:
    model = SPEC["model"] | {"config": config, "from": name}
    return yaml.safe_dump(SPEC | {"model": model})


@pytest.fixture
def base(registry, storage, tmp_path) -> dict[str, torch.Tensor]:
    """acme/base@1: the spec's model, trained elsewhere (here: initialised from another seed)."""
    spec = parse_spec(SPEC)
    torch.manual_seed(99)
    weights = spec.build_model().state_dict()
    save_folder(spec.model, 16, spec.vocab_size, weights, tmp_path / "base")
    push(registry, storage, devnet_account(1), Kind.MODEL, tmp_path / "base", "acme/base", "MIT")
    return weights


def test_a_fine_tuning_job_starts_from_the_registered_weights(
    base, w3, deployment, storage, registry
):
    ledger = Ledger(w3, deployment)
    spec = parse_spec(resolve_base(ledger, fine_tuning("acme/base@1")))
    assert spec.model.base.cid == registry.resolve(Kind.MODEL, "acme/base@1").cid

    model = spec.build_model()
    load_base(spec, model, storage)
    assert all(torch.equal(t, base[k]) for k, t in model.state_dict().items())

    first = run_unit(spec, None, Shard.of(spec, 0, 0, 4), 2, storage=storage)
    again = run_unit(spec, None, Shard.of(spec, 0, 0, 4), 2, storage=storage)
    fresh = run_unit(parse_spec(SPEC), None, Shard.of(spec, 0, 0, 4), 2)
    assert first.state_hash == again.state_hash != fresh.state_hash


def test_a_base_that_is_not_the_specs_model_or_is_unresolved_is_refused(
    base, w3, deployment, storage
):
    ledger = Ledger(w3, deployment)
    wider = parse_spec(
        resolve_base(ledger, fine_tuning("acme/base@1", CONFIG | {"hidden_size": 64}))
    )
    with pytest.raises(DataError, match=r"model.from \(acme/base@1\) is not this spec's model"):
        run_unit(wider, None, Shard.of(wider, 0, 0, 4), 2, storage=storage)
    unresolved = parse_spec(fine_tuning("acme/base@1"))
    with pytest.raises(DataError, match="`zoo-compute train` resolves it"):
        run_unit(unresolved, None, Shard.of(unresolved, 0, 0, 4), 2, storage=storage)
    with pytest.raises(ChainError):
        resolve_base(ledger, fine_tuning("acme/base@2"))
