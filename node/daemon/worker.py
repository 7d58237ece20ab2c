"""Work units for the slots this provider holds: fetch by CID, train, pin, commit before the
deadline."""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, NoReturn, Protocol

from eth_account.signers.local import LocalAccount

from marketplace.chain.errors import ChainError
from marketplace.chain.ledger import CommittedUnit, Ledger
from marketplace.errors import ZooError
from marketplace.protocol.checkpoint import Checkpoint, CheckpointError
from marketplace.protocol.spec import MAX_SPEC_BYTES, HFSpec
from marketplace.protocol.terms import JobStatus
from marketplace.protocol.units import unit_steps, units_per_node
from marketplace.runtime.clock import chain_time
from marketplace.runtime.outbox import Outbox
from marketplace.storage import ContentNotFound, ContentTooLarge, Storage
from node.engine import (
    JobSpec,
    LocalData,
    SpecError,
    SpecOverLimits,
    UnitLimits,
    parse_spec,
    run_unit,
    unit_shard,
)
from node.engine.cost import unit_cost
from node.engine.data import NO_LOCAL_DATA
from node.engine.limits import DEFAULT_LIMITS, checkpoint_bytes
from node.engine.speed import MachineSpeed, Speed, default_device, machine_speed

from .journal import Journal, Unit

log = logging.getLogger(__name__)


class UnitLog(Protocol):
    """Where the daemon sends a line for each unit it commits (a gateway's job log, posted by the
    SDK's JobLog, which `node start` hands in when ZOO_GATEWAY_URL is set); posting must never
    block."""

    def post(self, job_id: int, line: str) -> None: ...


class BadInput(ZooError):
    """The unit this node was to resume from does not hold what was committed: nothing is
    trained on it."""


# A unit estimated to take more than 1/UNIT_TIME_MARGIN of the job's checkpoint interval is not
# bid on: the estimate is within a factor of about two of what a unit takes (tests/engine/
# test_cost.py), and the unit's checkpoint is still to be pinned and committed in the interval.
UNIT_TIME_MARGIN = 3


class JobUnfit(ZooError, ValueError):
    """A job this node cannot deliver: its spec does not parse, has fewer units than asked, asks
    more of this machine than its limits allow, or has units that would not fit its checkpoint
    interval here."""


class Specs:
    """Job specs by job id (fetched by the CID the job was created with), parsed once. Bidding and
    training read them from different threads, and a Storage serves one thread, so reads go through
    a lock."""

    def __init__(
        self,
        ledger: Ledger,
        storage: Storage,
        limits: UnitLimits = DEFAULT_LIMITS,
        device: str | None = None,
        speed_folder: Path | None = None,
    ):
        self._ledger = ledger
        self._storage = storage
        self.limits = limits
        self.device = str(device or default_device())  # where units train: what is timed
        self._speed_folder = speed_folder
        self._parsed: dict[int, JobSpec] = {}
        self._lock = threading.Lock()

    def forget(self) -> None:
        """Drop every spec read by job id (after a reorg, a job id may name another job)."""
        with self._lock:
            self._parsed.clear()
        self._ledger.forget_specs()

    def of_job(self, job_id: int) -> JobSpec:
        with self._lock:
            if job_id not in self._parsed:
                cid = self._ledger.spec_cid(job_id)
                try:
                    text = self._storage.cat(cid, max_bytes=MAX_SPEC_BYTES).decode()
                    self._parsed[job_id] = parse_spec(text)
                except (SpecError, UnicodeDecodeError, ContentTooLarge) as exc:
                    raise JobUnfit(f"spec {cid} is not a job spec: {exc}") from None
            return self._parsed[job_id]

    def check_job(self, job_id: int, job: dict) -> None:
        """Refuse, before bidding, a job whose units this node could not compute."""
        spec = self.of_job(job_id)
        base = spec.model.base if isinstance(spec.model, HFSpec) else None
        if base is not None and base.cid is None:
            raise JobUnfit(f"model.from names {base.name} but not its folder's CID")
        speed = self.speed(spec)
        try:
            self.limits.check(spec, speed=speed)
        except SpecOverLimits as exc:
            raise JobUnfit(str(exc)) from None
        if job["unitsPerNode"] > units_per_node(spec):
            raise JobUnfit(
                f"the job asks {job['unitsPerNode']} units per node; its spec has "
                f"{units_per_node(spec)}"
            )
        seconds, interval = speed.seconds(unit_cost(spec)), job["checkpointInterval"]
        if seconds * UNIT_TIME_MARGIN > interval:
            raise JobUnfit(
                f"a unit takes ~{seconds:,.1f} s on this machine: a checkpoint every {interval} s "
                f"leaves less than the {UNIT_TIME_MARGIN}x margin it needs"
            )

    def machine_speed(self) -> MachineSpeed:
        """This machine's speed on the training device, measured the first time it is asked (or
        read from where it was remembered)."""
        return machine_speed(self.device, self.limits.max_threads, self._speed_folder)

    def speed(self, spec: JobSpec) -> Speed:
        """This machine's speed at the threads `spec` asks for."""
        return self.machine_speed().at(spec.reproducibility.num_threads)


