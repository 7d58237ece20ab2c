"""A real workload on the devnet, end to end: a dataset and a tokenizer pushed, a Llama trained on
them through the market, its result pushed as a model version naming the job, the version pulled
back into `transformers` with the logits of the committed final state, then fine-tuned by a
second job and pushed as a version whose lineage names its parent and that job."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from marketplace import catalog, jobs
from marketplace.chain.registry import Registry
from marketplace.devnet.accounts import devnet_account
from marketplace.folders import read_list
from marketplace.protocol.checkpoint import Checkpoint
from marketplace.protocol.terms import Kind
from node.engine import parse_spec

pytestmark = pytest.mark.slow

SPECS = Path(__file__).resolve().parents[2] / "node" / "specs"


def test_a_llama_trained_on_a_pushed_dataset_is_pushed_and_pulled_into_transformers(
    network, tmp_path
):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    ledger, user = network.ledger, devnet_account(1)
    registry = Registry(ledger.w3, ledger.deployment)
    with network.storage() as storage:
        dataset = catalog.push(
            registry, storage, user, Kind.DATASET, SPECS / "data" / "stories.jsonl",
            "zoo/stories", "CC0-1.0",
        )  # fmt: skip
        [corpus] = read_list(storage, dataset.cid).files
        tokenizer_cid = storage.add_file(SPECS / "data" / "stories-bpe.json")
        storage.pin(tokenizer_cid, replicas=min(3, len(storage.nodes)))

    spec = yaml.safe_load((SPECS / "llama-jsonl.yaml").read_text())
    spec["data"]["sources"] = [{"kind": "jsonl", "cid": corpus.cid, "field": "text"}]
    assert spec["data"]["tokenizer"]["cid"] == tokenizer_cid
    spec["training"] |= {"max_steps": 60, "warmup_steps": 5}
    spec["checkpoint"]["every"] = 30
    config = tmp_path / "llama.yaml"
    config.write_text(yaml.safe_dump(spec))

    job_id, result = train(network, config, tmp_path / "result")
    assert (result / "config.json").is_file() and (result / "tokenizer.json").is_file()

    with network.storage() as storage:
        model = catalog.push(
            registry, storage, user, Kind.MODEL, result, "zoo/stories-llama", "Apache-2.0",
            job_id=job_id,
        )  # fmt: skip
        assert (model.number, model.job_id) == (1, job_id)
        pulled = tmp_path / "pulled"
        catalog.pull(storage, registry.resolve(Kind.MODEL, "zoo/stories-llama@1"), pulled)
        (last,) = jobs.latest_units(ledger, job_id)
        final = Checkpoint.load(storage.cat(last["cid"]))
    assert final.state_hash() == bytes(last["stateHash"]).hex()

    engine = parse_spec(spec).build_model().eval()
    engine.load_state_dict(final.state["model"])
    loaded = AutoModelForCausalLM.from_pretrained(pulled).eval()
    tokens = AutoTokenizer.from_pretrained(pulled)("Once upon a time", return_tensors="pt")
    with torch.no_grad():
        assert torch.equal(loaded(**tokens).logits, engine(tokens["input_ids"])[0])

    spec["model"]["from"] = "zoo/stories-llama@1"
    spec["training"]["lr"] = 3.0e-4
    config.write_text(yaml.safe_dump(spec))
    tuned_job, tuned = train(network, config, tmp_path / "tuned")
    with network.storage() as storage:
        version = catalog.push(
            registry, storage, user, Kind.MODEL, tuned, "zoo/stories-llama", "Apache-2.0",
            parent=model.reference, job_id=tuned_job,
        )  # fmt: skip
    assert (version.number, version.parent, version.job_id) == (2, model.reference, tuned_job)
    pinned = parse_spec(ledger_spec(network, tuned_job))
    assert pinned.model.base.cid == model.cid  # train pinned the base every party loaded
    AutoModelForCausalLM.from_pretrained(tuned)


def train(network, config: Path, output: Path) -> tuple[int, Path]:
    """`zoo-compute train` as the user runs it; the job's id and its result's folder."""
    trained = subprocess.run(
        [sys.executable, "-m", "marketplace.cli", "train", "--config", str(config)]
        + ["--max-budget", "5000", "--output", str(output)],
        env=network.env(),
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert trained.returncode == 0, trained.stdout + trained.stderr
    return network.ledger.market.functions.jobCount().call(), output


def ledger_spec(network, job_id: int) -> str:
    with network.storage() as storage:
        return storage.cat(network.ledger.spec_cid(job_id)).decode()
