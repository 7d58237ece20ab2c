"""Exactly-once transactions on a real chain: a crash between journaling and broadcast, and a replay."""

from __future__ import annotations

import pytest

from marketplace.devnet.accounts import devnet_account
from marketplace.runtime.outbox import Outbox
from node.daemon.journal import Journal

pytestmark = pytest.mark.anvil


class Crash(Exception):
    pass


def test_a_journaled_transaction_lands_once_across_a_crash(w3, ledger, tmp_path, monkeypatch):
    account = devnet_account(8)
    journal = Journal(tmp_path / "journal.sqlite3")
    fn = ledger.zen.functions.approve(ledger.market.address, 5)

    def crash(self, outgoing):
        raise Crash

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
        from_block=0, argument_filters={"owner": account.address})
    assert len(approvals) == 1