def unit_key(job_id: int, slot_id: int, index: int) -> str:
    """The outbox key of a unit's commit."""
    return f"unit:{job_id}:{slot_id}:{index}"


class Worker:
    """Delivers a slot's units as a pipeline: while unit k is pinned and committed in the
    background, unit k+1 trains from k's state still in memory (the bits its checkpoint holds:
    units are deterministic), so the chain's block time and the replication stay off the
    training's path.

    Crash safety rests on the order of records. A unit is journaled once its checkpoint is on
    this node's IPFS node, pinned on the replicas before its commit, and the index to commit
    always comes from the chain's `unitsDone`: a restart commits the journaled units in order,
    none is skipped or committed twice, and no unit whose record survived is trained again.

    The chain's `unitsDone` can also go back: a unit confirmed wrong voids every unit of the slot
    built on it, including this node's if it took the slot over after the cheater. The node then
    trains again from the last good checkpoint (`forget_voided`)."""

    def __init__(
        self,
        ledger: Ledger,
        account: LocalAccount,
        journal: Journal,
        outbox: Outbox,
        specs: Specs,
        storage: Storage,
        replicas: int,
        device: str | None = None,
        job_log: UnitLog | None = None,
        local_data: LocalData = NO_LOCAL_DATA,
    ):
        self.ledger = ledger
        self.account = account
        self.journal = journal
        self.outbox = outbox
        self.specs = specs
        self.storage = storage  # the worker's own: read and written from its threads
        self.replicas = replicas
        self.device = device
        self.job_log = job_log  # where a line for each committed unit goes, if anywhere
        self.local_data = local_data  # the directories `file` data sources may read
        # the latest unit trained here
        self._last: tuple[tuple[int, int, int], Checkpoint] | None = None
        # the training figures of units trained here, until committed
        self._metrics: dict[tuple[int, int, int], dict] = {}
        # the highest `unitsDone` read of each slot: one below it means the slot was rolled back
        self._reached: dict[tuple[int, int], int] = {}
        self._committer = ThreadPoolExecutor(1, thread_name_prefix="commit")

    def close(self) -> None:
        """Drop commits not yet started; one in flight finishes (its transaction is journaled)."""
        self._committer.shutdown(wait=False, cancel_futures=True)

    def run(self, job_id: int, slot_id: int, stop: threading.Event) -> None:
        """Deliver a single-node job's slot: its units back to back, until the slot has nothing
        to deliver for now or the node stops."""
        while not stop.is_set() and self.step(job_id, slot_id, stop):
            pass

    def step(self, job_id: int, slot_id: int, stop: threading.Event) -> bool:
        """Commit the slot's next unit, training it first unless the journal has it, and train
        the unit after it meanwhile. False once the slot has nothing to deliver for now."""
        held = self.deliverable(job_id, slot_id)
        if held is None:
            return False
        slot, job = held
        index = slot["unitsDone"]
        self.forget_voided(job_id, slot_id, index)
        unit = self.journal.unit(job_id, slot_id, index) or self._train(job_id, slot_id, index)
        committing = self._committer.submit(self.commit, unit, slot, job["checkpointInterval"])
        try:
            following = index + 1
            if (
                following < job["unitsPerNode"]
                and not stop.is_set()
                and self._in_memory(job_id, slot_id, index)
                and self.journal.unit(job_id, slot_id, following) is None
            ):
                self._train(job_id, slot_id, following)
        finally:
            committing.result()
        return True

    def deliverable(self, job_id: int, slot_id: int) -> tuple[dict, dict] | None:
        """The slot and its job while this node still owes the slot units; None (the journal told
        why) once the slot is lost or finished or the job over, or while it is not running."""
        slot = self.ledger.slot(job_id, slot_id)
        if slot["provider"] != self.account.address:
            log.warning("job=%d slot=%d: no longer ours", job_id, slot_id)
            self.journal.end_slot(job_id, slot_id, "lost")
            return None
        if slot["done"]:
            log.info("job=%d slot=%d: finished", job_id, slot_id)
            self.journal.end_slot(job_id, slot_id, "finished")
            return None
        job = self.ledger.job(job_id)
        if job["status"] in (JobStatus.COMPLETED, JobStatus.SETTLED, JobStatus.CANCELLED):
            log.info("job=%d slot=%d: the job is over", job_id, slot_id)
            self.journal.end_slot(job_id, slot_id, "finished")  # so the node bids again
            return None
        if job["status"] != JobStatus.RUNNING:
            return None
        return slot, job

    def forget_voided(self, job_id: int, slot_id: int, done: int) -> None:
        """Forget this node's units of the slot from `done` on if the chain rolled the slot back:
        they built on a voided state, so they are trained again from unit `done - 1` and committed
        under fresh outbox records. The slot was rolled back if `unitsDone` went below a value
        read here before, or (after a restart) below a unit committed here. A unit journaled but
        not committed past `done` alone is no rollback: a crash came between its training and its
        commit, and it is committed as it is."""
        rolled_back = self._reached.get((job_id, slot_id), 0) > done
        self._reached[(job_id, slot_id)] = done
        voided = self.journal.units_from(job_id, slot_id, done)
        if not rolled_back and not any(self._committed(job_id, slot_id, u.index) for u in voided):
            return
        log.warning(
            "job=%d slot=%d: rolled back to unit %d: training again from the last good checkpoint",
            job_id,
            slot_id,
            done,
        )
        with self.journal.transaction():
            self.journal.drop_units(job_id, slot_id, done)
            for unit in voided:
                self.journal.forget_outgoing(unit_key(job_id, slot_id, unit.index))
        for unit in voided:
            self._metrics.pop((job_id, slot_id, unit.index), None)
        if self._last is not None and self._last[0][:2] == (job_id, slot_id):
            self._last = None  # a voided state, or one also on chain

    def reorganized(self, fork: int) -> None:
        """A reorg that dropped commits of ours lowers their slots' `unitsDone` with no rollback:
        the outbox sends those commits again and the journal keeps their units, so the values
        read before the reorg are forgotten rather than taken for a rollback. A job id may name
        another job on the chain kept, so the specs read by job id are forgotten too."""
        self._reached.clear()
        self.specs.forget()

    def _committed(self, job_id: int, slot_id: int, index: int) -> bool:
        outgoing = self.journal.outgoing(unit_key(job_id, slot_id, index))
        return outgoing is not None and outgoing.done

    def _in_memory(self, job_id: int, slot_id: int, index: int) -> bool:
        return self._last is not None and self._last[0] == (job_id, slot_id, index)

    def keep_state(self, data: bytes) -> str:
        """Put an intermediate state on this node's IPFS node and pin it on the replicas, where
        the unit's checkpoint goes: a verifier of another execution class re-runs from it in a
        dispute, and one that no node serves fails the unit."""
        cid = self.storage.add_bytes(data)
        self.storage.pin(cid, replicas=self.replicas)
        return cid

    def _keep_segment(self, segment: dict[str, Any], state: Checkpoint) -> None:
        """Keep a segment's state (`keep_state`) and name it in the record."""
        segment["cid"] = self.keep_state(state.to_bytes())

    def _train(self, job_id: int, slot_id: int, index: int) -> Unit:
        """Train unit `index` and journal it once its checkpoint is on this node's IPFS node."""
        spec = self.specs.of_job(job_id)
        began = time.monotonic()
        start = self._checkpoint(job_id, slot_id, index - 1) if index else None
        fetched = time.monotonic()
        result = run_unit(
            spec,
            start,
            unit_shard(spec, slot_id),
            unit_steps(spec, index),
            storage=self.storage,
            local_data=self.local_data,
            limits=self.specs.limits,
            device=self.device,
            speed=self.specs.speed(spec),
            on_segment=self._keep_segment,
        )
        trained = time.monotonic()
        seconds = trained - fetched
        cid = self.storage.add_bytes(result.checkpoint.to_bytes())
        unit = Unit(job_id, slot_id, index, cid, result.state_hash, seconds)
        self.journal.add_unit(unit)
        self._last = ((job_id, slot_id, index), result.checkpoint)
        self._metrics[(job_id, slot_id, index)] = result.metrics
        log.info(
            "job=%d slot=%d unit=%d: trained in %.2fs (steps %.2fs, start state %.3fs, saved in "
            "%.3fs) loss=%s cid=%s",
            job_id,
            slot_id,
            index,
            seconds,
            result.metrics["seconds"],
            fetched - began,
            time.monotonic() - trained,
            result.metrics.get("loss"),
            cid,
        )
        return unit

    def _checkpoint(self, job_id: int, slot_id: int, index: int) -> Checkpoint:
        """The checkpoint of unit `index`: kept from training it here, else fetched by the CID of
        its latest CheckpointCommitted (after a restart, or a re-auctioned slot resuming another's
        work)."""
        if self._last is not None and self._last[0] == (job_id, slot_id, index):
            return self._last[1]
        unit = self.committed(job_id, slot_id, index)
        log.info("job=%d slot=%d: resuming from unit %d (%s)", job_id, slot_id, index, unit.cid)
        try:
            bound = checkpoint_bytes(self.specs.of_job(job_id))
            checkpoint = Checkpoint.load(self.storage.cat(unit.cid, max_bytes=bound))
        except (CheckpointError, ContentTooLarge, ContentNotFound) as exc:
            # not found on any node: withheld, or not there yet; verifiers re-running a flagged
            # unit judge which (an honest unit passes), and the next tick looks again
            self.reject_input(unit, f"its checkpoint cannot be read: {exc}")
        if checkpoint.state_hash() != unit.state_hash.hex():
            self.reject_input(unit, "its checkpoint does not hold the state it committed")
        return checkpoint

    def reject_input(self, unit: CommittedUnit, reason: str) -> NoReturn:
        """Work built on a bad unit would be bad work: flag the unit, so that verifiers re-run
        it whether or not it was sampled (a confirmed failure rolls the slot back past it), and
        train nothing on it."""
        log.error(
            "job=%d slot=%d: not resuming from unit %d, %s",
            unit.job_id,
            unit.slot,
            unit.index,
            reason,
        )
        flag = self.ledger.flag_unit_call(unit)
        try:
            self.outbox.send(f"flag:{unit.job_id}:{unit.slot}:{unit.index}", flag)
        except ChainError as exc:
            log.info("unit %d not flagged: %s", unit.index, exc)
        raise BadInput(f"job {unit.job_id} slot {unit.slot} unit {unit.index}: {reason}")

    def committed(self, job_id: int, slot_id: int, index: int) -> CommittedUnit:
        """The slot's live commitment of unit `index`."""
        unit = self.ledger.committed_unit(job_id, slot_id, index)
        if unit is None:
            raise ChainError(
                f"job {job_id} slot {slot_id}: no checkpoint committed as unit {index}"
            )
        return unit

    def committed_cid(self, job_id: int, slot_id: int, index: int) -> str:
        """The CID of the slot's live unit `index`."""
        return self.committed(job_id, slot_id, index).cid

    def commit(self, unit: Unit, slot: dict, interval: int) -> None:
        """Pin the unit's checkpoint on the replicas, then commit it. Nothing is metered: the
        market pays a unit what the job fixed it is worth, however long it took here, so a commit
        goes out as soon as its checkpoint is pinned."""
        began = time.monotonic()
        self.storage.pin(unit.cid, replicas=self.replicas)
        pinned = time.monotonic()
        late = chain_time(self.ledger.w3) - slot["lastCheckpointAt"] - interval
        if late > 0:
            log.warning(
                "job=%d slot=%d unit=%d: past the checkpoint deadline by %ds",
                unit.job_id,
                unit.slot,
                unit.index,
                late,
            )
        fn = self.ledger.commit_checkpoint_call(
            unit.job_id, unit.slot, unit.index, unit.cid, bytes.fromhex(unit.state_hash)
        )
        receipt = self.outbox.send(unit_key(unit.job_id, unit.slot, unit.index), fn)
        log.info(
            "job=%d slot=%d unit=%d: committed (pinned in %.3fs, mined in %.3fs) cid=%s",
            unit.job_id,
            unit.slot,
            unit.index,
            pinned - began,
            time.monotonic() - pinned,
            unit.cid,
        )
        metrics = self._metrics.pop((unit.job_id, unit.slot, unit.index), None)
        if self.job_log is not None:
            self.job_log.post(
                unit.job_id,
                committed_line(unit, metrics, slot["unitGpuSeconds"], receipt["blockNumber"]),
            )


def committed_line(unit: Unit, metrics: dict | None, unit_gpu_seconds: int, block: int) -> str:
    """A unit's line in its job's log: what the chain took, and the training figures of a unit
    trained in this process (a unit committed from the journal after a restart has none at hand)."""
    trained = ""
    if metrics is not None:
        trained = (
            f"steps {metrics['start_step']} to {metrics['end_step']}, loss {metrics['loss']:.4f}, "
        )
    return (
        f"slot {unit.slot} unit {unit.index}: {trained}checkpoint {unit.cid} "
        f"(worth {unit_gpu_seconds} GPU-seconds) committed in block {block}"
    )
