"""A slot of a group job: this provider's rank of the job's ddp or DiLoCo group, unit by unit.

The rank trains in a child process for the whole job, because the group's collectives and
round board only work while the rank's process stays in the group. The daemon's thread
meanwhile pins each unit the rank finished (its inputs and what it sent; in ddp also what
the others sent at each step: a rank bundle, see marketplace/protocol/rank_bundle.py) and
commits it as the slot's next unit, so the chain sees the group's progress unit by unit and a
verifier can re-run any rank's unit.

The group finds itself through the chain: ranks are slot indices, and rank 0's store
(node/distributed/store.py) listens on the endpoint its provider registered with the Staking
contract.

A rank can be taken over mid-job when the group's rounds have a deadline (the others go on
with a quorum meanwhile): a provider that won the slot in its re-auction, or this node after
a restart, starts from the slot's last committed bundle, re-runs that unit and catches up
on the group's weights from the rounds the group committed since, written down from their
records (`exchange.settle_round`), then from the board. So a group whose host dropped, and
its board with it, meets again at slot 0's next holder's endpoint: each rank's daemon lets
its rank go once slot 0 changed hands and starts it again from its last committed unit.

A round's robust aggregation may exclude a rank: the lowest rank it kept flags the excluded
ranks' units holding that round on-chain once they are committed, and verifiers re-run them
whatever their sample.
"""

from __future__ import annotations

import functools
import json
import logging
import multiprocessing
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import timedelta
from multiprocessing.process import BaseProcess
from pathlib import Path
from urllib.parse import urlsplit

import torch.distributed as dist

from marketplace.chain.errors import ContractRevert
from marketplace.chain.ledger import ZERO_ADDRESS, Ledger
from marketplace.errors import ZooError
from marketplace.protocol.rank_bundle import (
    RankBundle,
    RecordedRound,
    load_rank_bundle,
    update_sha256,
)
from marketplace.protocol.round_signatures import RoundSigners, signed_by_a_holder
from marketplace.protocol.spec import JobSpec
from marketplace.protocol.terms import JobStatus
from marketplace.protocol.units import UnitFormatError, is_group_job, is_last_unit, units_per_node
from marketplace.runtime.loop import TRANSIENT
from marketplace.storage import ContentNotFound, ContentTooLarge, StorageError
from node.distributed.exchange import (
    aggregate_path,
    recorded_round,
    sent_in,
    settle_round,
    update_path,
)
from node.distributed.group import GroupConfig
from node.distributed.job import group_config, rank_bundle_bytes, run_rank, unit_bundle
from node.distributed.quorum import RoundBoard
from node.distributed.rank_unit import inputs_problem, unit_path
from node.distributed.signing import RoundSigning
from node.distributed.store import GroupStore
from node.engine import DataError

from .journal import Unit
from .worker import JobUnfit, Worker

log = logging.getLogger(__name__)

HOLDERS = "holders.json"  # in a rank's folder: the job's slot holders, as the chain has them
ROUND_POLL = 0.2  # seconds between looks at the rank's folder
CHAIN_POLL = 2.0  # seconds between looks at whether the slot is still ours to deliver
BOARD_TIMEOUT = timedelta(seconds=30)  # for the host's daemon to reach its rank's board
# Reverts of flagUnit that leave nothing to do: another rank flagged it first, or it is too late.
NOT_FLAGGABLE = ("AlreadyFlagged", "VerificationWindowClosed", "NotInTheJob", "UnitMismatch")


class GroupFailed(ZooError):
    """The group could not form, or this rank's process ended before its last round."""


def _host_board(host: str, port: int, config: GroupConfig) -> RoundBoard:
    """The board this node's rank hosts, as its daemon reaches it: logged in as rank 0."""
    assert config.deadline_s is not None, "a group whose rounds have a deadline uses a board"
    store = GroupStore(host, port, 0, config.round_signing, BOARD_TIMEOUT)
    return RoundBoard(store, config.ranks, config.fewest_members, config.deadline_s)


def rendezvous(ledger: Ledger, job_id: int) -> tuple[str, int]:
    """Host and port of the job's group: the endpoint registered by the holder of slot 0."""
    provider = ledger.slot(job_id, 0)["provider"]
    return meeting_point(ledger.hardware(provider)["endpoint"])


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


