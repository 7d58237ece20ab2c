"""Sealed bids on time: commit in the bid window, reveal in the reveal window, close if nobody
did, and expire a bid of ours that could not be revealed so its locked collateral comes back."""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable

from eth_account.signers.local import LocalAccount

from marketplace.chain.errors import ChainError
from marketplace.chain.ledger import Ledger, unit_pay
from marketplace.errors import ZooError
from marketplace.protocol.terms import ParticipantState
from marketplace.runtime.clock import revert_name
from marketplace.runtime.outbox import Outbox

from .journal import Auction, Bid, Journal
from .pricing import Pricing

log = logging.getLogger(__name__)

# Refusals that only mean "too early": the next tick tries again.
NOT_YET = {"NotInRevealWindow", "RevealWindowOpen"}


class UnitPaysNothing(ZooError, ValueError):
    """A job whose unit would pay nothing at our price (worth too few GPU-seconds)."""


class JobTooTight(ZooError, ValueError):
    """A job this node could not serve without being slashed: a checkpoint deadline shorter than
    it can keep, or collateral it does not have free."""


# The shortest checkpoint interval a provider bids on by default: a unit has to be trained,
# pinned on the replicas and committed within it, with room for a slow block.
MIN_CHECKPOINT_INTERVAL = 30


class Bidder:
    """Drives every auction this provider takes part in from the journal, so a restart resumes
    each one where it was: a journaled bid is never replaced by a second one, and a committed
    bid is revealed as long as the reveal window is open."""

    def __init__(
        self,
        ledger: Ledger,
        account: LocalAccount,
        journal: Journal,
        outbox: Outbox,
        pricing: Pricing,
        check_job: Callable[[int, dict], None],
        min_checkpoint_interval: int = MIN_CHECKPOINT_INTERVAL,
    ):
        self.ledger = ledger
        self.account = account
        self.journal = journal
        self.outbox = outbox
        self.pricing = pricing
        self.check_job = check_job  # raises a ZooError for a job this node should not take
        self.min_checkpoint_interval = min_checkpoint_interval
        self._waiting: set[tuple[int, int]] = set()  # auctions put off while this node is busy

    def on_auction_opened(self, args: dict, tier: int) -> None:
        """Track an auction of this provider's tier that it has not already taken part in."""
        job = self.ledger.job(args["jobId"])
        participant = self.ledger.participant(args["jobId"], self.account.address)
        if job["tier"] != tier or participant["state"] != ParticipantState.NONE:
            return
        self.journal.add_auction(
            Auction(args["jobId"], args["round"], args["bidDeadline"], args["revealDeadline"])
        )

    def tick(self, now: int) -> None:
        for auction in self.journal.open_auctions():
            try:
                self._advance(auction, now)
            except ChainError as exc:
                if revert_name(exc) not in NOT_YET:
                    log.warning("auction job=%d round=%d: %s", auction.job_id, auction.round, exc)

    def _advance(self, auction: Auction, now: int) -> None:
        job = self.ledger.job(auction.job_id)
        if job["round"] != auction.round or job["openSlots"] == 0:
            self._expire(auction)
            self.journal.end_auction(auction.job_id, auction.round, "closed")
            return
        bid = self.journal.bid(auction.job_id, auction.round)
        if now <= auction.bid_deadline:
            if bid is None:
                bid = self._seal(auction, job)
            if bid is not None:
                self._commit(bid)
        elif bid is None or not self.outbox.sent(_key("bid", bid)):
            log.info(
                "job=%d round=%d: bid window passed without a bid of ours",
                auction.job_id,
                auction.round,
            )
            self.journal.end_auction(auction.job_id, auction.round, "skipped")
        elif now <= auction.reveal_deadline:
            self._reveal(bid)
        else:
            self._expire(auction)
            self._close(auction)

    def _busy(self, auction: Auction) -> bool:
        """Whether this node holds a slot or has a bid out in another auction. It trains one slot
        at a time, so a second slot would miss its checkpoint deadlines and be slashed: it bids
        for one only when the first is over, while this auction's bid window is still open."""
        others = [
            other
            for other in self.journal.open_auctions()
            if (other.job_id, other.round) != (auction.job_id, auction.round)
            and self.journal.bid(other.job_id, other.round) is not None
        ]
        busy = bool(self.journal.held_slots() or others)
        if busy and (auction.job_id, auction.round) not in self._waiting:
            log.info(
                "job=%d round=%d: busy with another slot or bid; bidding if it ends in time",
                auction.job_id,
                auction.round,
            )
        (self._waiting.add if busy else self._waiting.discard)((auction.job_id, auction.round))
        return busy

    def _check_terms(self, job: dict) -> None:
        """Refuse a job whose terms would get this node slashed however honestly it works."""
        if job["checkpointInterval"] < self.min_checkpoint_interval:
            raise JobTooTight(
                f"a checkpoint every {job['checkpointInterval']} s is tighter than the "
                f"{self.min_checkpoint_interval} s this node can keep"
            )
        free = self.ledger.free_stake(self.account.address)
        if free < job["collateral"]:
            raise JobTooTight(
                f"its collateral {job['collateral']} wei exceeds our free stake {free}"
            )

    def _seal(self, auction: Auction, job: dict) -> Bid | None:
        """Price the job and journal the sealed bid, salt included, before any transaction."""
        if self._busy(auction):
            return None
        try:
            self._check_terms(job)
            self.check_job(auction.job_id, job)
            price = self.pricing.quote(job["maxPrice"])
            pay = unit_pay(price, job["unitGpuSeconds"])
            if pay == 0:
                raise UnitPaysNothing(
                    f"a unit worth {job['unitGpuSeconds']} GPU-seconds pays nothing at {price} "
                    "wei/GPU-hour"
                )
        except ZooError as exc:
            log.info("job=%d: not bidding: %s", auction.job_id, exc)
            self.journal.end_auction(auction.job_id, auction.round, "skipped")
            return None
        log.info(
            "job=%d round=%d: bidding %d wei/GPU-hour; a unit (%d GPU-seconds) pays %d wei",
            auction.job_id,
            auction.round,
            price,
            job["unitGpuSeconds"],
            pay,
        )
        salt = secrets.token_bytes(32)
        commitment = self.ledger.bid_commitment_of(
            price, salt, self.account.address, auction.job_id
        )
        bid = Bid(auction.job_id, auction.round, price, salt, bytes(commitment))
        self.journal.add_bid(bid)
        return bid

    def _commit(self, bid: Bid) -> None:
        key = _key("bid", bid)
        outgoing = self.journal.outgoing(key)
        if outgoing is not None and outgoing.done:
            return
        try:
            self.outbox.send(key, self.ledger.commit_bid_call(bid.job_id, bid.commitment))
        except ChainError as exc:
            log.warning("job=%d: bid not committed: %s", bid.job_id, exc)
            self.journal.end_auction(bid.job_id, bid.round, "skipped")
            return
        log.info("job=%d round=%d: committed sealed bid price=%d", bid.job_id, bid.round, bid.price)

    def _reveal(self, bid: Bid) -> None:
        key = _key("reveal", bid)
        outgoing = self.journal.outgoing(key)
        if outgoing is not None and outgoing.done:
            return
        if outgoing is None and (
            self.ledger.bid_commitment(bid.job_id, self.account.address) != bid.commitment
        ):
            log.warning(
                "job=%d round=%d: our commitment is not on chain; nothing to reveal",
                bid.job_id,
                bid.round,
            )
            self.journal.end_auction(bid.job_id, bid.round, "skipped")
            return
        self.outbox.send(key, self.ledger.reveal_bid_call(bid.job_id, bid.price, bid.salt))
        log.info("job=%d round=%d: revealed bid price=%d", bid.job_id, bid.round, bid.price)

    def _expire(self, auction: Auction) -> None:
        """A sealed bid of ours still unrevealed once its round's reveal window is over (or the
        round ended early) holds its collateral locked: expire it to take the collateral back,
        forfeiting the bond if the round ran its course. The market tells whether one is sealed."""
        bid = self.journal.bid(auction.job_id, auction.round)
        if bid is None:
            return
        reveal = self.journal.outgoing(_key("reveal", bid))
        if reveal is not None and reveal.done:
            return
        fn = self.ledger.expire_bid_call(auction.job_id, auction.round, self.account.address)
        try:
            self.outbox.send(_key("expire", bid), fn)
        except ChainError as exc:
            if revert_name(exc) in NOT_YET:
                raise
            log.info("job=%d round=%d: no sealed bid to expire (%s)", bid.job_id, bid.round, exc)
            return
        log.warning(
            "job=%d round=%d: our bid was never revealed; expired it to release its collateral",
            bid.job_id,
            bid.round,
        )

    def _close(self, auction: Auction) -> None:
        """Anyone may close an auction after its reveal window; a bidder has most reason to."""
        fn = self.ledger.close_auction_call(auction.job_id)
        try:
            self.outbox.send(f"close:{auction.job_id}:{auction.round}", fn)
            log.info("job=%d round=%d: closed the auction", auction.job_id, auction.round)
        except ChainError as exc:
            if revert_name(exc) in NOT_YET:
                raise
            log.info(
                "job=%d round=%d: auction already closed (%s)", auction.job_id, auction.round, exc
            )
        self.journal.end_auction(auction.job_id, auction.round, "closed")


def _key(action: str, bid: Bid) -> str:
    return f"{action}:{bid.job_id}:{bid.round}"
