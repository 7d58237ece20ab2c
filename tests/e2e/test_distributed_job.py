"""Group jobs across providers of the devnet: the group forms from the chain's assignment, every
rank commits its units (ddp steps or DiLoCo rounds), a rank whose machine vanishes is replaced
through the market, the verifiers re-run sampled units; the job settles, or a rank that sent
something else than its round gives is named and slashed."""

from __future__ import annotations

import json
import multiprocessing
from dataclasses import replace
from pathlib import Path

import pytest
import torch
import yaml

from marketplace import jobs
from marketplace.chain.deploy import ZEN
from marketplace.processes import free_port
from marketplace.protocol.checkpoint import state_hash
from marketplace.protocol.journey import Settlement
from marketplace.protocol.rank_bundle import load_rank_bundle, update_sha256
from marketplace.protocol.round_signatures import round_signer
from marketplace.protocol.terms import JobStatus
from marketplace.sdk import Client
from node.daemon.group_worker import rendezvous
from node.distributed.group import rank_trainer
from node.distributed.job import group_config, run_rank, unit_bundle
from node.distributed.rank_unit import unit_path
from node.distributed.signing import RoundSigning
from node.engine import load_spec, parse_spec

from .conftest import wait_for, wait_for_fee_claims

pytestmark = pytest.mark.slow

SPEC = Path(__file__).resolve().parents[2] / "node" / "specs" / "tiny-diloco-3.yaml"
DDP_SPEC = SPEC.with_name("tiny-ddp-3.yaml")
DOWNTIME, INCORRECT_COMPUTATION = 0, 1  # Staking's slash reasons
HOST = 0  # the slot whose provider hosts the group's board
ZERO_ADDRESS = "0x" + "0" * 40
CHEATER = 10  # an account of the devnet's mnemonic that nothing else on the devnet uses
ORDER = jobs.Order(
    max_budget=5_000 * ZEN, max_price=100 * ZEN, sample_rate_bps=10_000, checkpoint_interval=300
)  # every unit sampled


def committed_units(ledger, job_id: int) -> list[dict]:
    return [
        e["args"]
        for e in ledger.market.events.CheckpointCommitted().get_logs(
            from_block=ledger.deployment.deploy_block, argument_filters={"jobId": job_id}
        )
    ]


def results(ledger, job_id: int) -> list[dict]:
    return [
        e["args"]
        for e in ledger.verification.events.ResultPosted().get_logs(
            from_block=ledger.deployment.deploy_block, argument_filters={"jobId": job_id}
        )
    ]


def slashes(ledger, account: str) -> list[int]:
    logs = ledger.staking.events.Slashed().get_logs(
        from_block=ledger.deployment.deploy_block, argument_filters={"account": account}
    )
    return [log["args"]["reason"] for log in logs]


def settle_and_pay_out(network, job_id: int, gone: tuple[str, ...] = ()) -> Settlement:
    """Settle the job and wait until every payout of it has left the market (providers withdraw,
    verifiers claim their fees; but not the providers `gone`), so the balances later tests watch
    hold still."""
    ledger = network.ledger
    job = jobs.ChainJob(ledger, network.user, job_id)
    job.wait()
    settlement = job.settlement()
    verifiers = [a for n, a in network.state.accounts.items() if n.startswith("verifier")]
    wait_for_fee_claims(ledger, job_id, verifiers, timeout=60)
    payees = [
        p
        for p in [*ledger.market.functions.participants(job_id).call(), *verifiers]
        if p not in gone
    ]
    wait_for(lambda: all(ledger.owed(a) == 0 for a in payees), 120, "the payouts")
    return settlement


def logged(log: Path, line: str):
    return lambda: line in log.read_text()


def scaled(rank: int, update):
    """What the cheating rank sends instead of its pseudo-gradient."""
    return update * 10


def eval_loss(spec, weights: dict) -> float:
    """Held-out loss of a model's weights."""
    trainer, batches = rank_trainer(spec, 0)
    trainer.model.load_state_dict(weights)
    return trainer.evaluate(batches)


def quorum_spec() -> str:
    """The example group job with rounds that close after a deadline with 2 of the 3 ranks, so the
    group goes on while one rank is being replaced; 4 rounds."""
    raw = yaml.safe_load(SPEC.read_text())
    raw["training"]["max_steps"] = 80
    raw["distributed"] |= {"unit_deadline_s": 3, "quorum": 2}
    return yaml.safe_dump(raw)


