"""A process group of ranks, on NCCL when every rank trains on a CUDA device and on gloo
otherwise: its settings, its ranks' trainers, and what they report."""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.utils import parameters_to_vector

from marketplace.errors import ZooError
from marketplace.processes import free_port
from marketplace.protocol.rank_bundle import DDP_RESIDUAL_EVERY
from marketplace.protocol.round_signatures import SIGNATURE_BYTES, Tenure
from marketplace.protocol.spec import JobSpec
from node.engine.data import Sampler, load_corpora
from node.engine.devices import group_device, place
from node.engine.gloo_listener import gloo_listeners_closed
from node.engine.limits import parameter_count
from node.engine.train import Trainer

from .aggregation import Aggregator
from .compression import Compressor
from .quorum import board_rule
from .signing import RoundSigning, local_signing
from .store import CONTROL_BYTES, GroupStore, StoreHost

if TYPE_CHECKING:
    from .exchange import Exchange

logger = logging.getLogger(__name__)

JOIN_TIMEOUT = timedelta(minutes=5)  # how long a rank waits for the others to join
LEAVE_TIMEOUT = timedelta(minutes=2)  # how long a gloo rank that is done waits for the others
HOST_TIMEOUT = timedelta(hours=1)  # how long rank 0 keeps the board for ranks still catching up
_LEFT = "left"  # the store's count of ranks done with the board
_LEAVE_POLL_S = 0.1
Tamper = Callable[[int, torch.Tensor], torch.Tensor]  # (rank, update) -> what the rank sends
Delay = Callable[[int, int], float]  # (rank, round) -> seconds the rank waits before sending


class DistributedConfigError(ZooError, ValueError):
    """Distributed settings that do not fit the job."""


@dataclass(frozen=True)
class GroupConfig:
    """What every strategy needs: how many ranks, and how their updates travel and combine."""

    ranks: int  # processes training together, each on its own data shard (index = rank)
    compressor: Compressor = field(default_factory=Compressor)  # what an update becomes
    aggregator: Aggregator = field(default_factory=Aggregator)  # how the ranks' updates combine
    error_feedback: bool = True  # carry what compression dropped into the rank's next update
    quorum: int | None = None  # updates a round needs once the deadline passed; None: all ranks
    deadline_s: float | None = None  # seconds a round waits for every rank; None: no deadline
    updates_dir: str | None = None  # where each rank saves its round inputs and updates
    # where ranks ask to train: on CUDA (over NCCL) only if every rank has a CUDA device. The
    # CPU by default: a verifier replays a rank's unit on its own CPU, bit for bit
    device: Literal["cpu", "cuda"] = "cpu"
    # who signs what the ranks send; None: this machine plays the whole group (`local_signing`)
    signing: RoundSigning | None = field(default=None, compare=False)
    # what one exchange of the group is called, in messages: ddp exchanges at every step
    EXCHANGE: ClassVar[str] = "step"

    def __post_init__(self) -> None:
        if self.ranks < 1:
            raise DistributedConfigError(f"ranks must be >= 1; got {self.ranks}")
        if self.quorum is not None and not 1 <= self.quorum <= self.ranks:
            raise DistributedConfigError(
                f"quorum must be in [1, ranks={self.ranks}]; got {self.quorum}"
            )
        if self.deadline_s is not None and self.deadline_s <= 0:
            raise DistributedConfigError(f"deadline_s must be > 0; got {self.deadline_s}")
        if self.quorum is not None and self.deadline_s is None:
            raise DistributedConfigError(
                "quorum needs deadline_s: without one, rounds wait for all"
            )

    def steps_per_unit(self, spec: JobSpec) -> int:
        """Optimizer steps in one of a rank's work units: in ddp, `checkpoint.every`."""
        return spec.checkpoint.every

    def unit_rounds(self, spec: JobSpec, index: int) -> range:
        """The exchanges a rank's unit `index` takes part in; ddp exchanges at every step."""
        steps = self.steps_per_unit(spec)
        return range(index * steps, (index + 1) * steps)

    def tenures(self, spec: JobSpec, units: Mapping[str, Tenure]) -> dict[str, Tenure]:
        """Each holder of a slot -> the exchanges it could have signed for the slot, from the
        units it could have (`round_signatures.slot_tenures`): a `RoundSigners.former` entry."""
        return {
            holder: Tenure(
                self.unit_rounds(spec, held.first).start,
                None if held.last is None else self.unit_rounds(spec, held.last).stop - 1,
            )
            for holder, held in units.items()
        }

    def residual_steps(self, spec: JobSpec) -> range:
        """The steps into a ddp unit after which its rank commits its error-feedback residual
        (rank_bundle.DDP_RESIDUAL_EVERY); none without error feedback, which carries nothing
        from one step into the next."""
        if not self.error_feedback:
            return range(0)
        return range(DDP_RESIDUAL_EVERY, self.steps_per_unit(spec), DDP_RESIDUAL_EVERY)

    def store_budget(self, spec: JobSpec) -> int:
        """Bytes each rank may hold of the group's store (store.py): its posts of two units'
        rounds (the host keeps a round until every slot committed its unit, `RoundBoard.forget`;
        a rank that starts again reads the rounds since the last commit), each with room for
        its parts' keys, and `CONTROL_BYTES` for the rest, rendezvous and counts."""
        if not self.uses_board:
            return CONTROL_BYTES
        post = SIGNATURE_BYTES + self.compressor.payload_bytes(parameter_count(spec)) + 4096
        return 2 * len(self.unit_rounds(spec, 0)) * post + CONTROL_BYTES

    @property
    def round_signing(self) -> RoundSigning:
        return self.signing or local_signing(self.ranks)

    @property
    def fewest_members(self) -> int:
        """Updates a round closes with at the fewest: the quorum, or every rank."""
        return self.quorum or self.ranks

    @property
    def uses_board(self) -> bool:
        """Whether the ranks exchange through the store's `RoundBoard` rather than gloo.

        Rounds with a deadline do: their membership changes (a late rank, one that dropped
        out, its replacement), while a gloo process group's members are fixed when it forms.
        """
        return self.deadline_s is not None


