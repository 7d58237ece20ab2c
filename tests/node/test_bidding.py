"""The bidder's decisions on their own, over a real journal: a unit's pay is known before a bid is
sealed, and a sealed bid that could not be revealed is expired so its collateral comes back."""

from __future__ import annotations

from types import SimpleNamespace

from marketplace.chain.deploy import ZEN
from node.daemon.bidding import Bidder
from node.daemon.journal import Auction, Bid, Journal
from node.daemon.pricing import Pricing

ADDRESS = "0x" + "ab" * 20


class FakeLedger:
    """The ledger reads and calls the bidder makes, answered from a dict."""

    def __init__(self, job: dict, free_stake: int = 10_000 * ZEN):
        self._job = job
        self._free_stake = free_stake

    def job(self, job_id: int) -> dict:
        return self._job

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
