"""The indexer on a real Anvil, read back through the HTTP API: to the wei, across restarts and
reorgs."""

from __future__ import annotations

import pytest
from sqlalchemy import func, select

from marketplace.chain.anvil import advance_time, mine, reorganize
from marketplace.devnet.scripted_job import Scenario, cid_of_bytes, run_job
from marketplace.gateway import db
from marketplace.gateway.indexer import Indexer

pytestmark = pytest.mark.anvil
FEE_BPS = 500


def index_all(indexer: Indexer) -> None:
    while indexer.step():
        pass


def counts(sessions) -> dict[str, int]:
    with sessions() as session:
        return {
            t.__tablename__: session.scalar(select(func.count()).select_from(t))
            for t in db.EVENT_TABLES
        }


def test_job_matches_chain_to_the_wei(ledger, cast, story, slash_amount, indexer, client):
    index_all(indexer)
    job_id = story.job_id
    job = client.get(f"/jobs/{job_id}").json()
    chain_job = ledger.job(job_id)

    assert job["status"] == "settled"
    assert job["user"] == cast.user.address
    assert job["spec_cid"] == chain_job["specCid"]
    assert int(job["budget"]) == chain_job["budget"]
    assert int(job["clearing_price"]) == story.clearing_price
    reveals = {b["provider"]: int(b["price"]) for b in job["bids"] if b["price"] is not None}
    assert reveals == {p.address: price for p, price in zip(cast.providers, Scenario().bids)}
    assert sum(b["commitment"] is not None for b in job["bids"]) == len(cast.providers)
    assert sorted(s["provider"] for s in job["slots"]) == sorted(story.winners)

    units = client.get(f"/jobs/{job_id}/units").json()
    assert [
        (u["slot"], u["index"], u["cid"], u["gpu_seconds"], int(u["amount"])) for u in units
    ] == [(u.slot, u.index, u.cid, u.gpu_seconds, u.amount) for u in story.units]
    assert [u["state_hash"] for u in units] == ["0x" + u.state_hash.hex() for u in story.units]
    verified = {
        (u["slot"], u["index"], r["account"]) for u in units for r in u["results"] if r["passed"]
    }
    assert verified == set(story.verified)
    assert client.get(f"/jobs/{job_id}/units?limit=1&offset=1").json() == units[1:2]
    assert client.get(f"/jobs/{job_id}/units?limit=201").status_code == 422

    settlement = job["settlement"]
    payment = sum(u.amount for u in story.units)
    assert int(settlement["payment"]) == payment == story.settlement["payment"]
    assert (
        int(settlement["fee"])
        == sum(u.amount for u in story.units if u.slot == 0) * FEE_BPS // 10_000 * 2
    )
    assert int(settlement["fee"]) == story.settlement["fee"]
    assert int(settlement["refund"]) == chain_job["budget"] - payment == story.settlement["refund"]
    assert settlement["tx_hash"] == story.settlement["tx"]
    assert client.get("/settlements").json() == [settlement]

    loser = next(p.address for p in cast.providers if p.address not in story.winners)
    for provider in cast.providers:
        shown = client.get(f"/providers/{provider.address.lower()}").json()
        on_chain = ledger.staking_account(provider.address)
        assert (int(shown["staked"]), int(shown["locked"]), int(shown["unbonding"])) == (
            on_chain["staked"],
            on_chain["locked"],
            on_chain["unbonding"],
        )
        # The loser won only the second job, which it abandoned.
        assert shown["jobs"] == ([job_id + 1] if provider.address == loser else [job_id])
    (slash,) = client.get(f"/providers/{loser}").json()["slashes"]
    assert (slash["reason"], int(slash["amount"]), slash["reporter"]) == (
        "Downtime",
        slash_amount,
        cast.verifiers[1].address,
    )
    assert int(slash["reporter_share"]) == slash_amount * 1_000 // 10_000

    stats = client.get("/stats").json()
    assert int(stats["treasury_balance"]) == ledger.balance(ledger.treasury.address)
    assert stats["jobs"] == {"settled": 1, "running": 1}
    assert stats["providers"] == 3
    assert stats["indexed_block"] == ledger.w3.eth.block_number

    assert (
        client.get("/jobs", params={"status": "settled", "provider": story.winners[0]}).json()[0][
            "job_id"
        ]
        == job_id
    )
    assert client.get("/jobs", params={"status": "open"}).json() == []
    assert client.get("/jobs", params={"user": cast.providers[0].address}).json() == []
    assert client.get("/jobs", params={"offset": 2}).json() == []


def test_restart_mid_way_leaves_no_gap_and_no_duplicate(
    ledger, story, sessions, tmp_path, monkeypatch
):
    head = ledger.w3.eth.block_number
    middle = (ledger.deployment.deploy_block + head) // 2
    Indexer(ledger.w3, ledger.deployment, sessions, confirmations=head - middle).step()
    with sessions() as session:
        assert session.get(db.IndexerState, 1).next_block == middle + 1

    crashing = Indexer(ledger.w3, ledger.deployment, sessions)
    rows = crashing._rows
    built = []

    def rpc_down_midway(event):  # after the logs are read and some rows built, before the commit
        if len(built) == 3:
            raise ConnectionError("rpc down")
        built.append(event)
        return rows(event)

    monkeypatch.setattr(crashing, "_rows", rpc_down_midway)
    with pytest.raises(ConnectionError):
        crashing.step()
    assert len(built) == 3
    monkeypatch.undo()
    with sessions() as session:
        assert session.get(db.IndexerState, 1).next_block == middle + 1

    index_all(Indexer(ledger.w3, ledger.deployment, sessions))
    reference = db.open_database(f"sqlite:///{tmp_path / 'reference.sqlite3'}")
    index_all(Indexer(ledger.w3, ledger.deployment, reference))
    assert counts(sessions) == counts(reference)
    assert counts(sessions)["units"] == len(story.units)


