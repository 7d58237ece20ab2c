"""A slot of a group job: this provider's rank of the job's DiLoCo group, one unit per round.

The rank trains in a child process for the whole job, because the group's collectives and
round board only work while every rank keeps its process group alive. The daemon's thread
meanwhile pins each round the rank finished (its inputs and the payload it sent, a rank
bundle: see node/work.py) and commits it as the slot's next unit, so the chain sees the
group's progress round by round and a verifier can re-run any rank's round.

The group finds itself through the chain: ranks are slot indices, and rank 0's TCPStore
listens on the endpoint its provider registered with the Staking contract.
"""

from __future__ import annotations

import json
import logging
import multiprocessing
import shutil
import threading
import time
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from urllib.parse import urlsplit

from marketplace.chain.ledger import Ledger
from marketplace.errors import ZooError
from node.distributed.diloco import DilocoConfig, diloco_rank
from node.distributed.exchange import update_path
from node.distributed.group import Tamper, join_and_run
from node.distributed.rank_unit import RankUnit, unit_path, update_sha256
from node.engine import JobSpec
from node.work import diloco_config, is_group_job, rank_bundle, units_per_node

from .chainview import struct
from .journal import Unit
from .worker import JobUnfit, Worker

log = logging.getLogger(__name__)

RENDEZVOUS_TIMEOUT = timedelta(minutes=5)  # how long a rank waits for the others to join
ROUND_POLL = 0.2  # seconds between looks at the rank's folder
CHAIN_POLL = 2.0  # seconds between looks at whether the slot is still ours to deliver


class GroupFailed(ZooError):
    """The group could not form, or this rank's process ended before its last round."""


def rendezvous(ledger: Ledger, job_id: int) -> tuple[str, int]:
    """Host and port of the job's group: the endpoint registered by the holder of slot 0."""
    provider = ledger.slot(job_id, 0)["provider"]
    return meeting_point(struct(ledger.staking, "hardware", provider)["endpoint"])


def meeting_point(endpoint: str) -> tuple[str, int]:
    """The host and port of a registered endpoint, a URL or `host:port`: a node accepts group
    rendezvous on its endpoint's port."""
    parts = urlsplit(endpoint if "//" in endpoint else f"tcp://{endpoint}")
    try:
        port = parts.port
    except ValueError:
        port = None
    if not parts.hostname or port is None:
        raise GroupFailed(f"endpoint {endpoint!r} names no host and port for a group to meet at")
    return parts.hostname, port


def run_rank(
    spec: JobSpec,
    config: DilocoConfig,
    rank: int,
    host: str,
    port: int,
    report: str,
    tamper: Tamper | None = None,
) -> None:
    """One rank of the group, in its own process: join at `host:port`, train every round.

    `tamper` replaces what the rank sends, to play a Byzantine rank in tests."""
    join_and_run(rank, config.ranks, host, port, diloco_rank, (spec, config, tamper, None),
                 Path(report), timeout=RENDEZVOUS_TIMEOUT)


class GroupWorker:
    """Runs this node's rank of a group job and commits its rounds through the `Worker`'s
    commit path (pinning on the replicas, metering, the outbox)."""

    def __init__(self, worker: Worker, scratch: Path):
        self.worker = worker
        self.scratch = scratch  # rank folders live here, one per job and slot

    def check_job(self, job_id: int, job: dict) -> None:
        """Refuse, before bidding, a job this node could not deliver (see `Specs.check_job`), or a
        group job while this node registered no endpoint: it might win slot 0 and host the group."""
        self.worker.specs.check_job(job_id, job)
        if is_group_job(self.worker.specs.of_job(job_id)):
            ledger, address = self.worker.ledger, self.worker.account.address
            try:
                meeting_point(struct(ledger.staking, "hardware", address)["endpoint"])
            except GroupFailed as exc:
                raise JobUnfit(f"a group job needs a rendezvous endpoint: {exc}") from None

    def run(self, job_id: int, slot_id: int, stop: threading.Event) -> None:
        held = self.worker.deliverable(job_id, slot_id)
        if held is None:
            return
        slot, _ = held
        if slot["unitsDone"]:
            raise GroupFailed(
                f"job {job_id} slot {slot_id}: rejoining a group mid-job (from round "
                f"{slot['unitsDone']}) is not supported"
            )
        spec = self.worker.specs.of_job(job_id)
        folder = self.scratch / f"job-{job_id}-slot-{slot_id}"
        shutil.rmtree(folder, ignore_errors=True)  # rounds of an attempt that never committed
        config = replace(diloco_config(spec), updates_dir=str(folder))
        host, port = rendezvous(self.worker.ledger, job_id)
        log.info(
            "job=%d: rank %d of %d, meeting at %s:%d", job_id, slot_id, config.ranks, host, port
        )
        rank = multiprocessing.get_context("spawn").Process(
            target=run_rank,
            args=(spec, config, slot_id, host, port, str(folder / "report.json")),
            name=f"rank-{job_id}-{slot_id}",
            daemon=True,
        )
        rank.start()
        try:
            began = time.monotonic()
            rounds = units_per_node(spec)
            for round_ in range(rounds):
                if not self._await_round(rank, job_id, slot_id, round_, folder, stop):
                    return
                finished = time.monotonic()
                self._commit(job_id, slot_id, round_, folder, finished - began, last=round_ == rounds - 1)
                began = finished
            rank.join()
            report = json.loads((folder / "report.json").read_text())
            log.info(
                "job=%d: rank %d done, sent %d bytes in %d rounds",
                job_id,
                slot_id,
                report["bytes_sent"],
                len(report["commitments"]),
            )
        finally:
            if rank.is_alive():
                rank.terminate()
                rank.join()

    def _await_round(
        self,
        rank: multiprocessing.Process,
        job_id: int,
        slot_id: int,
        round_: int,
        folder: Path,
        stop: threading.Event,
    ) -> bool:
        """Wait until `round_` is complete on disk: the next round's inputs (after the last
        round, the trained model) are saved only after this round's payload was sent.
        False when asked to stop, or once the slot is no longer this node's to deliver (the job
        was stopped, or the slot lost): a rank waiting on a group that ended is let go."""
        following = unit_path(folder, round_ + 1, slot_id)
        looked = time.monotonic()
        while not following.exists() and rank.is_alive():
            if stop.wait(ROUND_POLL):
                return False
            if time.monotonic() - looked > CHAIN_POLL:
                if self.worker.deliverable(job_id, slot_id) is None:
                    return False
                looked = time.monotonic()
        if not following.exists():
            raise GroupFailed(f"rank {slot_id} exited with {rank.exitcode} in round {round_}")
        return True

    def _commit(self, job_id: int, slot_id: int, round_: int, folder: Path, seconds: float, last: bool) -> None:
        payload = update_path(folder, round_, slot_id).read_bytes()
        inputs = RankUnit.load(unit_path(folder, round_, slot_id))
        weights = RankUnit.load(unit_path(folder, round_ + 1, slot_id)).trainer["model"] if last else None
        cid = self.worker.storage.add_bytes(rank_bundle(inputs, payload, weights))
        unit = Unit(job_id, slot_id, round_, cid, update_sha256(payload), seconds)
        self.worker.journal.add_unit(unit)
        slot = self.worker.ledger.slot(job_id, slot_id)
        self.worker.commit(unit, slot, self.worker.ledger.job(job_id)["checkpointInterval"])