def long_ddp_spec() -> str:
    """The example ddp job in 2 units of 30 steps: each rank commits its residual after 20
    steps inside a unit, where a verifier of another class would take it up."""
    raw = yaml.safe_load(DDP_SPEC.read_text())
    raw["checkpoint"]["every"] = 30
    return yaml.safe_dump(raw)


def test_a_ddp_job_commits_every_ranks_steps_verifies_and_settles(network, tmp_path):
    ledger = network.ledger
    text = long_ddp_spec()
    spec = parse_spec(text)
    with network.storage() as storage:
        job_id = jobs.submit(ledger, network.user, storage, text, ORDER)
        jobs.ChainJob(ledger, network.user, job_id).wait(
            until=JobStatus.RUNNING, auction_timeout=60
        )
        wait_for(
            lambda: ledger.market.functions.status(job_id).call() == JobStatus.COMPLETED,
            240,
            "every rank to commit its units",
        )
        units = {(u["slot"], u["index"]): u for u in committed_units(ledger, job_id)}
        assert sorted(units) == [(s, i) for s in range(3) for i in range(2)]
        # A unit is a rank's 30 steps: it pins what every rank sent at each of them and its
        # residual after 20, and commits the hash of its own payloads, back to back.
        bundle = load_rank_bundle(storage.cat(units[2, 1]["cid"]))
        assert (bundle.unit.rank, bundle.unit.trainer["progress"]["step"]) == (2, 30)
        assert [r.members for r in bundle.rounds] == [[0, 1, 2]] * 30
        assert bundle.payload == b"".join(r.payloads[2] for r in bundle.rounds)
        assert [r.shape for r in bundle.residuals] == [bundle.unit.residual.shape]
        # and each payload under its slot's provider's signature, over the job and the step
        holders = [units[s, 1]["provider"] for s in range(3)]
        assert all(
            round_signer(r.signatures[s], job_id, 30 + step, s, r.payloads[s]) == holders[s]
            for step, r in enumerate(bundle.rounds)
            for s in range(3)
        )
        assert bytes(units[2, 1]["stateHash"]).hex() == update_sha256(bundle.payload)
        assert settle_and_pay_out(network, job_id).payment > 0
        verdicts = results(ledger, job_id)
        assert verdicts and all(r["pass"] for r in verdicts)
        assert not any(
            INCORRECT_COMPUTATION in slashes(ledger, ledger.slot(job_id, s)["provider"])
            for s in range(3)
        )
        # Each unit was judged against the other ranks' records of the same steps.
        for verdict in verdicts:
            evidence = json.loads(storage.cat(verdict["evidenceCid"]))
            others = {s for s in range(3) if s != verdict["slot"]}
            assert {peer["slot"] for peer in evidence["peers"]} == others
            assert all(
                peer["cid"] == units[peer["slot"], verdict["index"]]["cid"]
                for peer in evidence["peers"]
            )

        # Every rank applied the same aggregates: all last units hold one model, the job's result.
        cid, digest, _ = jobs.fetch_weights(ledger, storage, job_id, tmp_path / "weights.pt")
        assert cid == units[0, 1]["cid"]
        first = load_rank_bundle(storage.cat(units[0, 0]["cid"])).unit.trainer["model"]
        trained = torch.load(tmp_path / "weights.pt", weights_only=True)
        assert state_hash(trained) == digest
        assert eval_loss(spec, trained) < eval_loss(spec, first) - 0.5


