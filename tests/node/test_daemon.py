"""The provider daemon against a real chain, real IPFS nodes and the real engine."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from daemon_support import PASSWORD, SPEC, skip_past, wait_for

from marketplace.chain.deploy import ZEN
from marketplace.chain.ledger import JobRequest, Ledger
from marketplace.cli import main
from marketplace.devnet.scripted_job import Cast
from marketplace.protocol.checkpoint import Checkpoint
from marketplace.protocol.terms import Tier
from marketplace.protocol.units import unit_steps, units_per_node
from marketplace.storage import Storage
from node.daemon.journal import Journal
from node.engine import load_spec, run_unit, unit_shard

pytestmark = [pytest.mark.slow, pytest.mark.anvil]

RIVAL_BIDS = (50 * ZEN, 60 * ZEN)  # the daemon asks 1.2 ZEN (floor 1, margin 20%): it wins


@pytest.fixture(scope="module")
def expected_hashes() -> list[str]:
    """The state hash of each unit of slot 0, trained here in one go."""
    spec = load_spec(SPEC)
    checkpoint, hashes = None, []
    for index in range(units_per_node(spec)):
        checkpoint, state_hash, _ = run_unit(
            spec, checkpoint, unit_shard(spec, 0), unit_steps(spec, index)
        )
        hashes.append(state_hash)
    return hashes


def create_job(ledger: Ledger, cast: Cast, storage: Storage, spec: bytes | None = None) -> int:
    """A one-slot job of three units of `spec` (by default the node tests' own)."""
    request = JobRequest(
        spec_cid=storage.add_bytes(SPEC.read_bytes() if spec is None else spec),
        tier=Tier.COMMUNITY,
        nodes=1,
        units_per_node=3,
        checkpoint_interval=300,
        sample_rate_bps=0,
        max_price=100 * ZEN,
        budget=1_000 * ZEN,
    )
    return ledger.create_job(cast.user, request)


def bids_in(ledger: Ledger, cast: Cast, job_id: int, provider: str) -> list:
    """The rivals' sealed bids, once the daemon's own is committed too; the rivals' to reveal."""
    bids = [
        (p, ledger.commit_bid(p, job_id, price)) for p, price in zip(cast.providers, RIVAL_BIDS)
    ]
    wait_for(
        lambda: events(ledger, "BidCommitted", job_id, provider=provider), 30, "the daemon's bid"
    )
    return bids


def reveals_in(ledger: Ledger, job_id: int, bids: list, provider: str) -> None:
    """With every bid in, the bid window is skipped; the rivals reveal, and once the daemon has
    too, the reveal window is skipped: the daemon still has to notice each deadline and act."""
    job = ledger.job(job_id)
    skip_past(ledger, job["bidDeadline"])
    for rival, bid in bids:
        ledger.reveal_bid(rival, bid)
    wait_for(
        lambda: events(ledger, "BidRevealed", job_id, provider=provider), 30, "the daemon's reveal"
    )
    skip_past(ledger, job["revealDeadline"])


def events(ledger: Ledger, name: str, job_id: int, **filters) -> list:
    return getattr(ledger.market.events, name)().get_logs(
        from_block=ledger.deployment.deploy_block, argument_filters={"jobId": job_id, **filters}
    )


def wait_paid(ledger: Ledger, job_id: int, provider: str) -> None:
    """Until the job is completed, then (its verification window skipped) settled, and the
    provider withdrew its pay."""
    wait_for(lambda: events(ledger, "JobCompleted", job_id), 120, f"job {job_id} completed")
    window = ledger.verification.functions.verificationWindow().call()
    skip_past(ledger, ledger.job(job_id)["completedAt"] + window)
    wait_for(lambda: events(ledger, "JobSettled", job_id), 30, f"job {job_id} settled")
    settled_block = events(ledger, "JobSettled", job_id)[0]["blockNumber"]
    wait_for(
        lambda: ledger.market.events.Withdrawn().get_logs(
            from_block=settled_block, argument_filters={"account": provider}
        ),
        30,
        "the withdrawal",
    )


def assert_units(
    ledger: Ledger, storage: Storage, job_id: int, provider: str, expected: list[str]
) -> None:
    """Each unit committed once, in order, by the provider; each CID holds a checkpoint whose
    state hash is the one committed, and the one a straight run of the engine gives."""
    units = events(ledger, "CheckpointCommitted", job_id)
    assert [u["args"]["index"] for u in units] == list(range(len(expected)))
    for unit, want in zip(units, expected):
        args = unit["args"]
        assert args["provider"] == provider
        assert args["stateHash"].hex() == want
        assert Checkpoint.load(storage.cat(args["cid"])).state_hash() == want


def test_daemon_wins_trains_settles_and_stops_on_sigterm(
    ledger, cast, onboarded, start_daemon, storage, expected_hashes, node_env, tmp_path
):
    daemon_home = tmp_path / "home"  # where start_daemon keeps the journal
    daemon = start_daemon()
    balance = ledger.balance(onboarded.address)
    job_id = create_job(ledger, cast, storage)
    bids = bids_in(ledger, cast, job_id, onboarded.address)
    reveals_in(ledger, job_id, bids, onboarded.address)

    wait_paid(ledger, job_id, onboarded.address)
    (cleared,) = events(ledger, "AuctionCleared", job_id)
    assert cleared["args"]["clearingPrice"] == 12 * ZEN // 10
    assert [e["args"]["provider"] for e in events(ledger, "SlotAssigned", job_id)] == [
        onboarded.address
    ]
    assert_units(ledger, storage, job_id, onboarded.address, expected_hashes)
    assert ledger.owed(onboarded.address) == 0
    assert ledger.balance(onboarded.address) > balance

    assert daemon.terminate() == 0
    assert "stopped" in daemon.output
    assert PASSWORD not in daemon.output

    env = node_env.with_home(daemon_home)
    status = CliRunner().invoke(main, ["node", "status"], env=env)
    assert status.exit_code == 0, status.output
    assert "admitted" in status.output and "yes" in status.output and "none" in status.output
    withdrawn = CliRunner().invoke(main, ["node", "withdraw"], env=env)
    assert withdrawn.output.strip() == "nothing owed"


def uncommitted_unit(ledger: Ledger, journal: Journal, job_id: int) -> int | None:
    """A unit past the first that the daemon trained and journaled but has not committed yet:
    in a pipeline, its predecessor's commit may still be in flight too."""
    done = ledger.slot(job_id, 0)["unitsDone"]
    for index in (done, done + 1):
        if index and journal.unit(job_id, 0, index) is not None:
            return index
    return None


def test_daemon_killed_after_bid_and_mid_pipeline_recovers(
    ledger, cast, onboarded, start_daemon, storage, expected_hashes, tmp_path
):
    me = onboarded.address
    daemon = start_daemon()
    job_id = create_job(ledger, cast, storage)
    bids = bids_in(ledger, cast, job_id, me)
    daemon.kill()

    daemon = start_daemon()
    reveals_in(ledger, job_id, bids, me)
    journal = Journal(tmp_path / "home" / "node" / "journal.sqlite3")  # the daemons' own
    index = wait_for(
        lambda: uncommitted_unit(ledger, journal, job_id),
        90,
        "a unit trained ahead of the chain",
        interval=0.05,
    )
    daemon.kill()
    journal.close()

    logged = len(daemon.output)
    daemon = start_daemon()
    wait_paid(ledger, job_id, me)
    assert len(events(ledger, "BidCommitted", job_id, provider=me)) == 1
    assert len(events(ledger, "BidRevealed", job_id, provider=me)) == 1
    # Every unit once, in order; the one journaled before the kill committed from its record.
    assert_units(ledger, storage, job_id, me, expected_hashes)
    assert f"unit={index}: trained" not in daemon.output[logged:]
    assert daemon.terminate() == 0
