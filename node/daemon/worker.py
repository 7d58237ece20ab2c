"""Work units for the slots this provider holds: fetch by CID, train, pin, commit before the deadline."""

from __future__ import annotations

import logging
import math
import threading
import time

from eth_account.signers.local import LocalAccount

from marketplace.chain.errors import ChainError
from marketplace.chain.ledger import JobStatus, Ledger
from marketplace.errors import ZooError
from marketplace.storage import Storage
from node.engine import Checkpoint, JobSpec, SpecError, parse_spec, run_unit
from node.work import unit_shard, unit_steps, units_per_node

from .chainview import chain_time, spec_cid
from .journal import Journal, Unit
from .outbox import Outbox

log = logging.getLogger(__name__)

UINT32_MAX = 2**32 - 1


class JobUnfit(ZooError, ValueError):
    """A job this node cannot deliver: its spec does not parse or has fewer units than asked."""


class Specs:
    """Job specs by job id (fetched by the CID the job was created with), parsed once. Bidding and training read them from different threads,
    and a Storage serves one thread, so reads go through a lock."""

    def __init__(self, ledger: Ledger, storage: Storage):
        self._ledger = ledger
        self._storage = storage
        self._parsed: dict[int, JobSpec] = {}
        self._lock = threading.Lock()

    def of_job(self, job_id: int) -> JobSpec:
        with self._lock:
            if job_id not in self._parsed:
                cid = spec_cid(self._ledger, job_id)
                try:
                    self._parsed[job_id] = parse_spec(self._storage.cat(cid).decode())
                except (SpecError, UnicodeDecodeError) as exc:
                    raise JobUnfit(f"spec {cid} is not a job spec: {exc}") from None
            return self._parsed[job_id]

    def check_job(self, job_id: int, job: dict) -> None:
        """Refuse, before bidding, a job whose units this node could not compute."""
        spec = self.of_job(job_id)
        if job["unitsPerNode"] > units_per_node(spec):
            raise JobUnfit(f"the job asks {job['unitsPerNode']} units per node; its spec has "
                           f"{units_per_node(spec)}")


class Worker:
    """Delivers one unit at a time. A unit's checkpoint is pinned and journaled before its commit,
    so a crash after training never trains it again, and the unit index always comes from the
    chain's `unitsDone`, so none is skipped or committed twice."""

    def __init__(self, ledger: Ledger, account: LocalAccount, journal: Journal, outbox: Outbox,
                 specs: Specs, storage: Storage, replicas: int, device: str | None = None):
        self.ledger = ledger
        self.account = account
        self.journal = journal
        self.outbox = outbox
        self.specs = specs
        self.storage = storage  # this worker thread's own
        self.replicas = replicas
        self.device = device
        self._last: tuple[tuple[int, int, int], Checkpoint] | None = None  # the latest unit trained here

    def step(self, job_id: int, slot_id: int) -> None:
        """Deliver the slot's next unit, or record that the slot is no longer ours to work."""
        slot = self.ledger.slot(job_id, slot_id)
        if slot["provider"] != self.account.address:
            log.warning("job=%d slot=%d: no longer ours", job_id, slot_id)
            self.journal.end_slot(job_id, slot_id, "lost")
            return
        if slot["done"]:
            log.info("job=%d slot=%d: finished", job_id, slot_id)
            self.journal.end_slot(job_id, slot_id, "finished")
            return
        job = self.ledger.job(job_id)
        if job["status"] != JobStatus.RUNNING:
            return
        index = slot["unitsDone"]
        unit = self.journal.unit(job_id, slot_id, index) or self._train(job_id, job, slot_id, index)
        self._commit(unit, slot, job["checkpointInterval"])

    def _train(self, job_id: int, job: dict, slot_id: int, index: int) -> Unit:
        spec = self.specs.of_job(job_id)
        start = self._checkpoint(job_id, slot_id, index - 1) if index else None
        began = time.monotonic()
        result = run_unit(spec, start, unit_shard(spec, slot_id), unit_steps(spec, index),
                          storage=self.storage, device=self.device)
        seconds = time.monotonic() - began
        cid = self.storage.add_bytes(result.checkpoint.to_bytes())
        self.storage.pin(cid, replicas=self.replicas)
        unit = Unit(job_id, slot_id, index, cid, result.state_hash, seconds)
        self.journal.add_unit(unit)
        self._last = ((job_id, slot_id, index), result.checkpoint)
        log.info("job=%d slot=%d unit=%d: trained in %.1fs loss=%s cid=%s", job_id, slot_id, index,
                 seconds, result.metrics.get("loss"), cid)
        return unit

    def _checkpoint(self, job_id: int, slot_id: int, index: int) -> Checkpoint:
        """The checkpoint committed as unit `index`: kept from training it here, else fetched by
        the CID of its latest CheckpointCommitted (a re-auctioned slot resumes another's work)."""
        if self._last is not None and self._last[0] == (job_id, slot_id, index):
            return self._last[1]
        events = [e for e in self.ledger.market.events.CheckpointCommitted().get_logs(
            from_block=self.ledger.deployment.deploy_block,
            argument_filters={"jobId": job_id, "slot": slot_id},
        ) if e["args"]["index"] == index]
        if not events:
            raise ChainError(f"job {job_id} slot {slot_id}: no checkpoint committed as unit {index}")
        cid = events[-1]["args"]["cid"]
        log.info("job=%d slot=%d: resuming from unit %d (%s)", job_id, slot_id, index, cid)
        return Checkpoint.load(self.storage.cat(cid))

    def _commit(self, unit: Unit, slot: dict, interval: int) -> None:
        """Meter the wall time the unit took, capped by the chain's clock since the slot's last
        checkpoint, on the slot's GPU count (a CPU node is 1)."""
        elapsed = chain_time(self.ledger.w3) - slot["lastCheckpointAt"]
        if elapsed > interval:
            log.warning("job=%d slot=%d unit=%d: past the checkpoint deadline by %ds", unit.job_id,
                        unit.slot, unit.index, elapsed - interval)
        gpu_seconds = min(UINT32_MAX, min(math.ceil(unit.seconds), max(elapsed, 0)) * slot["gpus"])
        fn = self.ledger.market.functions.commitCheckpoint(
            unit.job_id, unit.slot, gpu_seconds, unit.cid, bytes.fromhex(unit.state_hash))
        self.outbox.send(f"unit:{unit.job_id}:{unit.slot}:{unit.index}", fn)
        log.info("job=%d slot=%d unit=%d: committed gpu_seconds=%d cid=%s", unit.job_id, unit.slot,
                 unit.index, gpu_seconds, unit.cid)