@dataclass(frozen=True)
class DistributedResult:
    eval_losses: list[float]  # held-out loss of the shared model after every report or round
    train_losses: list[float]  # mean training loss over those steps and all ranks
    bytes_sent: list[int]  # payload bytes each rank sent, by rank
    parameters: int  # entries of the flattened model, what an fp32 all-reduce would send
    commitments: list[list[str]]  # per rank, the sha256 of its payload in each exchange
    outliers: list[list[int]]  # per exchange, the ranks the aggregator flagged
    members: list[list[int]]  # per exchange, the ranks whose updates were aggregated
    weights_sha256: list[str]  # per rank, the digest of its final weights

    @property
    def eval_loss(self) -> float:
        return self.eval_losses[-1]


def check_schedule(spec: JobSpec, every: int | None = None) -> None:
    """Both strategies report every `every` steps (DiLoCo's rounds; default checkpoint.every)."""
    every = every or spec.checkpoint.every
    if spec.training.max_steps % every:
        raise DistributedConfigError(
            f"training.max_steps ({spec.training.max_steps}) must be a multiple of "
            f"the steps per round or report ({every})"
        )
    if spec.training.eval_batches < 1:
        raise DistributedConfigError("training.eval_batches must be >= 1 to report eval loss")


def rank_trainer(spec: JobSpec, rank: int, threads: int = 1) -> tuple[Trainer, list[Any]]:
    """The engine's trainer on shard `rank`, one thread per rank (ranks share the machine's
    cores; a verifier of another class may take more), and the held-out batches.

    Every rank builds the model from the spec's seed, so all start from the same weights. It
    trains where the rank's process group put it (devices.group_device): the CPU unless the
    group runs on NCCL.
    """
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(spec.reproducibility.deterministic)
    corpora = load_corpora(spec.data)
    sampler = Sampler(
        corpora, spec.data.seq_len, spec.training.batch_size, spec.reproducibility.seed
    )
    trainer = Trainer(spec, sampler, group_device())
    trainer.stream, trainer.cursor = rank, 0
    return trainer, sampler.eval_batches(spec.training.eval_batches)


def rank_report(
    trainer: Trainer,
    exchange: Exchange,
    train_losses: list[float],
    eval_losses: list[float],
) -> dict[str, Any]:
    """What a rank sends back when it is done."""
    weights = parameters_to_vector(list(trainer.model.parameters())).detach().cpu()
    return {
        "train_losses": train_losses,
        "eval_losses": eval_losses,
        "bytes_sent": exchange.bytes_sent,
        "parameters": sum(p.numel() for p in trainer.model.parameters()),
        "commitments": exchange.commitments,
        "outliers": exchange.outliers,
        "members": exchange.members,
        "weights_sha256": hashlib.sha256(weights.numpy().tobytes()).hexdigest(),
    }


def collect(per_rank: list[dict[str, Any]]) -> DistributedResult:
    """Combine the ranks' reports; every rank holds the same model, so rank 0 scores it."""
    losses = [report["train_losses"] for report in per_rank]
    return DistributedResult(
        eval_losses=per_rank[0]["eval_losses"],
        train_losses=[sum(period) / len(period) for period in zip(*losses, strict=True)],
        bytes_sent=[report["bytes_sent"] for report in per_rank],
        parameters=per_rank[0]["parameters"],
        commitments=[report["commitments"] for report in per_rank],
        outliers=per_rank[0]["outliers"],
        members=per_rank[0]["members"],
        weights_sha256=[report["weights_sha256"] for report in per_rank],
    )


