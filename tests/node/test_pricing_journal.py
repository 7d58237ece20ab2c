"""Pricing and the journal on their own: the bid never below cost, records that survive a reopen."""

from __future__ import annotations

import pytest

from marketplace.chain.deploy import ZEN
from marketplace.chain.events import BlockMark
from node.daemon.journal import Auction, Bid, Journal, Unit
from node.daemon.onboarding import attestation_of
from node.daemon.pricing import PriceBelowFloor, Pricing


def test_quote_is_floor_plus_margin_trimmed_to_the_cap():
    pricing = Pricing(2 * ZEN, margin_bps=2_500)
    assert pricing.quote(100 * ZEN) == 25 * ZEN // 10
    assert pricing.quote(22 * ZEN // 10) == 22 * ZEN // 10
    assert pricing.quote(2 * ZEN) == 2 * ZEN


def test_jobs_below_the_floor_are_refused():
    with pytest.raises(PriceBelowFloor):
        Pricing(2 * ZEN).quote(2 * ZEN - 1)
    with pytest.raises(ValueError):
        Pricing(0)


def test_journal_survives_a_reopen(tmp_path):
    path = tmp_path / "node" / "journal.sqlite3"
    journal = Journal(path)
    journal.set_cursor(42, BlockMark(41, "0x" + "41" * 32))
    journal.add_auction(Auction(1, 1, 100, 200))
    journal.add_auction(Auction(1, 1, 999, 999))  # an event replayed after a crash changes nothing
    bid = Bid(1, 1, 12 * ZEN, b"s" * 32, b"c" * 32)
    journal.add_bid(bid)
    journal.add_outgoing("bid:1:1", "0xabc", b"raw")
    journal.hold_slot(1, 0)
    journal.add_unit(Unit(1, 0, 0, "Qm...", "ab" * 32, 1.5))
    journal.close()

    journal = Journal(path)
    assert journal.cursor(start_block=0) == (42, BlockMark(41, "0x" + "41" * 32))
    assert journal.open_auctions() == [Auction(1, 1, 100, 200)]
    assert journal.bid(1, 1) == bid
    assert not journal.outgoing("bid:1:1").done
    assert journal.held_slots() == [(1, 0)]
    assert journal.unit(1, 0, 0).seconds == 1.5
    journal.set_payout(1, "withdrawn")
    assert journal.worked_jobs() == []


def test_attestation_is_the_digest_inside_a_cidv0():
    cid = "QmZULkCELmmk5XNfCgTnCyFgAVxBRBXyDHGGMVoLFLiXEN"
    assert len(attestation_of(cid)) == 32
    with pytest.raises(ValueError):
        attestation_of("bafkreihdwdcefgh4dqkjv67uzcmw7ojee6xedzdetojuzjevtenxquvyku")