def test_a_diloco_job_replaces_its_dropped_host_through_the_market_verifies_and_settles(
    network, tmp_path
):
    """Rank 0's machine vanishes mid-job, and the group's board with it. The slot is re-auctioned;
    its successor takes the rank over from its last committed round and hosts a new board, where
    the others meet again from their own last committed rounds, going through the rounds the
    group committed as they were; the ledger blames none of them for the wait. (A rank other than
    the host is taken over while the others go on: tests/distributed/test_quorum.py.)"""
    ledger = network.ledger
    text = quorum_spec()
    spec = parse_spec(text)
    spare = network.devnet.add_provider()  # the fourth provider: one more than the group needs
    wait_for(
        lambda: ledger.staking_account(spare)["admitted"], 60, "the spare provider's admission"
    )
    order = replace(ORDER, checkpoint_interval=40)  # a rank silent this long is reported
    with network.storage() as storage:
        job_id = jobs.submit(ledger, network.user, storage, text, order)
        jobs.ChainJob(ledger, network.user, job_id).wait(
            until=JobStatus.RUNNING, auction_timeout=60
        )
        ranks = [ledger.slot(job_id, slot)["provider"] for slot in range(3)]
        assert len(set(ranks)) == 3, "each rank is a different provider"
        assert rendezvous(ledger, job_id)[0] == "127.0.0.1"

        # The host's machine vanishes after its first round, and the others' ranks stall with
        # its board.
        wait_for(lambda: ledger.slot(job_id, HOST)["unitsDone"] >= 1, 120, "its first round")
        network.kill(ranks[HOST])
        wait_for(lambda: DOWNTIME in slashes(ledger, ranks[HOST]), 120, "the downtime report")
        # The slot is re-auctioned; the one provider not in the group yet wins it, takes the rank
        # over from its last committed round and hosts the group again.
        wait_for(
            lambda: ledger.slot(job_id, HOST)["provider"] not in (ZERO_ADDRESS, ranks[HOST]),
            60,
            "the re-auction",
        )
        successor = ledger.slot(job_id, HOST)["provider"]
        assert successor not in ranks
        wait_for(
            lambda: ledger.market.functions.status(job_id).call() == JobStatus.COMPLETED,
            240,
            "every rank to commit its rounds",
        )
        units = committed_units(ledger, job_id)
        assert sorted({(u["slot"], u["index"]) for u in units}) == [
            (s, i) for s in range(3) for i in range(4)
        ]
        assert {u["provider"] for u in units if u["slot"] == HOST} == {ranks[HOST], successor}
        others = [rank for slot, rank in enumerate(ranks) if slot != HOST]
        assert not any(DOWNTIME in slashes(ledger, rank) for rank in others)
        assert settle_and_pay_out(network, job_id, gone=(ranks[HOST],)).payment > 0
        # Every unit is sampled, and verifiers re-ran rounds from their pinned inputs, the
        # successor's too: those re-run within the devnet's short verification window passed.
        verdicts = results(ledger, job_id)
        assert verdicts and all(r["pass"] for r in verdicts)
        assert not any(INCORRECT_COMPUTATION in slashes(ledger, p) for p in [*ranks, successor])
        # Verifiers knew the slot's providers, each from the unit before its first, the dropped
        # host until two units past the last the group had committed when it was removed: a
        # payload either signed within that stands in the others' records of the rounds, and
        # every honest record kept within it (every verdict above passed).
        committer = {(u["slot"], u["index"]): u["provider"] for u in units}
        took_over = min(u["index"] for u in units if u["provider"] == successor)
        events = ledger.market.events
        (removal,) = events.ProviderRemoved().get_logs(
            from_block=0, argument_filters={"jobId": job_id}
        )
        before = [
            e["args"]["index"]
            for e in events.CheckpointCommitted().get_logs(
                from_block=0, argument_filters={"jobId": job_id}
            )
            if e["blockNumber"] < removal["blockNumber"]
        ]
        tenures = {
            ranks[HOST].lower(): [0, max(before, default=-1) + 2],
            successor.lower(): [took_over - 1, None],
        }
        assert {a: list(t) for a, t in ledger.slot_tenures(job_id, 3)[HOST].items()} == tenures
        for verdict in verdicts:
            known = json.loads(storage.cat(verdict["evidenceCid"]))["slot_tenures"][HOST]
            assert known[ranks[HOST].lower()][0] == 0
            if committer[verdict["slot"], verdict["index"]] == successor:
                assert known == tenures
        market = ledger.market.functions
        assert market.earned(job_id, ranks[HOST]).call() > 0, (
            "the dropped host keeps its first round's pay"
        )
        assert ledger.owed(ranks[HOST]) > 0  # waiting for it to withdraw
        assert market.earned(job_id, successor).call() > 0

        # The group trained one model, which every rank's last unit holds, the successor's too: the
        # job's result, well below the loss of the weights the first round started from.
        cid, digest, _ = jobs.fetch_weights(ledger, storage, job_id, tmp_path / "weights.pt")
        assert cid == next(u["cid"] for u in units if (u["slot"], u["index"]) == (0, 3))
        first_cid = next(u["cid"] for u in units if (u["slot"], u["index"]) == (0, 0))
        first = load_rank_bundle(storage.cat(first_cid)).unit.trainer["model"]
        trained = torch.load(tmp_path / "weights.pt", weights_only=True)
        assert state_hash(trained) == digest
        assert eval_loss(spec, trained) < eval_loss(spec, first) - 0.5

    # The devnet's gateway hands out the same model: the SDK checks every rank's last round too.
    settings = network.settings
    with Client(
        network.state.gateway_url, ipfs_api=settings.ipfs_api, ipfs_replicas=settings.ipfs_replicas
    ) as client:
        wait_for(
            lambda: (
                [s["index"] for s in client.request("GET", f"/jobs/{job_id}/result")["slots"]]
                == [3] * 3
            ),
            60,
            "the gateway to index every rank's last round",
        )
        result = client.handle(job_id).result(tmp_path / "from-gateway.pt")
    assert (result.cid, result.state_hash) == (cid, "0x" + digest)
    assert state_hash(torch.load(result.path, weights_only=True)) == digest


