"""Exactly-once transactions on a real chain: a crash between journaling and broadcast, a replay,
and a transaction that was mined but failed."""

from __future__ import annotations

import threading
import time

import pytest

from marketplace.chain.errors import ContractRevert, TransactionReverted
from marketplace.devnet.accounts import devnet_account
from marketplace.runtime.clock import revert_name
from marketplace.runtime.follower import EventFollower
from marketplace.runtime.journal import JournalDB
from marketplace.runtime.outbox import Outbox

pytestmark = pytest.mark.anvil


class Crash(Exception):
    pass


def crash(self, outgoing):
    raise Crash


def test_a_journaled_transaction_lands_once_across_a_crash(w3, ledger, tmp_path, monkeypatch):
    account = devnet_account(8)
    journal = JournalDB(tmp_path / "journal.sqlite3")
    fn = ledger.zen.functions.approve(ledger.market.address, 5)

    with monkeypatch.context() as patch:
        patch.setattr(Outbox, "_broadcast", crash)
        with pytest.raises(Crash):
            Outbox(w3, account, journal).send("approve", fn)
    signed = journal.outgoing("approve")
    assert signed is not None and not signed.done

    restarted = Outbox(w3, account, journal)
    receipt = restarted.send("approve", fn)
    assert "0x" + receipt["transactionHash"].hex().removeprefix("0x") == signed.tx_hash
    assert restarted.send("approve", fn)["transactionHash"] == receipt["transactionHash"]
    approvals = ledger.zen.events.Approval().get_logs(
        from_block=0, argument_filters={"owner": account.address}
    )
    assert len(approvals) == 1


def test_a_mined_failure_names_the_contracts_error_and_frees_its_key(
    w3, ledger, tmp_path, monkeypatch
):
    """Signed while it would pass, mined once it no longer does: the send raises the contract's
    reason, and the key is free again, so the next send estimates anew instead of replaying a
    failure."""
    owner, spender = devnet_account(0), devnet_account(8)
    ledger.approve(owner, spender.address, 5)
    journal = JournalDB(tmp_path / "journal.sqlite3")
    fn = ledger.zen.functions.transferFrom(owner.address, spender.address, 5)
    with monkeypatch.context() as patch:
        patch.setattr(Outbox, "_broadcast", crash)
        with pytest.raises(Crash):
            Outbox(w3, spender, journal).send("pull", fn)
    ledger.approve(owner, spender.address, 0)

    outbox = Outbox(w3, spender, journal)
    with pytest.raises(TransactionReverted) as mined:
        outbox.send("pull", fn)
    assert revert_name(mined.value) == "ERC20InsufficientAllowance"
    assert journal.outgoing("pull") is None
    with pytest.raises(ContractRevert) as estimated:
        outbox.send("pull", fn)
    assert revert_name(estimated.value) == "ERC20InsufficientAllowance"
    assert journal.outgoing("pull") is None


def watched_outbox(w3, ledger, tmp_path):
    """An outbox of a fresh account and the follower that tells it of reorgs, from the next
    block on."""
    account = devnet_account(9)
    journal = JournalDB(tmp_path / "journal.sqlite3")
    outbox = Outbox(w3, account, journal)
    follower = EventFollower(
        w3,
        [ledger.zen],
        journal,
        lambda event: None,
        start_block=w3.eth.block_number + 1,
        outbox=outbox,
    )
    return account, journal, outbox, follower


def test_a_transaction_a_reorg_dropped_is_sent_again(w3, ledger, tmp_path):
    """Mined, then dropped with its block by a reorg: the follower notices the reorg, and the
    outbox sends the very same transaction again, which lands once on the kept branch."""
    account, journal, outbox, follower = watched_outbox(w3, ledger, tmp_path)
    allowance = ledger.zen.functions.allowance(account.address, ledger.market.address)
    first = outbox.send("approve", ledger.zen.functions.approve(ledger.market.address, 7))
    follower.follow()
    assert allowance.call() == 7

    someone = w3.eth.accounts[0]  # the new branch holds another transaction instead of ours
    filler = {"from": someone, "to": someone, "value": "0x1"}
    w3.provider.make_request("anvil_reorg", [1, [[filler, 0]]])
    assert allowance.call() == 0

    follower.follow()

    assert allowance.call() == 7
    again = journal.outgoing("approve")
    assert (
        again is not None
        and again.done
        and again.tx_hash.endswith(first["transactionHash"].hex().removeprefix("0x"))
    )
    approvals = ledger.zen.events.Approval().get_logs(
        from_block=first["blockNumber"], argument_filters={"owner": account.address}
    )
    assert len(approvals) == 1