def test_an_event_the_index_cannot_hold_is_logged_and_passed_over(
    ledger, story, sessions, monkeypatch, caplog
):
    indexer = Indexer(ledger.w3, ledger.deployment, sessions)
    rows = indexer._rows
    broken = []

    def chokes_on_the_first_checkpoint(event):
        if event["event"] == "CheckpointCommitted" and not broken:
            broken.append(event)
            raise TypeError("unhashable type: 'list'")
        return rows(event)

    monkeypatch.setattr(indexer, "_rows", chokes_on_the_first_checkpoint)
    index_all(indexer)

    assert len(broken) == 1
    assert counts(sessions)["units"] == len(story.units) - 1
    assert f"CheckpointCommitted in block {broken[0]['blockNumber']}" in caplog.text
    assert "not indexed" in caplog.text


def test_reorg_rolls_back_orphaned_rows(ledger, cast, story, indexer, client):
    """Anvil's own reorg replaces the indexed blocks of a transfer of 7 with a branch holding a
    transfer of 11: the index drops the orphaned row and holds the kept branch's."""
    w3 = ledger.w3
    index_all(indexer)
    snapshot = w3.provider.make_request("evm_snapshot", [])["result"]
    try:
        orphaned = ledger.transfer(cast.user, ledger.treasury.address, 7)
        mine(ledger.w3, 2)
        index_all(indexer)
        before = int(client.get("/stats").json()["treasury_balance"])
        assert before == ledger.balance(ledger.treasury.address)

        kept = {
            "from": cast.verifiers[0].address,
            "to": ledger.zen.address,
            "data": ledger.zen.encode_abi("transfer", [ledger.treasury.address, 11]),
            "gas": hex(200_000),
        }
        reorganize(w3, orphaned["blockNumber"], [kept])
        mine(ledger.w3, 1)
        index_all(indexer)
        stats = client.get("/stats").json()
        assert (
            int(stats["treasury_balance"])
            == ledger.balance(ledger.treasury.address)
            == before - 7 + 11
        )
        assert stats["indexed_block"] == w3.eth.block_number
        with indexer.sessions() as session:
            incoming = session.scalars(
                select(db.TreasuryTransfer.amount).where(
                    db.TreasuryTransfer.counterparty.in_(
                        [cast.user.address, cast.verifiers[0].address]
                    )
                )
            ).all()
        assert incoming == [11]
    finally:
        w3.provider.make_request("evm_revert", [snapshot])


def test_bad_requests_are_4xx_with_a_message(story, indexer, client):
    index_all(indexer)
    assert client.get(f"/jobs/{story.job_id + 1000}").status_code == 404
    assert "not indexed" in client.get(f"/jobs/{story.job_id + 1000}/units").json()["detail"]
    assert client.get("/providers/0x" + "0" * 40).status_code == 404
    for path in (
        "/jobs/-1",
        "/jobs/abc",
        f"/jobs/{2**64}",
        "/jobs?limit=0",
        "/jobs?limit=100000",
        "/jobs?status=lost",
        "/jobs?user=0x12",
        "/providers/0xzz",
        "/providers?tier=-1",
        "/settlements?offset=-5",
    ):
        response = client.get(path)
        assert response.status_code == 422, path
        assert response.json()["detail"]
    assert client.get("/health").json()["status"] == "ok"


def test_a_unit_rejected_on_review_voids_itself_and_the_units_after_it(
    ledger, cast, story, indexer, client
):
    """Both units of a job (its cast onboarded by the story) are failed and the first failure is
    confirmed: the slot rolls back to its start, so the gateway shows both units void, counts
    none done and has no result."""
    w3 = ledger.w3
    snapshot = w3.provider.make_request("evm_snapshot", [])["result"]
    try:
        scenario = Scenario(units=2, sample_rate_bps=10_000, verdict=False)
        outcome = run_job(ledger, cast, scenario, cid_of_bytes(b"rejected"), settle=False)
        job_id, first = outcome.job_id, outcome.units[0]
        challenger = ledger.verification_result(job_id, 0, 0)["first"]
        second = next(v for v in cast.verifiers if v.address != challenger)
        now = w3.eth.get_block("latest")["timestamp"]
        [turn, *_] = ledger.dispute_turns(first, second.address, now)
        if turn > now:
            advance_time(w3, turn - now)
        ledger.resolve_dispute(second, first, False, cid_of_bytes(b"confirmed"))
        index_all(indexer)

        units = client.get(f"/jobs/{job_id}/units").json()
        assert [(u["index"], u["void"]) for u in units] == [(0, True), (1, True)]
        metrics = client.get(f"/jobs/{job_id}/metrics").json()
        assert (metrics["units_done"], metrics["accrued"], metrics["units"]) == (0, "0", [])
        assert client.get(f"/jobs/{job_id}/result").status_code == 404
        settled = client.get(f"/jobs/{story.job_id}/units").json()
        assert not any(u["void"] for u in settled)
    finally:
        w3.provider.make_request("evm_revert", [snapshot])
