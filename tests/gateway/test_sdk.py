"""The SDK against a served gateway and its indexer: a job trained by scripted providers, followed, settled and
its weights checked against the chain, in the blocking and async forms."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest
import torch

from marketplace import AsyncClient, Client
from marketplace.chain.deploy import ZEN
from marketplace.chain.ledger import Ledger
from marketplace.chain.scripted_job import Cast
from marketplace.sdk import GatewayError
from marketplace.storage import Storage
from node.engine import Checkpoint

pytestmark = pytest.mark.anvil
SPEC = Path(__file__).parents[2] / "node/specs/tiny.yaml"
UNITS = 6  # the tiny spec's units per node
GPU_SECONDS = 599


def checkpoint(index: int) -> Checkpoint:
    """A small checkpoint whose weights and loss say which unit made it."""
    return Checkpoint({"model": {"weight": torch.full((3,), float(index))}},
                      {"metrics": {"start_step": 50 * index, "end_step": 50 * (index + 1), "loss": 3.0 - index / 4}})


def provide(ledger: Ledger, cast: Cast, storage: Storage, job_id: int) -> None:
    """The providers' side, scripted: bid, win, commit every unit's real checkpoint, let the window pass."""
    market = ledger.market.functions
    bids = [(p, ledger.commit_bid(p, job_id, price)) for p, price in zip(cast.providers, (60 * ZEN, 70 * ZEN, 80 * ZEN))]
    ledger.advance_time(market.bidWindow().call() + 1)
    for provider, bid in bids:
        ledger.reveal_bid(provider, bid)
    ledger.advance_time(market.revealWindow().call() + 1)
    ledger.close_auction(cast.governor, job_id)
    winner = next(p for p in cast.providers if p.address == ledger.slot(job_id, 0)["provider"])
    for index in range(UNITS):
        ledger.advance_time(GPU_SECONDS)
        unit = checkpoint(index)
        cid = storage.add_bytes(unit.to_bytes())
        ledger.commit_checkpoint(winner, job_id, 0, GPU_SECONDS, cid, bytes.fromhex(unit.state_hash()))
    ledger.advance_time(ledger.verification.functions.verificationWindow().call() + 1)


def test_train_wait_result_with_the_blocking_client(served_gateway, ledger, cast, ipfs_api, tmp_path):
    held = ledger.balance(cast.user.address)
    with Client(served_gateway, wallet=cast.user, ipfs_api=ipfs_api, ipfs_replicas=[], poll_interval=0.2) as client:
        job = client.train(config=SPEC, max_budget=500, max_price=100, sample_rate_bps=0, checkpoint_interval=3600)
        assert ledger.job(job.id)["budget"] == 500 * ZEN
        with Storage(ipfs_api) as storage:
            providers = threading.Thread(target=provide, args=(ledger, cast, storage, job.id))
            providers.start()
            seen: list[dict] = []
            try:
                final = job.wait(on_progress=seen.append)
            finally:
                providers.join()
        assert final["status"] == "settled"
        assert (seen[-1]["units_done"], seen[-1]["units_total"], seen[-1]["loss"]) == (UNITS, UNITS, 3.0 - 5 / 4)
        payment = UNITS * (GPU_SECONDS * int(final["clearing_price"]) // 3600)
        assert int(final["settlement"]["payment"]) == payment
        assert ledger.balance(cast.user.address) == held - payment

        result = job.result(tmp_path / "weights.pt")
        assert torch.equal(torch.load(result.path)["weight"], torch.full((3,), 5.0))
        assert result.state_hash == "0x" + checkpoint(UNITS - 1).state_hash()
        shown = client.request("GET", f"/jobs/{job.id}/result")
        assert (shown["final"], shown["state_verified"]) == (True, True)
        assert [u["end_step"] for u in client.metrics(job.id)["units"]] == [50 * (i + 1) for i in range(UNITS)]

        client.post_logs(job.id, ["queued", "done"])
        assert [line["line"] for line in job.logs(follow=True)] == ["queued", "done"]
        with pytest.raises(GatewayError, match="neither the user nor a provider"), \
                Client(served_gateway, wallet=cast.verifiers[0]) as stranger:
            stranger.post_logs(job.id, ["spam"])

    async def follow_async() -> dict:
        async with AsyncClient(served_gateway) as aclient:
            return await aclient.handle(job.id).wait()

    assert asyncio.run(follow_async())["settlement"] == final["settlement"]


def test_refusals_are_one_message(served_gateway, cast, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(SPEC.read_text().replace("n_head: 4", "n_head: 5"))
    with Client(served_gateway, wallet=cast.user) as client:
        with pytest.raises(GatewayError, match="model.n_head") as refused:
            client.train(config=bad, max_budget=500)
        assert refused.value.status == 400
        with pytest.raises(GatewayError, match="below the reserve"):
            client.train(config=SPEC, max_budget=0.001)
        with pytest.raises(GatewayError, match="not indexed"):
            client.job(10**9)
    with pytest.raises(GatewayError, match="needs a wallet"), Client(served_gateway) as anonymous:
        anonymous.train(config=SPEC, max_budget=500)