def spawn(
    worker: Callable[..., dict[str, Any]], spec: JobSpec, config: GroupConfig, *args: Any
) -> list[dict[str, Any]]:
    """Run `worker(rank, ranks, store, spec, config, *args)` in `config.ranks` fresh processes
    of one group.

    `store` is the group's key-value store (store.py), which rounds with a deadline exchange
    through.

    Returns each rank's JSON-able report, by rank. A rank that raises makes this raise too.
    Reports come back through files rather than a pipe: a pipe that nobody reads until the
    ranks exit blocks a rank whose report is larger than the pipe's buffer.
    """
    with tempfile.TemporaryDirectory(prefix="zoo-ranks-") as folder:
        mp.spawn(_run, args=(spec, config, free_port(), worker, args, folder), nprocs=config.ranks)
        return [
            json.loads(Path(folder, f"{rank}.json").read_text()) for rank in range(config.ranks)
        ]


def _run(
    rank: int,
    spec: JobSpec,
    config: GroupConfig,
    port: int,
    worker: Callable[..., dict[str, Any]],
    args: tuple[Any, ...],
    folder: str,
) -> None:
    join_and_run(rank, spec, config, "127.0.0.1", port, worker, args, Path(folder, f"{rank}.json"))


def join_and_run(
    rank: int,
    spec: JobSpec,
    config: GroupConfig,
    host: str,
    port: int,
    worker: Callable[..., dict[str, Any]],
    args: tuple[Any, ...],
    report: Path,
    timeout: timedelta = JOIN_TIMEOUT,
    keep_board: bool = False,
) -> None:
    """Join the group that meets at `host:port` (rank 0 hosts its store), run
    `worker(rank, ranks, store, spec, config, *args)` and write its JSON report to `report`.

    Ranks that exchange through gloo form its process group, which needs every rank at once.
    Ranks that use the board need only the store, so one may join late: a rank that takes
    over from one that dropped out. The store lives in rank 0's process, so rank 0 stays
    until every rank said it is done with the board, or with `keep_board` until its process
    is stopped: a market's rank is done only once its units are committed, and one that
    dropped out after training but before committing is re-run by its successor.
    """
    signing = config.round_signing
    with contextlib.ExitStack() as hosting:
        if rank == 0:
            budget = config.store_budget(spec)
            hosting.enter_context(StoreHost(host, port, signing, budget, rules=board_rule))
        store = GroupStore(host, port, rank, signing, timeout)
        if config.uses_board:
            report.write_text(json.dumps(worker(rank, config.ranks, store, spec, config, *args)))
            _leave(store, rank, None if keep_board else config.ranks)
            return
        placement = place(store, rank, config.ranks, _asked_device(config, rank))
        on_gloo = placement.backend == "gloo"
        with gloo_listeners_closed() if on_gloo else contextlib.nullcontext():
            dist.init_process_group(
                placement.backend,
                store=store,
                rank=rank,
                world_size=config.ranks,
                timeout=timeout,
                device_id=None if on_gloo else placement.device,
            )
        try:
            report.write_text(json.dumps(worker(rank, config.ranks, store, spec, config, *args)))
            # Ranks finish at their own pace: none tears its connections down while another
            # still uses them (that aborts the other's process).
            dist.monitored_barrier(timeout=LEAVE_TIMEOUT)
        finally:
            dist.destroy_process_group()


def _asked_device(config: GroupConfig, rank: int) -> torch.device:
    """Where a rank asks to train: a CUDA device of its machine, by rank, when the group asks
    for CUDA and the machine has one; else the CPU."""
    if config.device == "cuda" and torch.cuda.is_available():
        return torch.device("cuda", rank % torch.cuda.device_count())
    return torch.device("cpu")


def _leave(store: GroupStore, rank: int, ranks: int | None) -> None:
    """Count this rank out of the board; rank 0 then waits for the `ranks` others, or with
    None until it is stopped (HOST_TIMEOUT at most: a rank that dropped out and was never
    replaced never counts itself out). A rank that never met the board has nothing to tell."""
    if not store.connected:
        return
    try:
        left = store.add(_LEFT, 1)
    except RuntimeError as exc:  # the host is gone: the group ended, nothing to tell
        logger.info("rank %d: the group's store is gone (%s)", rank, exc)
        return
    deadline = time.monotonic() + HOST_TIMEOUT.total_seconds()
    while rank == 0 and (ranks is None or left < ranks):
        if time.monotonic() > deadline:
            logger.warning("rank 0 leaves with %d ranks done", left)
            return
        time.sleep(_LEAVE_POLL_S)
        left = store.add(_LEFT, 0)