def test_a_transaction_dropped_before_the_follower_read_its_block_is_sent_again(
    w3, ledger, tmp_path
):
    """Mined, and its block replaced before the follower read it: no block the follower read
    changed, so it sees no reorg, but the outbox hears how far the chain was read and finds its
    transaction gone. Sent again, it is confirmed only once the follower has read its block."""
    account, journal, outbox, follower = watched_outbox(w3, ledger, tmp_path)
    allowance = ledger.zen.functions.allowance(account.address, ledger.market.address)
    first = outbox.send("approve", ledger.zen.functions.approve(ledger.market.address, 7))
    assert journal.outgoing("approve").done

    someone = w3.eth.accounts[0]
    filler = {"from": someone, "to": someone, "value": "0x1"}
    w3.provider.make_request("anvil_reorg", [1, [[filler, 0]]])
    assert allowance.call() == 0

    follower.follow()

    assert allowance.call() == 7
    approvals = ledger.zen.events.Approval().get_logs(
        from_block=first["blockNumber"], argument_filters={"owner": account.address}
    )
    assert len(approvals) == 1
    assert approvals[0]["blockNumber"] > follower.cursor.last.number  # not read yet
    assert journal.unconfirmed(approvals[0]["blockNumber"])  # so not confirmed yet
    follower.follow()
    assert not journal.unconfirmed(approvals[0]["blockNumber"])


def test_a_transaction_dropped_while_its_receipt_is_awaited_lands_after_those_before_it(
    w3, ledger, tmp_path
):
    """A send's transaction is mined, and a reorg drops its block and its predecessor's before
    the send reads the receipt. The follower sends the predecessor again while the send still
    waits (a send does not hold it up), then the send's own goes again: both land once, in
    their order, the very same transactions, long before the send would give up."""
    account, journal, outbox, follower = watched_outbox(w3, ledger, tmp_path)
    outbox.receipt_timeout = 30
    allowance = ledger.zen.functions.allowance(account.address, ledger.market.address)
    first = outbox.send("first", ledger.zen.functions.approve(ledger.market.address, 7))
    follower.follow()

    broadcast, reorganised = outbox._broadcast, threading.Event()

    def broadcast_then_reorg(outgoing):
        broadcast(outgoing)
        if outgoing.key == "second" and not reorganised.is_set():
            # mined (Anvil may mine a moment after it answers), then dropped with its predecessor
            w3.eth.wait_for_transaction_receipt(outgoing.tx_hash, timeout=10)
            someone = w3.eth.accounts[0]
            filler = {"from": someone, "to": someone, "value": "0x1"}
            w3.provider.make_request("anvil_reorg", [2, [[filler, 0]]])
            reorganised.set()

    outbox._broadcast = broadcast_then_reorg
    sent: list = []
    began = time.monotonic()
    sending = threading.Thread(
        target=lambda: sent.append(
            outbox.send("second", ledger.zen.functions.approve(ledger.market.address, 9))
        )
    )
    sending.start()
    assert reorganised.wait(10)
    assert allowance.call() == 0  # neither is on the branch the chain kept

    follower.follow()
    sending.join(outbox.receipt_timeout + 5)

    assert sent and sent[0]["status"] == 1
    assert time.monotonic() - began < outbox.receipt_timeout / 2
    assert allowance.call() == 9
    approvals = ledger.zen.events.Approval().get_logs(
        from_block=first["blockNumber"], argument_filters={"owner": account.address}
    )
    assert [event["args"]["value"] for event in approvals] == [7, 9]
    assert approvals[0]["transactionHash"] == first["transactionHash"]
    assert approvals[1]["transactionHash"] == sent[0]["transactionHash"]
    assert journal.outgoing("second").tx_hash.endswith(sent[0]["transactionHash"].hex())
