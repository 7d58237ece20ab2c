"""The provider's loop: follow the market's events, then let bidding, work and settlement act."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from eth_account.signers.local import LocalAccount
from web3.types import EventData

from marketplace.chain.ledger import Ledger
from marketplace.errors import ZooError
from marketplace.protocol.terms import Role
from marketplace.protocol.units import CHECKPOINTS, RANK_BUNDLES, unit_format
from marketplace.runtime.follower import EventFollower
from marketplace.runtime.heads import HeadFeed
from marketplace.runtime.loop import TRANSIENT, run_ticks
from marketplace.runtime.outbox import Outbox
from marketplace.storage import Storage, StorageError
from node.engine import LocalData, UnitLimits
from node.engine.data import NO_LOCAL_DATA
from node.engine.limits import DEFAULT_LIMITS
from node.engine.speed import speed_folder

from .bidding import MIN_CHECKPOINT_INTERVAL, Bidder
from .group_worker import GroupWorker
from .journal import Journal
from .pricing import Pricing
from .settlement import Settler
from .worker import Specs, UnitLog, Worker

log = logging.getLogger(__name__)


class NotAProvider(ZooError):
    """The wallet is not registered as a provider."""


@dataclass(frozen=True)
class NodeConfig:
    pricing: Pricing
    journal_path: Path  # home/node/journal.sqlite3
    ipfs_api: str | None = None
    ipfs_replicas: tuple[str, ...] = ()
    replicas: int = 3  # IPFS nodes each checkpoint is pinned on
    device: str | None = None  # torch device; default CUDA when present, else CPU
    poll_interval: float = 1.0  # seconds between ticks
    confirmations: int = 0
    stop_grace: float = 30.0  # seconds a stop waits for a unit in training before leaving it
    min_checkpoint_interval: int = MIN_CHECKPOINT_INTERVAL  # seconds; tighter jobs are not bid on
    limits: UnitLimits = DEFAULT_LIMITS  # what one unit of a job may use of this machine
    local_data: LocalData = NO_LOCAL_DATA  # directories `file` data sources may read; none
    # where this machine's measured speed is remembered between starts; None: timed each start
    speed_folder: Path | None = field(default_factory=speed_folder)


class ProviderDaemon:
    """One provider account on one ledger. `run` blocks until `stop` is set.

    Everything it must not forget lives in the journal and on chain, so it may be killed at any
    moment: started again, it reads the journal's cursor, auctions, bids, held slots and pinned
    units, checks them against the chain's views, and carries on.
    """

    def __init__(
        self,
        ledger: Ledger,
        account: LocalAccount,
        config: NodeConfig,
        job_log: UnitLog | None = None,
    ):
        self.ledger = ledger
        self.account = account
        self.config = config
        self.journal = Journal(config.journal_path)
        self.outbox = Outbox(ledger.w3, account, self.journal)
        replicas = list(config.ipfs_replicas)
        self._main_storage = Storage(config.ipfs_api, replicas)
        if len(self._main_storage.nodes) < config.replicas:
            raise StorageError(
                f"checkpoints are pinned on {config.replicas} IPFS nodes but only "
                f"{len(self._main_storage.nodes)} are known: name the others in "
                "ZOO_IPFS_REPLICAS"
            )
        specs = Specs(ledger, self._main_storage, config.limits, config.device, config.speed_folder)
        self.worker = Worker(
            ledger,
            account,
            self.journal,
            self.outbox,
            specs,
            Storage(config.ipfs_api, replicas),
            config.replicas,
            config.device,
            job_log,
            config.local_data,
        )
        self.group_worker = GroupWorker(self.worker, config.journal_path.parent / "groups")
        self._deliver = {CHECKPOINTS: self.worker.run, RANK_BUNDLES: self.group_worker.run}
        self.bidder = Bidder(
            ledger,
            account,
            self.journal,
            self.outbox,
            config.pricing,
            self.group_worker.check_job,
            config.min_checkpoint_interval,
        )
        self.settler = Settler(ledger, account, self.journal, self.outbox)
        self._training: threading.Thread | None = None

    def run(self, stop: threading.Event, on_ready: Callable[[str], None] | None = None) -> None:
        try:
            tier = self._await_admission(stop)
            if stop.is_set():
                return
            self._measure_speed()
            with HeadFeed.of(self.ledger.w3) as heads:
                follower = EventFollower(
                    self.ledger.w3,
                    [self.ledger.market],
                    self.journal,
                    lambda event: self._dispatch(event, tier),
                    start_block=self.ledger.deployment.deploy_block,
                    confirmations=self.config.confirmations,
                    heads=heads,
                    outbox=self.outbox,
                    on_reorg=self.worker.reorganized,
                )
                message = (
                    f"provider {self.account.address} ready: tier {tier}, watching JobMarket "
                    f"{self.ledger.market.address} from block {follower.cursor.next_block}, "
                    f"journal {self.journal.path}"
                )
                log.info(message)
                if on_ready is not None:
                    on_ready(message)
                run_ticks(
                    lambda: self._tick(follower, stop),
                    stop,
                    self.config.poll_interval,
                    heads=heads,
                    waiting=self._slot_idle,
                )
        finally:
            self._shutdown()

    def _await_admission(self, stop: threading.Event) -> int:
        """A provider may bid only once a verifier attested its benchmark: wait for that."""
        account = self.ledger.staking_account(self.account.address)
        if account["role"] != Role.PROVIDER:
            raise NotAProvider(
                f"{self.account.address} is not a registered provider: run "
                "`zoo-compute node register` first"
            )
        if not account["admitted"]:
            log.info("waiting for a verifier to attest the benchmark of %s", self.account.address)
        while not account["admitted"] and not stop.wait(self.config.poll_interval):
            account = self.ledger.staking_account(self.account.address)
        return account["tier"]

    def _measure_speed(self) -> None:
        """Time this machine before bidding: a job's unit must fit the limits and its checkpoint
        interval at this speed, and a bid window may close in seconds."""
        for threads, speed in self.worker.specs.machine_speed().by_threads.items():
            log.info(
                "speed on %s at %d threads: %.1f GFLOP/s, %.1f us an operator, %.0f MB/s of state",
                self.worker.specs.device,
                threads,
                speed.flops_per_s / 1e9,
                speed.seconds_per_op * 1e6,
                speed.bytes_per_s / 1e6,
            )

    def _tick(self, follower: EventFollower, stop: threading.Event) -> None:
        follower.follow()
        now = follower.cursor.time
        if self.journal.open_auctions():
            self.bidder.tick(now)
            # Again after bidding, so a slot won by this tick's own close trains now, not a poll
            # later.
            follower.follow()
        self._start_training(stop)
        self.settler.tick(now)

    def _slot_idle(self) -> bool:
        """Whether a held slot has no unit in training: the next tick starts one without waiting
        for a block."""
        training = self._training is not None and self._training.is_alive()
        return not training and bool(self.journal.held_slots())

    def _dispatch(self, event: EventData, tier: int) -> None:
        """Record what `event` means for this provider, in the follower's journal transaction."""
        args = event["args"]
        name = event["event"]
        if name == "AuctionOpened":
            self.bidder.on_auction_opened(args, tier)
        elif name == "SlotAssigned" and args["provider"] == self.account.address:
            log.info("job=%d: won slot %d at price=%d", args["jobId"], args["slot"], args["price"])
            self.journal.hold_slot(args["jobId"], args["slot"])
        elif name == "ProviderRemoved" and args["provider"] == self.account.address:
            log.warning(
                "job=%d: removed from slot %d (reason %d)",
                args["jobId"],
                args["slot"],
                args["reason"],
            )
            self.journal.end_slot(args["jobId"], args["slot"], "lost")

    def _start_training(self, stop: threading.Event) -> None:
        """The held slots' units in their own thread, so bids and reveals stay on time meanwhile:
        each slot in turn, its units back to back until it has nothing to deliver for now. The
        bidder holds the node to one slot at a time, but a journal may hold more (an earlier
        version's), and none of them is left untrained. The thread ends when no slot has work,
        and a later tick looks again."""
        if self._training is not None and self._training.is_alive():
            return
        held = self.journal.held_slots()
        if not held or stop.is_set():
            return
        self._training = threading.Thread(
            target=self._work, args=(held, stop), name="training", daemon=True
        )
        self._training.start()

    def _work(self, held: list[tuple[int, int]], stop: threading.Event) -> None:
        for job_id, slot_id in held:
            if stop.is_set():
                return
            try:
                self._deliver[unit_format(self.worker.specs.of_job(job_id))](job_id, slot_id, stop)
            except TRANSIENT as exc:
                log.warning("job=%d slot=%d: unit failed, retrying: %s", job_id, slot_id, exc)
            except Exception:
                log.exception("job=%d slot=%d: unit failed, retrying", job_id, slot_id)

    def _shutdown(self) -> None:
        if self._training is not None and self._training.is_alive():
            log.info(
                "stopping: waiting up to %.0fs for the unit in training", self.config.stop_grace
            )
            self._training.join(self.config.stop_grace)
            if self._training.is_alive():
                log.warning("stopping with a unit unfinished; it is trained again on restart")
        self.worker.close()
        self.journal.close()
        self._main_storage.close()
        self.worker.storage.close()
        log.info("provider %s stopped", self.account.address)
