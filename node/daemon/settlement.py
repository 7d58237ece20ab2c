"""Getting paid: settle a completed job once its verification window is over, then withdraw."""

from __future__ import annotations

import logging
from functools import cached_property

from eth_account.signers.local import LocalAccount

from marketplace.chain.errors import ChainError
from marketplace.chain.ledger import Ledger
from marketplace.protocol.terms import JobStatus
from marketplace.runtime.clock import revert_name
from marketplace.runtime.outbox import Outbox

from .journal import Journal

log = logging.getLogger(__name__)

# Refusals that mean "not yet": the window is open or a dispute is pending.
NOT_YET = {"VerificationWindowOpen", "DisputesOpen"}
# Refusals of an expiry that mean someone closed the dispute meanwhile, or its window is not over.
CLOSED = {"NoOpenDispute", "DisputeWindow"}


class Settler:
    """Settlement is anyone's call and payment is pulled, so a provider that worked a job settles
    it when nobody else has, then withdraws what it is owed."""

    def __init__(self, ledger: Ledger, account: LocalAccount, journal: Journal, outbox: Outbox):
        self.ledger = ledger
        self.account = account
        self.journal = journal
        self.outbox = outbox

    @cached_property
    def verification_window(self) -> int:
        return self.ledger.verification_window()

    def tick(self, now: int) -> None:
        for job_id in self.journal.worked_jobs():
            try:
                self._advance(job_id, now)
            except ChainError as exc:
                if revert_name(exc) not in NOT_YET:
                    log.warning("job=%d: settlement: %s", job_id, exc)

    def _advance(self, job_id: int, now: int) -> None:
        job = self.ledger.job(job_id)
        if (
            job["status"] == JobStatus.COMPLETED
            and now >= job["completedAt"] + self.verification_window
        ):
            self._expire_disputes(job_id, now)
            try:
                settled = self.outbox.send(f"settle:{job_id}", self.ledger.settle_call(job_id))
                log.info("job=%d: settled in block %d", job_id, settled["blockNumber"])
            except ChainError as exc:
                if revert_name(exc) != "WrongJobStatus":
                    raise
            job = self.ledger.job(job_id)
        if job["status"] == JobStatus.SETTLED:
            self._withdraw(job_id)
        elif job["status"] == JobStatus.CANCELLED:
            self.journal.set_payout(job_id, "withdrawn")

    def _expire_disputes(self, job_id: int, now: int) -> None:
        """Settlement waits on every open dispute, and one nobody answered in time stays open
        until someone expires it (its unit then counts as passed): the provider, who is owed pay,
        does."""
        if not self.ledger.open_disputes(job_id):
            return
        for dispute in self.ledger.pending_disputes(job_id):
            if now > dispute.ends_at:
                try:
                    self.outbox.send(f"expire:{job_id}:{dispute.key}", dispute.expire)
                    log.info("job=%d: expired the %s", job_id, dispute.what)
                except ChainError as exc:
                    if revert_name(exc) not in CLOSED:
                        raise

    def _withdraw(self, job_id: int) -> None:
        owed = self.ledger.owed(self.account.address)
        if owed:
            try:
                self.outbox.send(f"withdraw:{job_id}", self.ledger.withdraw_call())
                log.info("job=%d: withdrew %d ZEN wei", job_id, owed)
            except ChainError as exc:
                if revert_name(exc) != "NothingOwed":
                    raise
        self.journal.set_payout(job_id, "withdrawn")
