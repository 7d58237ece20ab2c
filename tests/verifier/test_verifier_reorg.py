"""The verifier daemon when the chain reorganises under it (Anvil's `anvil_reorg`): it judges the
units the chain kept, never one a reorg took away, and posts again a verdict a reorg dropped."""

from __future__ import annotations

import gc

import pytest
from celery.result import AsyncResult

from marketplace.chain.anvil import mine, reorganize
from marketplace.protocol.terms import Verdict
from verifier import journal as j

pytestmark = [pytest.mark.anvil, pytest.mark.usefixtures("worker")]

ALWAYS = 10_000  # sample rate: every unit is sampled


def results(ledger, job_id: int) -> list:
    return ledger.verification.events.ResultPosted().get_logs(
        from_block=0, argument_filters={"jobId": job_id}
    )


def finished(daemon, count: int):
    final = (j.POSTED, j.SKIPPED, j.DROPPED)
    return lambda: sum(state in final for state in daemon.journal.states().values()) >= count


def test_a_unit_a_reorg_replaced_is_judged_as_the_chain_kept_it(
    job, make_daemon, drive, cast, storage, celery
):
    """The provider's commitment of unit 0 claims a faked state hash; a reorg replaces it with
    the honest commitment, in a block of the same number and at the same log index. The
    verifier had journaled the faked one and queued its re-run: it takes both back, and judges
    the honest commitment, which passes. Had it kept its records of the faked one, it would
    have judged a commitment the chain no longer holds, and the ledger would have refused it."""
    provider = job(ALWAYS, judges=(0,))  # the only staked verifier: drawn for every unit
    ledger, w3, me = provider.ledger, provider.ledger.w3, cast.verifiers[0].address
    checkpoint = provider.train(0)
    honest_hash = bytes.fromhex(checkpoint.state_hash())
    honest = {
        "from": provider.account.address,
        "to": ledger.market.address,
        "data": ledger.market.encode_abi(
            "commitCheckpoint",
            [provider.job_id, 0, 0, storage.add_bytes(checkpoint.to_bytes()), honest_hash],
        ),
        "gas": hex(1_000_000),
    }
    faked = provider.commit(checkpoint, state_hash="ab" * 32)
    daemon = make_daemon(cast.verifiers[0])
    mine(w3, 2)  # the block that draws the sample
    daemon.tick()
    (queued,) = daemon.journal.work(j.QUEUED, j.READY, j.POSTED)
    assert queued.unit == faked

    reorganize(w3, faked.block_number, [honest])
    (kept,) = ledger.checkpoint_events(provider.job_id)
    assert (kept["blockNumber"], kept["logIndex"]) == (faked.block_number, queued.log_index)
    assert bytes(kept["args"]["stateHash"]) == honest_hash

    drive([daemon], finished(daemon, 1))

    (posted,) = results(ledger, provider.job_id)
    assert (posted["args"]["pass"], posted["args"]["verifier"]) == (True, me)
    (judged,) = daemon.journal.work(j.POSTED)
    assert judged.unit.state_hash == honest_hash
    assert ledger.verification_result(provider.job_id, 0, 0)["verdict"] == Verdict.PASSED
    # The faked unit's re-run is left to finish unread: its result is taken in here, so that no
    # client of it outlives the session's Redis.
    AsyncResult(queued.task_id, app=celery).get(timeout=60)
    gc.collect()


@pytest.mark.parametrize("read", [True, False], ids=["block-read", "block-unread"])
def test_a_verdict_a_reorg_dropped_is_posted_again(job, make_daemon, drive, cast, read):
    """The verifier's result is mined, then a reorg replaces its block: whether or not the
    daemon had read that block (a reorg it sees, or blocks replaced before it read them), its
    next tick sends the very same transaction again, and the result is on the chain once."""
    provider = job(ALWAYS, judges=(0,))
    provider.honest(0)
    daemon = make_daemon(cast.verifiers[0])
    ledger, w3 = provider.ledger, provider.ledger.w3
    drive([daemon], finished(daemon, 1))
    (posted,) = results(ledger, provider.job_id)
    (work,) = daemon.journal.work(j.POSTED)
    if read:
        daemon.tick()
        assert daemon.cursor.last.number >= posted["blockNumber"]
    else:
        assert daemon.cursor.last.number < posted["blockNumber"]

    reorganize(w3, posted["blockNumber"])
    assert results(ledger, provider.job_id) == []

    daemon.tick()

    (again,) = results(ledger, provider.job_id)
    assert again["transactionHash"] == posted["transactionHash"]
    assert again["args"]["verifier"] == cast.verifiers[0].address
    assert daemon.journal.outgoing(work.key).done
    assert daemon.journal.states() == {(j.RESULT, provider.job_id, 0, 0): j.POSTED}
