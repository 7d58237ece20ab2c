"""A group job's round judged from its rank bundle: an honest rank passes, any other is named."""

from __future__ import annotations

from pathlib import Path

import pytest

from node.distributed.group import rank_trainer
from node.distributed.rank_unit import RankUnit, run_rank_unit, update_sha256
from node.engine import parse_spec
from node.work import diloco_config, rank_bundle
from verifier.rank_recompute import judge_rank

SPEC_TEXT = (
    Path(__file__).resolve().parents[2] / "node" / "specs" / "tiny-diloco-3.yaml"
).read_text()


@pytest.fixture(scope="module")
def spec():
    """The e2e spec with 2-step rounds, so a re-run takes a fraction of a second."""
    return parse_spec(SPEC_TEXT.replace("inner_steps: 20", "inner_steps: 2"))


@pytest.fixture(scope="module")
def honest(spec):
    """Rank 1's first round, its inputs as the rank saves them and the payload it sends."""
    trainer, _ = rank_trainer(spec, 1)
    unit = RankUnit(1, 0, trainer.state(), None)
    return unit, run_rank_unit(spec, diloco_config(spec), unit).payload


def test_an_honest_round_reproduces_its_commitment(spec, honest):
    unit, payload = honest
    verdict = judge_rank(spec, 1, 0, update_sha256(payload), rank_bundle(unit, payload))
    assert verdict.passed is True
    assert verdict.recomputed_state_hash == update_sha256(payload)


def test_a_rank_that_sent_another_update_is_named(spec, honest):
    unit, _ = honest
    lazy = RankUnit(1, 0, unit.trainer, unit.residual)
    trainer, _ = rank_trainer(spec, 1)
    trainer.load(unit.trainer)
    # It skips a local step of the round and sends the update from there.
    trainer.apply(trainer.forward_backward()[0])
    cheat = run_rank_unit(spec, diloco_config(spec), RankUnit(1, 0, trainer.state(), None)).payload
    verdict = judge_rank(spec, 1, 0, update_sha256(cheat), rank_bundle(lazy, cheat))
    assert verdict.passed is False
    assert verdict.reason == "the re-run round sends a different payload"


def test_a_bundle_for_another_rank_or_payload_fails(spec, honest):
    unit, payload = honest
    committed = update_sha256(payload)
    assert judge_rank(spec, 2, 0, committed, rank_bundle(unit, payload)).passed is False
    other = judge_rank(spec, 1, 0, committed, rank_bundle(unit, payload + b"\x00"))
    assert other.reason == "the pinned payload is not the committed one"
    assert judge_rank(spec, 1, 0, committed, b"junk").passed is False


def test_a_single_node_spec_cannot_be_judged_as_a_rank(honest):
    single = parse_spec(SPEC_TEXT.split("distributed:")[0] + "reproducibility: {seed: 1}\n")
    unit, payload = honest
    verdict = judge_rank(single, 1, 0, update_sha256(payload), rank_bundle(unit, payload))
    assert verdict.passed is None
