"""The ledger on the session's Anvil, one embedded IPFS node, wallets for the CLI, and a tiny
Hugging Face model saved the way users save theirs."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from marketplace.chain.deploy import Deployment, deploy
from marketplace.chain.ledger import Ledger
from marketplace.chain.registry import Registry
from marketplace.config import Settings
from marketplace.devnet.accounts import devnet_account
from marketplace.devnet.scripted_job import escrow_job
from marketplace.storage import Storage
from marketplace.wallet import import_key

PASSWORD = "correct horse battery staple"
os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="session")
def deployment(w3, tmp_path_factory) -> Deployment:
    return deploy(w3, devnet_account(0), manifest=tmp_path_factory.mktemp("deploy") / "31337.json")


@pytest.fixture
def registry(w3, deployment) -> Iterator[Registry]:
    """The deployed registry; every test starts from the freshly deployed state."""
    snapshot = w3.provider.make_request("evm_snapshot", [])["result"]
    yield Registry(w3, deployment)
    w3.provider.make_request("evm_revert", [snapshot])


@pytest.fixture
def job_id(w3, deployment, registry) -> int:
    """A job escrowed on the market by alice (devnet account 1): what a version's lineage names."""
    return escrow_job(Ledger(w3, deployment), devnet_account(0), devnet_account(1))


@pytest.fixture
def storage(ipfs_api) -> Iterator[Storage]:
    with Storage(ipfs_api, []) as client:
        yield client


@pytest.fixture(scope="session")
def keystores(tmp_path_factory) -> dict[str, Path]:
    """Encrypted keystores of two devnet accounts: `alice` publishes, `bob` tries to."""
    stores = {}
    for who, index in (("alice", 1), ("bob", 2)):
        settings = Settings(home=tmp_path_factory.mktemp(who))
        _, stores[who] = import_key(settings, devnet_account(index).key.hex(), PASSWORD)
    return stores


@pytest.fixture
def cli_env(anvil, deployment, ipfs_api, keystores, tmp_path, registry) -> dict[str, str]:
    """What `zoo-compute models|datasets` reads, as alice; set ZOO_WALLET to be bob."""
    return {
        "ZOO_RPC_URL": anvil.rpc_url,
        "ZOO_MANIFEST": str(deployment.write(tmp_path / "manifest.json")),
        "ZOO_IPFS_API": ipfs_api,
        "ZOO_IPFS_REPLICAS": "[]",
        "ZOO_HOME": str(tmp_path / "home"),
        "ZOO_WALLET": str(keystores["alice"]),
        "ZOO_WALLET_PASSWORD": PASSWORD,
        "ZOO_GATEWAY_URL": "",
    }


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Path:
    """A Llama-style causal LM of a few thousand parameters built from its config, with a BPE
    tokenizer trained on a few lines, saved by save_pretrained: a Hugging Face model folder."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("tiny-llama")
    bpe = Tokenizer(models.BPE(unk_token="<unk>"))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<unk>", "<s>", "</s>"])
    bpe.train_from_iterator(["the registry names models and datasets"] * 20, trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe, unk_token="<unk>", bos_token="<s>", eos_token="</s>"
    )
    config = LlamaConfig(
        vocab_size=bpe.get_vocab_size(),
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=32,
    )
    LlamaForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder
