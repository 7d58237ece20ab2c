"""The verifier daemon: watch the ledger, queue sampled units for re-runs, post what workers find.

One loop, one thread, on the daemon runtime: each tick follows new events into the journal,
draws the samples that became drawable (recording on-chain the seed of each sampled unit, which
the EVM would forget after 256 blocks), collects finished re-runs and posts them, collects the
fees of settled jobs, and reports providers that missed a checkpoint deadline. Every transaction
goes through the outbox under a key of what it answers. Re-runs happen in Celery workers, so a
slow unit never delays a post that is due.

The ledger draws who judges each sampled unit and each dispute, by stake, turn by turn, and takes
an answer only from the verifier drawn for the turn running; a later turn matters only when the
verifier drawn before stayed silent. The draws of every turn are known once the unit's seed is, so
the daemon re-runs a unit or a dispute only when it is drawn for the turn running or the next one
(so that the verdict is in hand when its turn comes), nobody answered yet and it is an active
verifier (the draw weighs stakes as they were at the seed; the ledger takes verdicts only from
verifiers staked at least the minimum now), and posts each verdict in its own turn.
"""

from __future__ import annotations

import logging
import threading
import time

from celery import Celery
from celery.result import AsyncResult
from eth_account.signers.local import LocalAccount
from web3.contract.contract import ContractFunction
from web3.types import EventData

from marketplace.chain.errors import ChainError
from marketplace.chain.events import EventCursor
from marketplace.chain.ledger import ZERO_ADDRESS, CommittedUnit, Ledger
from marketplace.protocol.round_signatures import Tenure
from marketplace.protocol.spec import MAX_SPEC_BYTES
from marketplace.protocol.terms import JobStatus, Verdict
from marketplace.runtime.clock import revert_name
from marketplace.runtime.follower import EventFollower
from marketplace.runtime.heads import HeadFeed
from marketplace.runtime.loop import run_ticks
from marketplace.runtime.outbox import Outbox
from marketplace.storage import ContentTooLarge, Storage, StorageError
from node.benchmark import BenchmarkRejected
from node.engine import DataError, JobSpec, SpecError, parse_spec
from verifier import journal as j
from verifier.admission import review
from verifier.journal import Journal, Work
from verifier.recompute import PeerUnit, UnitInputs
from verifier.tasks import verify_unit

log = logging.getLogger(__name__)

# Reverts that mean the work is moot (someone was first, the window closed, a rollback voided the
# unit, the turn ended before the answer was mined): the work is dropped, not retried.
MOOT = {
    "NotDrawn",
    "AlreadyVerified",
    "VerificationWindowClosed",
    "UnitMismatch",
    "NotSampled",
    "NoOpenDispute",
    "DisputeWindow",
    "ConflictOfInterest",
}
# Reverts of reportDowntime that mean there is nothing (more) to report.
NOT_OVERDUE = {"NotOverdue", "WrongJobStatus", "SlotVacant", "SlotDone", "GroupHostDown"}
# Reverts of a fee claim or withdrawal after a restart, or of a zero share: nothing to collect.
NOTHING_OWED = {"AlreadyClaimed", "NothingOwed"}
# Reverts of recordSeed: another verifier recorded it first, or it is lost (and the unit with it
# counts as not sampled, which the post of its result then reports).
SEED_SETTLED = {"SeedAlreadyRecorded", "SeedLost"}
# A benchmark report that cannot be fetched is tried this many times, 15 s apart at first and
# twice as long after each failure (about 8 minutes in all), then rejected.
ADMISSION_FETCHES = 6
NOT_ADMISSIBLE = {"NotAProvider", "SelfAttestation"}
ADMISSION_BACKOFF = 15.0
# Seconds a re-run asks for a checkpoint the unit's own provider committed before it counts as
# withheld, which fails the unit; less when the verifier's last turn ends sooner.
WITHHELD_PATIENCE = 120.0


class VerifierDaemon:
    """Watches market, staking and verification events as one verifier account."""

    def __init__(
        self,
        ledger: Ledger,
        account: LocalAccount,
        journal: Journal,
        storage: Storage,
        celery: Celery,
        *,
        confirmations: int = 0,
        downtime_every: float = 10.0,
        withheld_patience: float = WITHHELD_PATIENCE,
    ):
        self.ledger = ledger
        self.account = account
        self.journal = journal
        self.storage = storage
        self.celery = celery
        self.downtime_every = downtime_every
        self.withheld_patience = withheld_patience
        self._last_downtime_check = 0.0
        self._was_active: bool | None = None  # as last read from the ledger
        self._specs: dict[int, JobSpec | None] = {}  # job -> its spec, None when unreadable
        self.outbox = Outbox(ledger.w3, account, journal)
        contracts = [ledger.market, ledger.staking, ledger.verification]
        self.follower = EventFollower(
            ledger.w3,
            contracts,
            journal,
            self._handle,
            start_block=ledger.deployment.deploy_block,
            confirmations=confirmations,
            outbox=self.outbox,
            on_reorg=lambda fork: self._specs.clear(),  # a job id may name another job now
        )
        self._handlers = {
            "JobCreated": self._on_job_created,
            "CheckpointCommitted": self._on_checkpoint,
            "DisputeOpened": self._on_dispute,
            "UnitFlagged": self._on_flagged,
            "ProviderRegistered": self._on_registration,
            "SlotAssigned": self._on_slot_assigned,
            "UnitRejected": self._on_unit_rejected,
            "ProviderRemoved": self._on_slot_left,
            "SlotReleased": self._on_slot_left,
            "SlotFinished": self._on_slot_finished,
            "JobCompleted": self._on_job_over,
            "JobCancelled": self._on_job_over,
            "JobSettled": self._on_settled,
        }

    @property
    def address(self) -> str:
        return self.account.address

    @property
    def cursor(self) -> EventCursor:
        return self.follower.cursor

    def run(self, stop: threading.Event, poll_interval: float) -> None:
        """Tick until `stop` is set, on each new block and meanwhile every `poll_interval` while
        re-runs are out; a transient failure is logged and retried next tick."""
        with HeadFeed.of(self.ledger.w3) as heads:
            self.cursor.heads = heads
            try:
                run_ticks(self.tick, stop, poll_interval, heads=heads, waiting=self._rerunning)
            finally:
                self.cursor.heads = None

    def _rerunning(self) -> bool:
        """Whether re-runs are queued: their verdicts come from the workers, not the chain."""
        return bool(self.journal.work(j.QUEUED))

    def tick(self) -> None:
        self.follower.follow()
        self.draw_samples()
        self.collect()
        self.post()
        self.collect_fees()
        self.admit_providers()
        if time.monotonic() - self._last_downtime_check >= self.downtime_every:
            self.report_downtime()
            self._last_downtime_check = time.monotonic()

    def _send(self, key: str, fn: ContractFunction, moot: set[str]) -> ChainError | None:
        """Send `fn` through the outbox under `key`; the chain's refusal if it is one of `moot`,
        None once the transaction is mined."""
        try:
            self.outbox.send(key, fn)
        except ChainError as exc:
            if revert_name(exc) not in moot:
                raise
            return exc
        return None

    # --- events --------------------------------------------------------------------------

    def _handle(self, event: EventData) -> None:
        """Record what `event` means for this verifier, in the follower's journal transaction."""
        handler = self._handlers.get(event["event"])
        if handler is not None:
            handler(event)

    def _on_job_created(self, event: EventData) -> None:
        self.journal.add_job(event["args"]["jobId"], event["args"]["specCid"])

    def _on_checkpoint(self, event: EventData) -> None:
        unit = self.ledger.unit_from_event(event)
        self.journal.add_unit(unit, event["logIndex"])
        self.journal.add_work(j.RESULT, unit, event["logIndex"])

    def _on_dispute(self, event: EventData) -> None:
        args = event["args"]
        if args["challenger"] == self.address:
            return
        found = self._named_unit(event, "dispute on")
        if found is not None:
            self.journal.add_work(j.DISPUTE, *found)

    def _on_flagged(self, event: EventData) -> None:
        """A provider of the job named a unit (one its group's aggregation excluded, or its own
        input it cannot build on, whose window opens again): the ledger now counts it as sampled,
        so a unit skipped as unsampled, or dropped when its window closed, is drawn again."""
        found = self._named_unit(event, "flagged")
        if found is not None:
            self.journal.redraw(j.RESULT, *found)

    def _named_unit(self, event: EventData, what: str) -> tuple[CommittedUnit, int] | None:
        """The journal's latest commitment of the unit `event` names; None, with a warning,
        for a unit committed before this journal began."""
        args = event["args"]
        found = self.journal.latest_unit(
            args["jobId"], args["slot"], args["index"], event["blockNumber"]
        )
        if found is None:
            log.warning(
                "%s job %d slot %d unit %d, committed before this journal began",
                what,
                args["jobId"],
                args["slot"],
                args["index"],
            )
        return found

    def _on_registration(self, event: EventData) -> None:
        args = event["args"]
        if args["provider"] != self.address:
            self.journal.add_admission(args["provider"], bytes(args["attestation"]))

    def _on_slot_assigned(self, event: EventData) -> None:
        args = event["args"]
        self.journal.hold_slot(args["jobId"], args["slot"], args["provider"], event["blockNumber"])

    def _on_unit_rejected(self, event: EventData) -> None:
        args = event["args"]
        self.journal.reject_unit(
            args["jobId"], args["slot"], args["index"], event["blockNumber"], event["logIndex"]
        )

    def _on_slot_left(self, event: EventData) -> None:
        args = event["args"]
        self.journal.leave_slot(
            args["jobId"], args["slot"], args["provider"], event["blockNumber"], event["logIndex"]
        )

    def _on_slot_finished(self, event: EventData) -> None:
        self.journal.release_slot(event["args"]["jobId"], event["args"]["slot"])

    def _on_job_over(self, event: EventData) -> None:
        self.journal.release_job(event["args"]["jobId"])

    def _on_settled(self, event: EventData) -> None:
        """The job's verification fees are claimable now: `collect_fees` claims this verifier's
        share."""
        self.journal.set_payout(event["args"]["jobId"], "settled")

    # --- sampling and re-runs ------------------------------------------------------------

    def draw_samples(self) -> None:
        """Queue each new unit whose sample is drawable and drawn; disputes are queued at once."""
        new = self.journal.work(j.NEW)
        if not new:
            return
        latest = self.ledger.w3.eth.get_block("latest")
        head = latest["number"]
        active: bool | None = None  # read from the ledger once a piece of work is due
        for work in new:
            unit = work.unit
            if self._window_closed(work, latest["timestamp"]):
                self._drop(work, "window closed before it was queued")
                continue
            if work.kind == j.RESULT:
                if head < unit.block_number + 2:
                    continue  # the seed block's hash is readable once one more block exists
                if unit.provider == self.address or not self.ledger.is_sampled(unit):
                    self.journal.update(work, j.SKIPPED)
                    continue
                self._record_seed(unit)
                if self._awaits_peers(unit, head, latest["timestamp"]):
                    continue
            turns = self._turns(work, latest["timestamp"])
            if not turns or self._answered(work):
                self.journal.update(work, j.SKIPPED, note="answered" if turns else "not drawn")
                continue
            if turns[0] > latest["timestamp"] + self.ledger.turn_length(work.kind == j.DISPUTE):
                continue  # drawn for a later turn only: the verifiers drawn before may answer
            if active is None:
                active = self._active()
            if not active:
                continue  # its verdict would be refused: nothing is re-run until it is active
            withheld_after = self._withheld_after(work, turns, latest["timestamp"])
            inputs = self._inputs(unit, withheld_after, head)
            if inputs is None:
                log.warning(
                    "job %d was created before this journal began: its units are not checked",
                    unit.job_id,
                )
                self.journal.update(work, j.SKIPPED, note="job spec unknown")
                continue
            task = verify_unit.apply_async(args=[inputs.to_json()])
            self.journal.update(work, j.QUEUED, task_id=task.id)
            log.info(
                "queued %s of job %d slot %d unit %d as task %s",
                work.kind,
                unit.job_id,
                unit.slot,
                unit.index,
                task.id,
            )

    def _active(self) -> bool:
        """Whether the ledger takes this verifier's verdicts now; logged when that changes."""
        active = self.ledger.is_active_verifier(self.address)
        if active != self._was_active:
            log.log(
                logging.INFO if active else logging.WARNING,
                "%s: %s",
                self.address,
                "an active verifier, re-running units it is drawn for"
                if active
                else "not an active verifier (unregistered or staked below the minimum): "
                "units it is drawn for are not re-run, their turns pass to the next draw",
            )
            self._was_active = active
        return active

    def _record_seed(self, unit: CommittedUnit) -> None:
        """Record the seed that sampled `unit` while the EVM still serves it, so the sample holds
        for the whole verification window, not just the 256 blocks the EVM remembers."""
        if any(self.ledger.recorded_seed(unit.block_number)):
            return
        self._send(
            f"seed:{unit.block_number}",
            self.ledger.record_seed_call(unit.block_number),
            SEED_SETTLED,
        )

    def _group_nodes(self, job_id: int) -> int:
        """How many ranks the job's group has; 0 for a single node's job, or while its spec
        cannot be read (the re-run reports that)."""
        if job_id not in self._specs:
            spec_cid = self.journal.spec_cid(job_id)
            try:
                data = self.storage.cat(spec_cid, max_bytes=MAX_SPEC_BYTES) if spec_cid else None
            except ContentTooLarge:
                data = None
            except StorageError as exc:  # read again for the job's later units
                log.warning("job %d's spec %s: %s", job_id, spec_cid, exc)
                return 0
            try:
                self._specs[job_id] = None if data is None else parse_spec(data.decode())
            except (SpecError, DataError, ValueError):
                self._specs[job_id] = None
        spec = self._specs[job_id]
        return spec.distributed.nodes if spec and spec.distributed.strategy != "single" else 0

    def _peers(self, unit: CommittedUnit, head: int) -> tuple[PeerUnit, ...]:
        """The other ranks' commitments of a group's unit so far: their records vote on this
        one's (a ddp unit's steps, a DiLoCo round's exchange)."""
        found = [
            self.journal.latest_unit(unit.job_id, slot, unit.index, head)
            for slot in range(self._group_nodes(unit.job_id))
            if slot != unit.slot
        ]
        return tuple(
            PeerUnit(p.slot, p.cid, p.state_hash.hex(), p.provider) for p, _ in filter(None, found)
        )

    def _awaits_peers(self, unit: CommittedUnit, head: int, now: int) -> bool:
        """Whether to hold a group's unit back until every other rank committed the same unit, for
        half the verification window at most: the re-run needs the time that is left."""
        nodes = self._group_nodes(unit.job_id)
        if not nodes or len(self._peers(unit, head)) == nodes - 1:
            return False
        window = self.ledger.verification_window()
        return now < unit.committed_at + window // 2

    def _withheld_after(self, work: Work, turns: list[int], now: int) -> float:
        """The wall-clock time after which a checkpoint the unit's provider committed and nobody
        serves is withheld: after `withheld_patience` seconds of asking, or halfway through the
        last turn this verifier is drawn for, so that its verdict still lands in that turn."""
        last_turn_middle = turns[-1] + self.ledger.turn_length(work.kind == j.DISPUTE) // 2
        return time.time() + max(0, min(self.withheld_patience, last_turn_middle - now))

    def _inputs(self, unit: CommittedUnit, withheld_after: float, head: int) -> UnitInputs | None:
        spec_cid = self.journal.spec_cid(unit.job_id)
        if spec_cid is None:
            return None
        previous = None
        if unit.index > 0:
            previous = self.journal.latest_unit(
                unit.job_id, unit.slot, unit.index - 1, unit.block_number
            )
        return UnitInputs(
            job_id=unit.job_id,
            slot=unit.slot,
            index=unit.index,
            provider=unit.provider,
            spec_cid=spec_cid,
            cid=unit.cid,
            state_hash=unit.state_hash.hex(),
            previous_cid=previous[0].cid if previous else None,
            previous_state_hash=previous[0].state_hash.hex() if previous else None,
            previous_provider=previous[0].provider if previous else None,
            withheld_after=withheld_after,
            peers=self._peers(unit, head),
            slot_tenures=self._slot_tenures(unit, head),
        )

    def _slot_tenures(self, unit: CommittedUnit, head: int) -> tuple[dict[str, Tenure], ...]:
        """By slot of a group's unit, the providers that held it so far, each with the units it
        could have signed for: a payload one signed while it held the slot stands in a record
        (the slot handed over, or its unit never committed, or its holder dropped out before
        committing anything), and one it signed before or well after does not."""
        return tuple(
            self.journal.slot_tenures(unit.job_id, slot, head)
            for slot in range(self._group_nodes(unit.job_id))
        )

    def collect(self) -> None:
        """Take in finished re-runs; a re-run without a verdict is dropped, never posted, and so
        is one still unfinished when its window closes (its task may have been lost)."""
        queued = self.journal.work(j.QUEUED)
        if not queued:
            return
        now = self.ledger.w3.eth.get_block("latest")["timestamp"]
        for work in queued:
            task = AsyncResult(work.task_id, app=self.celery)
            if not task.ready():
                if self._window_closed(work, now):
                    self._drop(work, "window closed before the re-run finished")
                continue
            if task.failed():
                log.error(
                    "task %s for job %d unit %d failed: %r",
                    work.task_id,
                    work.unit.job_id,
                    work.unit.index,
                    task.result,
                )
                self._drop(work, f"task failed: {task.result!r}")
                continue
            verdict = task.result
            if verdict["pass"] is None:
                self._drop(work, verdict["reason"])
                continue
            self.journal.update(
                work, j.READY, passed=verdict["pass"], evidence_cid=verdict["evidence_cid"]
            )

    def _drop(self, work: Work, why: str) -> None:
        """Give up a unit's work for good, saying why: a verdict never posted is worth a line."""
        log.warning(
            "dropped %s of job %d slot %d unit %d: %s",
            work.kind,
            work.unit.job_id,
            work.unit.slot,
            work.unit.index,
            why,
        )
        self.journal.update(work, j.DROPPED, note=why)

    def _window_closed(self, work: Work, now: int) -> bool:
        """Whether the chain would refuse this work's answer at block time `now`."""
        u = work.unit
        if work.kind == j.RESULT:
            return now >= self.ledger.result_window_opens_at(u) + self.ledger.verification_window()
        disputed_at = self.ledger.verification_result(u.job_id, u.slot, u.index)["disputedAt"]
        return now > disputed_at + self.ledger.dispute_window()

    def _answered(self, work: Work) -> bool:
        """Whether the ledger holds an answer to `work` already: a result of this very
        commitment, or the dispute's settlement."""
        u = work.unit
        result = self.ledger.verification_result(u.job_id, u.slot, u.index)
        if work.kind == j.RESULT:
            return result["verdict"] != Verdict.NONE and result["unitBlock"] == u.block_number
        return result["verdict"] != Verdict.DISPUTED

    def _turns(self, work: Work, now: int) -> list[int]:
        """When each turn starts, from the one running at chain time `now` on, in which this
        verifier is drawn to answer `work`."""
        turns = self.ledger.result_turns if work.kind == j.RESULT else self.ledger.dispute_turns
        return turns(work.unit, self.address, now)

    def post(self) -> None:
        """Send each verdict in hand whose turn is running under its work's outbox key: a send a
        crash interrupted is found under that key after a restart and waited for, never signed
        twice. A verdict whose turns are all over is dropped."""
        ready = self.journal.work(j.READY)
        if not ready:
            return
        now = self.ledger.w3.eth.get_block("latest")["timestamp"]
        for work in ready:
            turns = self._turns(work, now)
            if not turns:
                self._drop(work, "its turns are over")
                continue
            if turns[0] > now:
                continue  # drawn for a later turn: posted then
            answer = (
                self.ledger.post_result_call
                if work.kind == j.RESULT
                else self.ledger.resolve_dispute_call
            )
            passed, evidence_cid = work.verdict
            verdict = answer(work.unit, passed, evidence_cid)
            refused = self._send(work.key, verdict, MOOT)
            if refused is not None:
                if self._posted_before(work):
                    self.journal.update(work, j.POSTED, note=str(refused))
                else:
                    self._drop(work, f"the ledger refused it: {refused}")
                continue
            self.journal.update(work, j.POSTED)
            log.info(
                "posted %s of job %d slot %d unit %d: %s, evidence %s",
                work.kind,
                work.unit.job_id,
                work.unit.slot,
                work.unit.index,
                "pass" if passed else "FAIL",
                evidence_cid,
            )

    def _posted_before(self, work: Work) -> bool:
        """Whether the answer the chain holds is this daemon's own, sent before its journal knew
        (a journal restored from a backup): then the refusal only says it is posted."""
        u = work.unit
        result = self.ledger.verification_result(u.job_id, u.slot, u.index)
        return self.address == result["first" if work.kind == j.RESULT else "second"]

    # --- admissions ----------------------------------------------------------------------

    def admit_providers(self) -> None:
        """Judge each registration's benchmark report that is due, and attest the ones that
        check out. A report that does not check out is rejected for good, with a log line; one
        that cannot be fetched is tried again later, backing off, and rejected after
        ADMISSION_FETCHES tries: an attestation naming content nobody serves costs a few
        bounded fetches, never a stuck daemon."""
        for provider, attestation in self.journal.admissions(j.PENDING, due_by=time.time()):
            if self.ledger.staking_account(provider)["admitted"]:
                self.journal.judge_admission(provider, attestation, j.ATTESTED, "admitted before")
                continue
            try:
                report = review(self.storage, attestation)
            except BenchmarkRejected as exc:
                self._reject(provider, attestation, str(exc))
                continue
            except StorageError as exc:
                fetches = self.journal.failed_fetch(
                    provider, attestation, time.time(), ADMISSION_BACKOFF
                )
                if fetches >= ADMISSION_FETCHES:
                    self._reject(provider, attestation, f"{fetches} fetches failed, last: {exc}")
                continue
            attest = self.ledger.attest_benchmark_call(provider, attestation, int(report.gflops))
            refused = self._send(f"attest:{provider}:{attestation.hex()}", attest, NOT_ADMISSIBLE)
            if refused is not None:
                self._reject(provider, attestation, f"the ledger refused it: {refused}")
                continue
            self.journal.judge_admission(provider, attestation, j.ATTESTED, report.device)
            log.info(
                "provider %s admitted: %s GFLOP/s on %s", provider, report.gflops, report.device
            )

    def _reject(self, provider: str, attestation: bytes, reason: str) -> None:
        self.journal.judge_admission(provider, attestation, j.REJECTED, reason)
        log.warning("provider %s not admitted: %s", provider, reason)

    # --- fees ----------------------------------------------------------------------------

    def collect_fees(self) -> None:
        """Claim this verifier's share of each settled job's verification fees, then withdraw what
        the market owes it."""
        for job_id in self.journal.payouts("settled"):
            if self.ledger.verifications_by(job_id, self.address):
                fees = self.ledger.claim_verification_fees_call(job_id)
                self._send(f"claim:{job_id}", fees, NOTHING_OWED)
                if self.ledger.owed(self.address):
                    self._send(f"withdraw:{job_id}", self.ledger.withdraw_call(), NOTHING_OWED)
                    log.info("collected verification fees of job %d", job_id)
            self.journal.set_payout(job_id, "withdrawn")

    # --- downtime ------------------------------------------------------------------------

    def _group_host_down(self, job_id: int, now: int) -> bool:
        """Whether slot 0, where the job's group meets, is vacant or late itself: the others
        stalled with its board, and it is reported first (the ledger's `GroupHostDown`)."""
        host = self.ledger.slot(job_id, 0)
        return host["provider"] == ZERO_ADDRESS or (
            not host["done"] and now > self.ledger.checkpoint_deadline(job_id, 0)
        )

    def report_downtime(self) -> None:
        """Report every held slot past its checkpoint deadline (the reporter earns a share)."""
        held = self.journal.held_slots()
        if not held:
            return
        now = self.ledger.w3.eth.get_block("latest")["timestamp"]
        for job_id, slot_id in held:
            job = self.ledger.job(job_id)
            slot = self.ledger.slot(job_id, slot_id)
            if (
                job["status"] != JobStatus.RUNNING
                or slot["provider"] == ZERO_ADDRESS
                or slot["done"]
                or now <= slot["lastCheckpointAt"] + job["checkpointInterval"]  # the earliest
            ):
                continue
            if slot_id != 0 and self._group_host_down(job_id, now):
                continue
            deadline = self.ledger.checkpoint_deadline(job_id, slot_id)
            if now <= deadline:
                continue
            report = self.ledger.report_downtime_call(job_id, slot_id)
            key = f"downtime:{job_id}:{slot_id}:{slot['provider']}:{deadline}"
            if self._send(key, report, NOT_OVERDUE) is not None:
                continue
            log.info("reported downtime of %s in job %d slot %d", slot["provider"], job_id, slot_id)
