"""A job's result fetched from IPFS: a Hugging Face model comes out as a folder `transformers`
loads, with the logits of the committed state and the job's tokenizer; any other model as its
weights."""

from __future__ import annotations

import json

import torch
import yaml

from marketplace.protocol import tokenizer
from marketplace.protocol.checkpoint import Checkpoint
from marketplace.results import LastUnit, write_result
from marketplace.storage import Storage
from node.engine import LocalData, Shard, parse_spec, run_unit

SPEC = {
    "model": {
        "architecture": "hf",
        "family": "llama",
        "config": {
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "tie_word_embeddings": True,
        },
    },
    "data": {"seq_len": 32, "sources": [{"kind": "synthetic", "generator": "arithmetic"}]},
    "training": {"lr": 1.0e-2, "batch_size": 4, "max_steps": 4, "eval_batches": 1},
    "checkpoint": {"every": 2},
    "reproducibility": {"seed": 7, "num_threads": 2},
}


def test_a_hf_jobs_result_is_a_folder_transformers_loads_with_the_committed_logits(
    ipfs_nodes, tmp_path
):
    from transformers import AutoModelForCausalLM

    spec = parse_spec(SPEC)
    checkpoint, digest, _ = run_unit(spec, None, Shard.of(spec, 0, 0, 4), 2)
    with Storage(ipfs_nodes[0].multiaddr, []) as storage:
        spec_cid = storage.add_bytes(yaml.safe_dump(SPEC).encode())
        unit_cid = storage.add_bytes(checkpoint.to_bytes())
        last = [LastUnit(0, 1, unit_cid, digest)]
        cid, state_hash, folder = write_result(
            storage, 3, last, 1, 2, tmp_path / "job-3.pt", spec_cid
        )
        # a spec this install cannot read: the weights as they are
        junk = storage.add_bytes(b"model: {architecture: plugin}")
        _, _, weights = write_result(storage, 3, last, 1, 2, tmp_path / "weights.pt", junk)
    assert (cid, state_hash, folder) == (unit_cid, digest, tmp_path / "job-3")
    assert weights == tmp_path / "weights.pt" and weights.is_file()
    loaded = AutoModelForCausalLM.from_pretrained(folder).eval()
    engine = spec.build_model().eval()
    engine.load_state_dict(Checkpoint.load(checkpoint.to_bytes()).state["model"])
    idx = torch.randint(256, (2, 32))
    with torch.no_grad():
        assert torch.equal(loaded(input_ids=idx).logits, engine(idx)[0])


def test_a_tokenized_jobs_folder_carries_its_tokenizer(ipfs_nodes, tmp_path):
    from transformers import AutoTokenizer

    texts = [f"story {i}: the fox jumped over the {i % 7} lazy dogs again." for i in range(300)]
    (tmp_path / "corpus.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    trained = tokenizer.train("bpe", 320, texts)
    with Storage(ipfs_nodes[0].multiaddr, []) as storage:
        tokenizer_cid = storage.add_bytes(trained.to_str().encode())
        raw = SPEC | {
            "data": {
                "seq_len": 32,
                "sources": [{"kind": "jsonl", "path": str(tmp_path / "corpus.jsonl")}],
                "tokenizer": {"cid": tokenizer_cid, "vocab_size": trained.get_vocab_size()},
            }
        }
        spec = parse_spec(raw)
        checkpoint, digest, _ = run_unit(
            spec,
            None,
            Shard.of(spec, 0, 0, 4),
            2,
            storage=storage,
            local_data=LocalData((tmp_path,)),
        )
        spec_cid = storage.add_bytes(yaml.safe_dump(raw).encode())
        unit_cid = storage.add_bytes(checkpoint.to_bytes())
        _, _, folder = write_result(
            storage, 4, [LastUnit(0, 1, unit_cid, digest)], 1, 2, tmp_path / "job-4", spec_cid
        )
    loaded = AutoTokenizer.from_pretrained(folder)
    assert loaded.encode(texts[5]) == trained.encode(texts[5]).ids
    assert loaded.eos_token == tokenizer.END_OF_TEXT