def test_a_rank_sending_a_scaled_update_is_named_and_slashed(network, tmp_path):
    ledger = network.ledger
    spec = load_spec(SPEC)
    [cheater] = network.enlist(CHEATER, endpoint=f"tcp://127.0.0.1:{free_port()}")
    with network.storage() as storage:
        # The cheater underbids two honest providers and wins slot 0: it is rank 0 and hosts the
        # group. Nothing is sampled: the cheater is checked only because the honest ranks flag it.
        job_id = jobs.submit(
            ledger, network.user, storage, SPEC.read_text(), replace(ORDER, sample_rate_bps=0)
        )
        network.take((cheater, network.underbid(cheater, job_id)))

        # It trains with the group but sends ten times its pseudo-gradient, signed with its
        # key (the group's store logs in only the slots' holders), and commits that.
        holders = tuple(ledger.slot(job_id, slot)["provider"] for slot in range(3))
        signing = RoundSigning(job_id, holders, {0: bytes(cheater.key)})
        config = replace(group_config(spec), updates_dir=str(tmp_path), signing=signing)
        rank = multiprocessing.get_context("spawn").Process(
            target=run_rank,
            args=(
                spec,
                config,
                0,
                *rendezvous(ledger, job_id),
                str(tmp_path / "report.json"),
                scaled,
            ),
        )
        rank.start()
        try:
            wait_for(lambda: unit_path(tmp_path, 1, 0).exists(), 120, "the cheater's first round")
            commitment, bundle = unit_bundle(spec, config, tmp_path, 0, 0, storage.add_bytes)
            cid = storage.add_bytes(bundle)
            storage.pin(cid, replicas=3)
            ledger.commit_checkpoint(cheater, job_id, 0, cid, bytes.fromhex(commitment))
            wait_for(
                lambda: INCORRECT_COMPUTATION in slashes(ledger, cheater.address),
                180,
                "the cheater's slash",
            )
        finally:
            rank.terminate()
            rank.join()
        # Rank 0 is gone, so the group cannot go on: the user stops the job while its slot is
        # re-auctioned, and the honest ranks let their group go.
        ledger.send(ledger.market.functions.cancelJob(job_id), network.user)
        settlement = settle_and_pay_out(network, job_id)

    assert any(r["pass"] is False for r in results(ledger, job_id) if r["slot"] == 0)
    honest = [ledger.slot(job_id, slot)["provider"] for slot in (1, 2)]
    # Centered clipping excluded rank 0's round, and the lowest rank it kept flagged it.
    flags = ledger.verification.events.UnitFlagged().get_logs(
        from_block=ledger.deployment.deploy_block, argument_filters={"jobId": job_id}
    )
    assert [(f["args"]["slot"], f["args"]["index"], f["args"]["by"]) for f in flags] == [
        (0, 0, honest[0])
    ]
    assert not any(INCORRECT_COMPUTATION in slashes(ledger, provider) for provider in honest)
    for slot, provider in zip((1, 2), honest, strict=True):
        log = Path(network.provider_service(provider).log)
        wait_for(logged(log, f"job={job_id} slot={slot}: finished"), 30, f"rank {slot} to let go")
    assert ledger.market.functions.earned(job_id, cheater.address).call() == 0
    assert settlement.payment == sum(
        ledger.market.functions.earned(job_id, p).call() for p in honest
    )