class GroupWorker:
    """Runs this node's rank of a group job and commits its rounds through the `Worker`'s
    commit path (pinning on the replicas, metering, the outbox)."""

    def __init__(self, worker: Worker, scratch: Path):
        self.worker = worker
        self.scratch = scratch  # rank folders live here, one per job and slot
        self._to_flag: list[tuple[int, int]] = []  # (rank, round) to flag once committed
        # what the rank's holders file holds: the holders, and the last exchange it may join
        self._holders: tuple[tuple[str, ...], int] | None = None
        self._open_through = 0
        self._host: str | None = None  # slot 0's provider, whose board the rank joined

    def check_job(self, job_id: int, job: dict) -> None:
        """Refuse, before bidding, a job this node could not deliver (see `Specs.check_job`), or a
        group job while this node registered no endpoint: it might win slot 0 and host the group."""
        self.worker.specs.check_job(job_id, job)
        try:
            self.worker.local_data.check(self.worker.specs.of_job(job_id).data)
        except DataError as exc:
            raise JobUnfit(f"its data is not readable here: {exc}") from None
        if is_group_job(self.worker.specs.of_job(job_id)):
            ledger, address = self.worker.ledger, self.worker.account.address
            try:
                meeting_point(ledger.hardware(address)["endpoint"])
            except GroupFailed as exc:
                raise JobUnfit(f"a group job needs a rendezvous endpoint: {exc}") from None

    def run(self, job_id: int, slot_id: int, stop: threading.Event) -> None:
        held = self.worker.deliverable(job_id, slot_id)
        if held is None:
            return
        slot, _ = held
        self._host = self.worker.ledger.slot(job_id, 0)["provider"]
        if self._host == ZERO_ADDRESS:
            log.info("job=%d: the group waits for slot 0's next holder, its host", job_id)
            return
        spec = self.worker.specs.of_job(job_id)
        folder = self.scratch / f"job-{job_id}-slot-{slot_id}"
        own = _own_rounds(folder)
        shutil.rmtree(folder, ignore_errors=True)  # the rest of an attempt that never committed
        self._holders = None
        config = group_config(spec)
        done = slot["unitsDone"]
        self._open_through = _open_through(spec, config, done - 1)
        signing = RoundSigning(
            job_id,
            self._note_holders(job_id, config.ranks, folder),
            {slot_id: bytes(self.worker.account.key)},
            str(folder / HOLDERS),
        )
        config = replace(config, updates_dir=str(folder), signing=signing)
        taken_over = (
            self._last_unit(job_id, slot_id, done - 1, spec, config.uses_board) if done else None
        )
        if config.uses_board:
            self._settle(job_id, taken_over, spec, config, folder, own)
        host, port = rendezvous(self.worker.ledger, job_id)
        log.info(
            "job=%d: rank %d of %d from unit %d, meeting at %s:%d",
            job_id,
            slot_id,
            config.ranks,
            done,
            host,
            port,
        )
        start = None if taken_over is None else taken_over.unit
        rank = multiprocessing.get_context("spawn").Process(
            target=run_rank,
            args=(spec, config, slot_id, host, port, str(folder / "report.json"), None, start),
            kwargs={"keep_board": True},  # until the job ends: see `_await_exit`
            name=f"rank-{job_id}-{slot_id}",
            daemon=True,
        )
        rank.start()
        self._to_flag = []
        # the host clears its board of the rounds every slot committed (`_clear_board`), reached
        # once its rank's process has opened it
        board = functools.cache(lambda: _host_board(host, port, config))
        cleared = done
        try:
            if taken_over is not None and not self._replay(
                rank, job_id, slot_id, taken_over, spec, config, folder, stop
            ):
                return
            began = time.monotonic()
            units = units_per_node(spec)
            for index in range(done, units):
                rounds = config.unit_rounds(spec, index)
                if not self._await_unit(rank, job_id, slot_id, index, folder, config, rounds, stop):
                    return
                finished = time.monotonic()
                self._commit(
                    job_id,
                    slot_id,
                    index,
                    spec,
                    config,
                    folder,
                    finished - began,
                    last=is_last_unit(spec, index),
                )
                began = finished
                if slot_id == 0 and config.uses_board:
                    cleared = self._clear_board(job_id, spec, config, board, cleared)
            if not self._await_exit(rank, job_id, stop) or not (folder / "report.json").exists():
                return
            report = json.loads((folder / "report.json").read_text())
            log.info(
                "job=%d: rank %d done, sent %d bytes in %d exchanges",
                job_id,
                slot_id,
                report["bytes_sent"],
                len(report["commitments"]),
            )
        finally:
            if rank.is_alive():
                rank.terminate()
                rank.join()

    def _note_holders(self, job_id: int, ranks: int, folder: Path) -> tuple[str, ...]:
        """Write down who holds each slot of the job now, for the rank to check what each slot
        sends against (`RoundSigning.holders_file`): a slot handed over mid-job signs with its
        new holder's key from then on. With them goes the last exchange the rank may take part
        in (`_open_through`), which a look at the chain after a commit moves on."""
        ledger = self.worker.ledger
        holders = tuple(ledger.slot(job_id, slot)["provider"] for slot in range(ranks))
        if (holders, self._open_through) != self._holders:
            path = folder / HOLDERS
            path.parent.mkdir(parents=True, exist_ok=True)
            partial = path.with_name(path.name + ".partial")
            partial.write_text(json.dumps({"holders": holders, "open_through": self._open_through}))
            partial.replace(path)  # whole or not at all: the rank reads it at any time
            self._holders = holders, self._open_through
        return holders

    def _last_unit(
        self, job_id: int, slot_id: int, index: int, spec: JobSpec, uses_board: bool
    ) -> RankBundle:
        """The slot's last committed unit, to take the rank over from (this node restarted, or
        won the slot after its provider dropped out). Only a group whose rounds have a deadline
        goes on without a rank and lets one join late; the others wait for every rank. A unit
        whose bundle cannot be read, is another's or does not hold the payload it committed is
        flagged, as a single node's bad checkpoint is (`Worker.reject_input`)."""
        if not uses_board:
            raise GroupFailed(
                f"job {job_id} slot {slot_id}: taking a rank over mid-job (from unit {index + 1}) "
                "needs rounds with a deadline (distributed.unit_deadline_s and a quorum)"
            )
        unit = self.worker.committed(job_id, slot_id, index)
        log.info(
            "job=%d slot=%d: taking the rank over from unit %d (%s)",
            job_id,
            slot_id,
            index,
            unit.cid,
        )
        try:
            bundle = load_rank_bundle(
                self.worker.storage.cat(unit.cid, max_bytes=rank_bundle_bytes(spec))
            )
        except (ContentNotFound, ContentTooLarge, UnitFormatError) as exc:
            self.worker.reject_input(unit, f"its rank bundle cannot be read: {exc}")
        if (bundle.unit.rank, bundle.unit.round_) != (slot_id, index):
            self.worker.reject_input(unit, "its rank bundle is another rank's or unit's")
        if update_sha256(bundle.payload) != unit.state_hash.hex():
            self.worker.reject_input(unit, "its rank bundle does not hold the payload it committed")
        problem = inputs_problem(spec, bundle.unit)
        if problem is not None:
            self.worker.reject_input(unit, problem)
        return bundle

    def _settle(
        self,
        job_id: int,
        taken_over: RankBundle | None,
        spec: JobSpec,
        config: GroupConfig,
        folder: Path,
        own: dict[int, RecordedRound],
    ) -> None:
        """Write down, for the rank to go through as they were, the rounds the group closed from
        the rank's first unit to train on: each as the rank itself recorded it in an attempt
        that did not commit it (`own`), else as the slot's last committed unit records it, else
        as the lowest slot that committed its unit with a record that holds (`_vouched`). On a
        new board (the host dropped) they are gone, and on any board they must be met as they
        were: a rank that met a round otherwise than before would sign another payload for a
        round it signed one for, and a peer's record of the first would fail it. Settling ends
        before the first round with no such record: from there the rank exchanges."""
        ledger = self.worker.ledger
        ranks = range(config.ranks)
        done = [ledger.slot(job_id, slot)["unitsDone"] for slot in ranks]
        tenures = ledger.slot_tenures(job_id, config.ranks)
        signers = RoundSigners(
            job_id, {}, {slot: config.tenures(spec, held) for slot, held in enumerate(tenures)}
        )

        def vouched(index: int, records: list[RecordedRound] | None) -> bool:
            rounds = config.unit_rounds(spec, index)
            return (
                records is not None
                and len(records) == len(rounds)
                and all(
                    _vouched(signers, round_, recorded, config.fewest_members)
                    for round_, recorded in zip(rounds, records)
                )
            )

        index = 0 if taken_over is None else taken_over.unit.round_
        while True:
            if taken_over is not None and index == taken_over.unit.round_:
                records = taken_over.rounds if vouched(index, taken_over.rounds) else None
            else:
                records = self._committed_rounds(job_id, index, done, spec, vouched)
            for position, round_ in enumerate(config.unit_rounds(spec, index)):
                recorded = own.get(round_) or (records[position] if records else None)
                if recorded is None:
                    return
                settle_round(folder, round_, recorded)
            index += 1

    def _committed_rounds(
        self,
        job_id: int,
        index: int,
        done: list[int],
        spec: JobSpec,
        vouched: Callable[[int, list[RecordedRound] | None], bool],
    ) -> list[RecordedRound] | None:
        """Unit `index`'s rounds as the lowest slot that committed it with records that hold
        recorded them; None when no slot did. A slot's bundle out of reach, or records that do
        not hold, cost the rank a look at the next slot's, not the round."""
        for slot in [slot for slot, units in enumerate(done) if units > index]:
            cid = self.worker.committed_cid(job_id, slot, index)
            try:
                bundle = load_rank_bundle(
                    self.worker.storage.cat(cid, max_bytes=rank_bundle_bytes(spec))
                )
            except (StorageError, UnitFormatError) as exc:
                log.warning("job=%d: unit %d of slot %d unread (%s)", job_id, index, slot, exc)
                continue
            if vouched(index, bundle.rounds):
                return bundle.rounds
            log.warning(
                "job=%d: slot %d's unit %d records rounds that could not have closed as recorded",
                job_id,
                slot,
                index,
            )
        return None

    def _replay(
        self,
        rank: BaseProcess,
        job_id: int,
        slot_id: int,
        taken_over: RankBundle,
        spec: JobSpec,
        config: GroupConfig,
        folder: Path,
        stop: threading.Event,
    ) -> bool:
        """Let the rank re-run the last committed unit from its inputs, for the state the unit
        left (optimizer, data position, residual; the group's aggregates come from the board).
        It must send the committed payloads again, or it would go on from another state."""
        index = taken_over.unit.round_
        rounds = config.unit_rounds(spec, index)
        if not self._await_unit(rank, job_id, slot_id, index, folder, config, rounds, stop):
            return False
        if sent_in(folder, rounds, slot_id) != taken_over.payload:
            raise GroupFailed(
                f"job {job_id} slot {slot_id}: unit {index} re-run from its inputs "
                "does not give the payload the slot committed"
            )
        return True

    def _await_exit(self, rank: BaseProcess, job_id: int, stop: threading.Event) -> bool:
        """Wait for the rank's process to leave the group, or for the job to end: rank 0 hosts
        the group's board and keeps it until then, for a rank that trained but dropped out
        before committing is re-run from the board by its successor. False when asked to stop."""
        looked = time.monotonic()
        while rank.is_alive():
            if stop.wait(ROUND_POLL):
                return False
            if time.monotonic() - looked > CHAIN_POLL:
                with self._chain_blip(job_id):
                    if self.worker.ledger.job(job_id)["status"] != JobStatus.RUNNING:
                        return True  # every rank is done, or none will be
                    if self._host_moved(job_id):
                        return False
                    self._flag_committed(job_id)
                looked = time.monotonic()
        return True

    def _host_moved(self, job_id: int) -> bool:
        """Whether slot 0, whose provider hosts the group's board, changed hands since the rank
        joined: its board is gone with its holder, and the rank meets the group again at the
        next holder's, from its last committed unit."""
        if self.worker.ledger.slot(job_id, 0)["provider"] == self._host:
            return False
        log.warning("job=%d: slot 0 changed hands; the rank meets the group again", job_id)
        return True

    @contextmanager
    def _chain_blip(self, job_id: int) -> Iterator[None]:
        """Let a look at the chain fail for now (the RPC node restarting, say): the rank goes on
        training and the next look tries again, rather than the group losing the rank."""
        try:
            yield
        except TRANSIENT as exc:
            log.warning("job=%d: could not look at the chain, trying again: %s", job_id, exc)

    def _await_unit(
        self,
        rank: BaseProcess,
        job_id: int,
        slot_id: int,
        index: int,
        folder: Path,
        config: GroupConfig,
        rounds: range,
        stop: threading.Event,
    ) -> bool:
        """Wait until unit `index` (`rounds`) is complete in the rank's `folder`: the next unit's
        inputs (after the last unit, the trained model) are saved only after this unit's payloads
        were sent. False when asked to stop, or once the slot is no longer this node's to deliver
        (the job was stopped, or the slot lost), its host moved or the rank waits on a round its
        board will never close: a rank waiting on a group that ended is let go."""
        following = unit_path(folder, index + 1, slot_id)
        looked = time.monotonic()
        while not following.exists() and rank.is_alive():
            if stop.wait(ROUND_POLL):
                return False
            if time.monotonic() - looked > CHAIN_POLL:
                with self._chain_blip(job_id):
                    if (
                        self.worker.deliverable(job_id, slot_id) is None
                        or self._host_moved(job_id)
                        or self._settled_elsewhere(
                            job_id, slot_id, index, config, _posted(folder, rounds, slot_id)
                        )
                    ):
                        return False
                    self._flag_committed(job_id)
                    self._note_holders(job_id, config.ranks, folder)
                looked = time.monotonic()
        if not following.exists():
            raise GroupFailed(f"rank {slot_id} exited with {rank.exitcode} in unit {index}")
        return True

    def _clear_board(
        self,
        job_id: int,
        spec: JobSpec,
        config: GroupConfig,
        board: Callable[[], RoundBoard],
        cleared: int,
    ) -> int:
        """Take the rounds of the units every slot committed, from unit `cleared` on, off the
        host's board (`RoundBoard.forget`); the units cleared now. A look at the chain or the
        board that fails leaves them for the next commit: the rank trains on meanwhile."""
        try:
            ledger = self.worker.ledger
            settled = min(ledger.slot(job_id, slot)["unitsDone"] for slot in range(config.ranks))
            for index in range(cleared, settled):
                for round_ in config.unit_rounds(spec, index):
                    board().forget(round_)
                cleared = index + 1
                log.info(
                    "job=%d: unit %d's rounds, which every slot committed, are off the board",
                    job_id,
                    index,
                )
        except (*TRANSIENT, dist.DistError) as exc:  # the chain, or the board, out of reach
            log.warning("job=%d: the board keeps units from %d for now: %s", job_id, cleared, exc)
        return cleared

    def _settled_elsewhere(
        self, job_id: int, slot_id: int, index: int, config: GroupConfig, posted: float | None
    ) -> bool:
        """Whether the rank has waited on its board past a round's deadline (its post of a round
        of unit `index` unanswered since `posted`) while another slot committed the unit: the
        others went through that round as settled (this daemon read the chain before that
        commit landed), so the board will never close it. The rank is let go and starts again,
        with the round settled from the committed record."""
        if config.deadline_s is None or posted is None:  # no board, or no round waited on
            return False
        if time.time() - posted < config.deadline_s + CHAIN_POLL:
            return False
        ledger = self.worker.ledger
        if not any(
            ledger.slot(job_id, slot)["unitsDone"] > index
            for slot in range(config.ranks)
            if slot != slot_id
        ):
            return False
        log.warning(
            "job=%d: a round of unit %d, which the group committed, is not closing on the "
            "rank's board; the rank starts again from its last committed unit",
            job_id,
            index,
        )
        return True

    def _commit(
        self,
        job_id: int,
        slot_id: int,
        index: int,
        spec: JobSpec,
        config: GroupConfig,
        folder: Path,
        seconds: float,
        last: bool,
    ) -> None:
        """Pin and commit unit `index` from the rank's `folder` (its `updates_dir`), queue the
        excluded ranks to flag, and drop its files."""
        rounds = config.unit_rounds(spec, index)
        storage = self.worker.storage
        commitment, bundle = unit_bundle(
            spec, config, folder, slot_id, index, self.worker.keep_state, last
        )
        cid = storage.add_bytes(bundle)
        unit = Unit(job_id, slot_id, index, cid, commitment, seconds)
        self.worker.journal.add_unit(unit)
        slot = self.worker.ledger.slot(job_id, slot_id)
        self.worker.commit(unit, slot, self.worker.ledger.job(job_id)["checkpointInterval"])
        self._open_through = _open_through(spec, config, index)
        self._note_holders(job_id, config.ranks, folder)  # read after the commit was mined
        self._note_outliers(slot_id, index, rounds, folder)
        self._flag_committed(job_id)
        for round_ in rounds:
            shutil.rmtree(update_path(folder, round_, slot_id).parent, ignore_errors=True)
        shutil.rmtree(unit_path(folder, index, slot_id).parent, ignore_errors=True)

    def _note_outliers(self, slot_id: int, index: int, rounds: range, folder: Path) -> None:
        """Queue the units holding rounds of the ranks the aggregation excluded, for verifiers to
        re-run whatever their sample. Every rank saw the same rounds; in each, the lowest rank
        not excluded flags."""
        for round_ in rounds:
            seen = json.loads(aggregate_path(folder, round_).read_text())
            kept = [rank for rank in seen["members"] if rank not in seen["outliers"]]
            if kept and kept[0] == slot_id:
                self._to_flag += [
                    (rank, index) for rank in seen["outliers"] if (rank, index) not in self._to_flag
                ]

    def _flag_committed(self, job_id: int) -> None:
        """Flag each queued unit once its rank has committed it (it may still be training)."""
        ledger = self.worker.ledger
        for rank, round_ in list(self._to_flag):
            unit = ledger.committed_unit(job_id, rank, round_)
            if unit is None:
                continue
            try:
                ledger.flag_unit(self.worker.account, unit)
                log.warning(
                    "job=%d: flagged rank %d's round %d, which the aggregation excluded",
                    job_id,
                    rank,
                    round_,
                )
            except ContractRevert as exc:
                if exc.name not in NOT_FLAGGABLE:
                    raise
                log.info(
                    "job=%d: rank %d's round %d not flagged: %s", job_id, rank, round_, exc.name
                )
            self._to_flag.remove((rank, round_))


