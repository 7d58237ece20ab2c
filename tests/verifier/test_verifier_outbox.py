"""The verifier's answers go through the runtime's outbox: a verdict signed before a crash is posted
once, by the very transaction signed then, and the work ends posted."""

from __future__ import annotations

import pytest

from marketplace.chain.anvil import mine
from verifier import journal as j

pytestmark = pytest.mark.anvil

ALWAYS = 10_000  # sample rate: every unit is sampled


class Crash(Exception):
    pass


def crash(*_args, **_kwargs):
    raise Crash


@pytest.mark.parametrize("crash_at", ["broadcast", "receipt"])
def test_a_verdict_signed_before_a_crash_is_posted_once(
    job, make_daemon, cast, tmp_path, monkeypatch, crash_at
):
    provider = job(ALWAYS, judges=(0,))  # the only staked verifier: drawn for the unit
    unit = provider.honest(0)
    mine(provider.ledger.w3, 2)  # the block that draws the sample
    path = tmp_path / "journal.sqlite3"
    daemon = make_daemon(cast.verifiers[0], path)
    daemon.follower.follow()
    (work,) = daemon.journal.work(j.NEW)
    # The verdict as `collect` takes it in from a re-run.
    daemon.journal.update(
        work, j.READY, passed=True, evidence_cid="QmZULkCELmmk5XNfCgTnCyFgAVxBRBXyDHGGMVoLFLiXEN"
    )
    w3, verifier = daemon.ledger.w3, cast.verifiers[0].address
    nonce = w3.eth.get_transaction_count(verifier)

    with monkeypatch.context() as patch:
        if crash_at == "broadcast":  # signed and journaled, never sent
            patch.setattr(type(daemon.outbox), "_broadcast", crash)
        else:  # sent, the daemon gone before its receipt
            patch.setattr(type(daemon.outbox), "_await_receipt", crash)
        with pytest.raises(Crash):
            daemon.post()
    signed = daemon.journal.outgoing(work.key)
    assert signed is not None and not signed.done
    assert daemon.journal.states() == {(j.RESULT, unit.job_id, 0, 0): j.READY}

    restarted = make_daemon(cast.verifiers[0], path)
    restarted.post()
    restarted.post()

    posted = daemon.ledger.verification.events.ResultPosted().get_logs(
        from_block=0, argument_filters={"jobId": unit.job_id}
    )
    assert [(e["args"]["index"], e["args"]["verifier"]) for e in posted] == [(0, verifier)]
    assert "0x" + posted[0]["transactionHash"].hex().removeprefix("0x") == signed.tx_hash
    assert w3.eth.get_transaction_count(verifier) == nonce + 1
    assert restarted.journal.states() == {(j.RESULT, unit.job_id, 0, 0): j.POSTED}
    assert restarted.journal.outgoing(work.key).done
