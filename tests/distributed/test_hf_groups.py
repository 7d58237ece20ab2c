"""A Hugging Face model trains in a group as the built-in GPT does: DiLoCo and ddp ranks hold
transformers' Llama, and a verifier re-runs one rank's unit bit for bit."""

from __future__ import annotations

from pathlib import Path

import pytest
from tiny_job import tiny_spec

from marketplace.protocol.rank_bundle import RankUnit, update_sha256
from node.distributed.ddp import train_ddp
from node.distributed.diloco import DilocoConfig, train_diloco
from node.distributed.exchange import recorded_round, sent_in, update_path
from node.distributed.group import GroupConfig
from node.distributed.job import run_rank_unit
from node.distributed.rank_unit import unit_path
from node.engine import load_spec, parse_spec

UNITS, STEPS = 2, 3


def llama_spec():
    """node/specs/llama-tiny.yaml's model on tiny_job's data and schedule."""
    raw = tiny_spec(UNITS * STEPS, STEPS).model_dump(mode="json")
    raw["model"] = load_spec("node/specs/llama-tiny.yaml").model_dump(mode="json")["model"]
    return parse_spec(raw)


@pytest.mark.slow
def test_diloco_ranks_train_a_llama_and_a_verifier_reproduces_one(tmp_path: Path) -> None:
    spec = llama_spec()
    assert type(spec.build_model().hf).__name__ == "LlamaForCausalLM"
    config = DilocoConfig(2, updates_dir=str(tmp_path))
    result = train_diloco(spec, config)
    unit = RankUnit.load(unit_path(tmp_path, 1, 1))  # round 1 starts from the group's weights
    rerun = run_rank_unit(spec, config, unit)
    assert rerun.sha256 == result.commitments[1][1]
    assert rerun.payload == update_path(tmp_path, 1, 1).read_bytes()


@pytest.mark.slow
def test_ddp_ranks_train_a_llama_and_a_verifier_reproduces_one(tmp_path: Path) -> None:
    spec = llama_spec()
    config = GroupConfig(2, updates_dir=str(tmp_path))
    result = train_ddp(spec, config)
    rounds = config.unit_rounds(spec, 1)
    recorded = [recorded_round(tmp_path, r) for r in rounds]
    assert [update_sha256(r.payloads[0]) for r in recorded] == result.commitments[0][STEPS:]
    rerun = run_rank_unit(spec, config, RankUnit.load(unit_path(tmp_path, 1, 0)), recorded)
    assert rerun.payload == sent_in(tmp_path, rounds, 0)
