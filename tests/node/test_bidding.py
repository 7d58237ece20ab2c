"""The bidder's decisions on their own, over a real journal: a unit's pay is known before a bid is
sealed, a sealed bid that could not be revealed is expired so its collateral comes back, and a
job whose unit would take more memory or time than this machine's limits allow, or would not fit
its checkpoint interval here, gets no bid (the node's own spec checks, on specs it reads)."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import yaml
from daemon_support import SPEC

from marketplace.chain.deploy import ZEN
from marketplace.protocol.units import units_per_node
from node.daemon.bidding import Bidder
from node.daemon.journal import Auction, Bid, Journal
from node.daemon.pricing import Pricing
from node.daemon.worker import Specs
from node.engine import UnitLimits, parse_spec
from node.engine.cost import unit_cost

ADDRESS = "0x" + "ab" * 20
SPEC_CID = "QmSpecSpecSpecSpecSpecSpecSpecSpecSpecSpecSpecSp"


class FakeLedger:
    """The ledger reads and calls the bidder makes, answered from a dict."""

    def __init__(self, job: dict, free_stake: int = 10_000 * ZEN):
        self._job = job
        self._free_stake = free_stake

    def job(self, job_id: int) -> dict:
        return self._job

    def spec_cid(self, job_id: int) -> str:
        return SPEC_CID

    def free_stake(self, address: str) -> int:
        return self._free_stake

    def bid_commitment_of(self, price: int, salt: bytes, bidder: str, job_id: int) -> bytes:
        return b"c" * 32

    def commit_bid_call(self, job_id: int, commitment: bytes) -> tuple:
        return ("commitBid", job_id)

    def expire_bid_call(self, job_id: int, round_: int, bidder: str) -> tuple:
        return ("expireBid", job_id, round_, bidder)

    def close_auction_call(self, job_id: int) -> tuple:
        return ("closeAuction", job_id)


class FakeOutbox:
    def __init__(self, journal: Journal):
        self.journal = journal
        self.sent_calls: list[tuple[str, tuple]] = []

    def send(self, key: str, fn: tuple) -> dict:
        self.sent_calls.append((key, fn))
        self.journal.add_outgoing(key, "0x" + "00" * 32, b"raw")
        self.journal.finish_outgoing(key)
        return {"blockNumber": 1}

    def sent(self, key: str) -> bool:
        outgoing = self.journal.outgoing(key)
        return outgoing is not None and outgoing.done


def bidder(tmp_path, job: dict) -> tuple[Bidder, Journal, FakeOutbox]:
    journal = Journal(tmp_path / "journal.sqlite3")
    outbox = FakeOutbox(journal)
    account = SimpleNamespace(address=ADDRESS)
    return (
        Bidder(FakeLedger(job), account, journal, outbox, Pricing(ZEN), lambda *_: None),
        journal,
        outbox,
    )


def job(**fields) -> dict:
    return {
        "round": 1,
        "openSlots": 1,
        "maxPrice": 100 * ZEN,
        "unitGpuSeconds": 60,
        "collateral": 500 * ZEN,
        "checkpointInterval": 300,
    } | fields


def test_a_job_whose_unit_pays_nothing_is_skipped(tmp_path):
    # 1 wei per GPU-hour at most: a one-second unit pays 0 wei at any price the floor allows.
    b, journal, outbox = bidder(tmp_path, job(maxPrice=ZEN, unitGpuSeconds=1))
    b.pricing = Pricing(1)
    journal.add_auction(Auction(1, 1, 100, 200))
    b.tick(50)
    assert journal.open_auctions() == []
    assert outbox.sent_calls == []


def test_an_unrevealed_bid_is_expired_once_its_round_ends(tmp_path):
    b, journal, outbox = bidder(tmp_path, job(round=2))
    journal.add_auction(Auction(1, 1, 100, 200))
    journal.add_bid(Bid(1, 1, 2 * ZEN, b"s" * 32, b"c" * 32))
    b.tick(300)
    assert outbox.sent_calls == [("expire:1:1", ("expireBid", 1, 1, ADDRESS))]
    assert journal.open_auctions() == []


def test_an_unrevealed_bid_is_expired_before_closing_the_round(tmp_path):
    b, journal, outbox = bidder(tmp_path, job())
    journal.add_auction(Auction(1, 1, 100, 200))
    journal.add_bid(Bid(1, 1, 2 * ZEN, b"s" * 32, b"c" * 32))
    journal.add_outgoing("bid:1:1", "0x" + "22" * 32, b"raw")
    journal.finish_outgoing("bid:1:1")
    b.tick(201)
    assert [key for key, _ in outbox.sent_calls] == ["expire:1:1", "close:1:1"]


def test_a_revealed_bid_is_left_alone(tmp_path):
    b, journal, outbox = bidder(tmp_path, job(openSlots=0))
    journal.add_auction(Auction(1, 1, 100, 200))
    journal.add_bid(Bid(1, 1, 2 * ZEN, b"s" * 32, b"c" * 32))
    journal.add_outgoing("reveal:1:1", "0x" + "11" * 32, b"raw")
    journal.finish_outgoing("reveal:1:1")
    b.tick(300)
    assert outbox.sent_calls == []


def test_a_job_with_a_deadline_tighter_than_the_node_keeps_is_skipped(tmp_path):
    """checkpointInterval = 1: any provider that wins it is reported for downtime at once."""
    b, journal, outbox = bidder(tmp_path, job(checkpointInterval=1))
    journal.add_auction(Auction(1, 1, 100, 200))
    b.tick(50)
    assert journal.open_auctions() == [] and outbox.sent_calls == []


def test_a_job_whose_collateral_exceeds_the_free_stake_is_skipped(tmp_path):
    b, journal, outbox = bidder(tmp_path, job(collateral=600 * ZEN))
    b.ledger = FakeLedger(b.ledger.job(1), free_stake=500 * ZEN)
    journal.add_auction(Auction(1, 1, 100, 200))
    b.tick(50)
    assert journal.open_auctions() == [] and outbox.sent_calls == []


def test_a_busy_node_bids_only_once_its_slot_is_over(tmp_path):
    """It trains one slot at a time: while it holds one (or has a bid out elsewhere) it does not
    bid, and the auction waits for the slot to end while its bid window is open."""
    b, journal, outbox = bidder(tmp_path, job())
    journal.hold_slot(7, 0)
    journal.add_auction(Auction(1, 1, 100, 200))
    b.tick(50)
    assert outbox.sent_calls == [] and journal.bid(1, 1) is None
    assert journal.open_auctions() == [Auction(1, 1, 100, 200)]

    journal.end_slot(7, 0, "done")
    b.tick(60)
    assert [key for key, _ in outbox.sent_calls] == ["bid:1:1"]


def test_a_bid_out_in_one_auction_holds_off_a_second(tmp_path):
    b, journal, outbox = bidder(tmp_path, job())
    journal.add_auction(Auction(1, 1, 100, 200))
    journal.add_auction(Auction(2, 1, 100, 200))
    b.tick(50)
    assert [key for key, _ in outbox.sent_calls] == ["bid:1:1"]
    assert journal.bid(2, 1) is None


class SpecStore:
    """The one spec the job names, as IPFS serves it."""

    def __init__(self, text: str):
        self.text = text

    def cat(self, cid: str, max_bytes: int) -> bytes:
        assert cid == SPEC_CID
        return self.text.encode()[:max_bytes]


def spec_text(**sections) -> str:
    """The node tests' spec with whole sections' fields replaced."""
    document = yaml.safe_load(SPEC.read_text())
    for name, fields in sections.items():
        document[name] |= fields
    return yaml.safe_dump(document)


# A model of 1.6 million parameters on 2,048-token batches: tens of MiB and about a second a step
# on a CPU core, where the node tests' spec takes a few MiB and milliseconds.
WIDE = {
    "model": {"n_layer": 2, "n_embd": 256, "n_head": 4},
    "data": {"seq_len": 128},
    "training": {"batch_size": 16, "max_steps": 400},
}
# 400 such steps in one unit: minutes on a CPU core
SLOW = WIDE | {"checkpoint": {"every": 400}}


def bid_on(tmp_path, text: str, limits: UnitLimits, checkpoint_interval: int = 300) -> bool:
    """Whether a bidder whose node checks jobs with `limits` bids on a job of spec `text`."""
    tmp_path.mkdir()
    spec = parse_spec(text)
    terms = job(unitsPerNode=units_per_node(spec), checkpointInterval=checkpoint_interval)
    b, journal, outbox = bidder(tmp_path, terms)
    b.check_job = Specs(b.ledger, SpecStore(text), limits).check_job
    journal.add_auction(Auction(1, 1, 100, 200))
    b.tick(50)
    journal.close()
    return [key for key, _ in outbox.sent_calls] == ["bid:1:1"]


def test_a_job_over_the_memory_limit_gets_no_bid(tmp_path, caplog):
    wide = spec_text(**WIDE)
    limit = unit_cost(parse_spec(wide)).memory_bytes // 2
    assert bid_on(tmp_path / "small", SPEC.read_text(), UnitLimits(max_memory_bytes=limit))
    with caplog.at_level(logging.INFO, "node.daemon.bidding"):
        assert not bid_on(tmp_path / "wide", wide, UnitLimits(max_memory_bytes=limit))
    (refusal,) = [r.getMessage() for r in caplog.records if "not bidding" in r.getMessage()]
    assert f"MiB of memory per unit (at most {limit >> 20:,})" in refusal


def test_a_job_over_the_seconds_per_unit_limit_gets_no_bid(tmp_path, caplog):
    """A unit of 400 wide steps takes minutes on a CPU core; the node allows 10 s."""
    slow = spec_text(**SLOW)
    limits = UnitLimits(max_unit_seconds=10)
    assert bid_on(tmp_path / "small", SPEC.read_text(), limits, checkpoint_interval=10**6)
    with caplog.at_level(logging.INFO, "node.daemon.bidding"):
        assert not bid_on(tmp_path / "slow", slow, limits, checkpoint_interval=10**6)
    (refusal,) = [r.getMessage() for r in caplog.records if "not bidding" in r.getMessage()]
    assert "s per unit on this machine (at most 10)" in refusal


def test_a_job_whose_unit_would_not_fit_its_checkpoint_interval_gets_no_bid(tmp_path, caplog):
    """The same unit of minutes under the default limits, but a checkpoint due every 60 s: the
    node would miss its deadlines and be slashed, so it does not bid; with an interval of days
    it does."""
    slow = spec_text(**SLOW)
    with caplog.at_level(logging.INFO, "node.daemon.bidding"):
        assert not bid_on(tmp_path / "tight", slow, UnitLimits(), checkpoint_interval=60)
    (refusal,) = [r.getMessage() for r in caplog.records if "not bidding" in r.getMessage()]
    assert "a checkpoint every 60 s leaves less than the 3x margin" in refusal
    assert bid_on(tmp_path / "loose", slow, UnitLimits(), checkpoint_interval=10**6)
