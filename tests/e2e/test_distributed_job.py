"""A DiLoCo job across three providers of the devnet: the group forms from the chain's assignment,
every rank commits its rounds, the verifiers re-run sampled rounds, and the job settles."""

from __future__ import annotations

from pathlib import Path

import pytest

from marketplace import jobs
from marketplace.chain.deploy import ZEN
from marketplace.chain.ledger import JobStatus
from node.daemon.group_worker import rendezvous
from node.distributed.group import rank_trainer
from node.engine import load_spec
from node.work import load_rank_bundle

from .conftest import wait_for

pytestmark = pytest.mark.slow

SPEC = Path(__file__).resolve().parents[2] / "node" / "specs" / "tiny-diloco-3.yaml"
INCORRECT_COMPUTATION = 1


def committed_units(ledger, job_id: int) -> list[dict]:
    return [e["args"] for e in ledger.market.events.CheckpointCommitted().get_logs(
        from_block=ledger.deployment.deploy_block, argument_filters={"jobId": job_id})]


def results(ledger, job_id: int) -> list[dict]:
    return [e["args"] for e in ledger.verification.events.ResultPosted().get_logs(
        from_block=ledger.deployment.deploy_block, argument_filters={"jobId": job_id})]


def eval_loss(spec, bundle: bytes) -> float:
    """Held-out loss of the global weights a rank bundle starts its round from."""
    unit, _ = load_rank_bundle(bundle)
    trainer, batches = rank_trainer(spec, unit.rank)
    trainer.load(unit.trainer)
    return trainer.evaluate(batches)


def test_diloco_job_trains_across_providers_verifies_and_settles(network):
    ledger = network.ledger
    spec = load_spec(SPEC)
    with network.storage() as storage:
        order = jobs.Order(max_budget=5_000 * ZEN, max_price=100 * ZEN, sample_rate_bps=10_000,
                           checkpoint_interval=300)
        job_id = jobs.submit(ledger, network.user, storage, SPEC.read_text(), order)
        jobs.wait_for_auction(ledger, network.user, job_id, timeout=60)
        ranks = [ledger.slot(job_id, slot)["provider"] for slot in range(3)]
        assert len(set(ranks)) == 3, "each rank is a different provider"
        assert rendezvous(ledger, job_id)[0] == "127.0.0.1"

        wait_for(lambda: ledger.market.functions.status(job_id).call() == JobStatus.COMPLETED, 240,
                 "every rank to commit its rounds")
        units = committed_units(ledger, job_id)
        assert sorted((u["slot"], u["index"]) for u in units) == [(s, i) for s in range(3) for i in range(3)]
        # Every unit is sampled; a verifier re-runs each rank's round from its pinned inputs.
        wait_for(lambda: len(results(ledger, job_id)) == len(units), 180, "every round's verdict")
        assert all(r["pass"] for r in results(ledger, job_id))
        for provider in ranks:
            slashes = ledger.staking.events.Slashed().get_logs(
                from_block=ledger.deployment.deploy_block, argument_filters={"account": provider})
            assert INCORRECT_COMPUTATION not in [s["args"]["reason"] for s in slashes]
        settlement = jobs.settle(ledger, network.user, job_id)
        assert settlement.payment > 0

        # The group trained one model: the weights of the last round start below the first's loss.
        first, last = (next(u["cid"] for u in units if (u["slot"], u["index"]) == (0, i)) for i in (0, 2))
        assert eval_loss(spec, storage.cat(last)) < eval_loss(spec, storage.cat(first)) - 0.5