def _open_through(spec: JobSpec, config: GroupConfig, committed: int) -> int:
    """The last exchange a rank may take part in once its daemon has read who holds the
    slots after the slot's unit `committed` was (-1: none yet): that of two units on. So no
    honest record of a unit names a slot's former holder once any slot committed the unit two
    before it after the holder left (round_signatures.slot_tenures), and the rank trains on
    while its daemon commits."""
    return config.unit_rounds(spec, committed + 2).stop - 1


def _own_rounds(folder: Path) -> dict[int, RecordedRound]:
    """The rounds a rank's earlier attempt went through and did not commit, as it recorded
    them in its folder (`Exchange._record`); one whose files did not all get written is left
    out, to be met again."""
    rounds = {}
    for aggregate in folder.glob("round-*/aggregate.json"):
        round_ = int(aggregate.parent.name.removeprefix("round-"))
        try:
            rounds[round_] = recorded_round(folder, round_)
        except (OSError, ValueError, KeyError):
            continue
    return rounds


def _posted(folder: Path, rounds: range, rank: int) -> float | None:
    """When the rank posted the first of `rounds` whose members it is still waiting for (the
    mtime of its saved payload), or None."""
    for round_ in rounds:
        if aggregate_path(folder, round_).exists():
            continue
        try:
            return update_path(folder, round_, rank).stat().st_mtime
        except FileNotFoundError:  # not posted yet, or the unit's files were dropped
            return None
    return None


def _vouched(signers: RoundSigners, round_: int, recorded: RecordedRound, fewest: int) -> bool:
    """Whether a recorded round could have closed on the board: at least `fewest` distinct
    ranks of the group, every payload carrying the signature of a provider its member's slot
    was assigned to by then. A record short of the quorum is refused, or a co-member could
    commit one naming only itself and move where a rank waiting on the board goes on from."""
    members, signatures = recorded.members, recorded.signatures
    return (
        signatures is not None
        and len(members) >= fewest
        and len(set(members)) == len(members) == len(recorded.payloads) == len(signatures)
        and all(member in signers.former for member in members)
        and all(
            signed_by_a_holder(signers, round_, member, payload, signature)
            for member, payload, signature in zip(members, recorded.payloads, signatures)
        )
    )
