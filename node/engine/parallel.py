"""Data parallelism inside a node: a unit's workers, one per device, each take a fixed share of
every step's micro-batches and sum the gradients in micro-batch order, so the unit's bits are
those of one device training on the whole batch.

One device accumulates a step's gradient as `g = c_0; g += c_1; ...; g += c_(A-1)`, where `c_m`
is micro-batch m's backward of `loss / A`. Float addition does not reassociate, so the workers
keep that order: worker r computes the `c_m` of its consecutive share, receives the running sum
from worker r - 1, adds its own in order, and passes it on; the last worker's sum, bit for bit the
single device's, goes back to all (an all-reduce in a fixed order). Every worker then clips and
steps the same gradient from the same state, and so stays identical. The losses travel with the
gradient, each in its own slot, and are summed in the same order as on one device.

Dropout splits so too: its masks are hashed from each micro-batch's place (node.engine.dropout),
not drawn. A model that draws random numbers while training some other way cannot be split: each
worker would draw another share of the stream than one device does. Workers check that the
generator did not move and refuse such a job (TeamError).
"""

from __future__ import annotations

import logging
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from marketplace.errors import ZooError

from .devices import open_group, place

if TYPE_CHECKING:
    from .train import Trainer

logger = logging.getLogger(__name__)

STEP_TIMEOUT = timedelta(minutes=30)  # how long a worker waits for the others within a step
_TAG = 0
_JOINED = "zoo-team/joined"  # the store's count of the other workers that started
_POLL_S = 0.2
_FAILURE_WAIT_S = 5.0  # how long a broken step waits for the failed worker's own error


class TeamError(ZooError, RuntimeError):
    """A unit that cannot be trained data parallel with the same bits as on one device."""


class _Broken(TeamError):
    """A step's exchange failed: a worker died or stopped answering."""


@dataclass
class Team:
    """This worker's place in its unit's team of workers."""

    rank: int
    size: int
    device: torch.device
    group: Any  # the workers' process group (devices.open_group)

    def forward_backward(self, trainer: Trainer) -> float:
        """This worker's share of the batch at the trainer's cursor, and the whole step's summed
        gradient written into the model's `.grad` as one device would have accumulated it.
        Returns the step's mean loss."""
        accum = trainer.spec.training.grad_accum_steps
        share = accum // self.size
        mine = range(self.rank * share, (self.rank + 1) * share)
        params = [p for p in trainer.model.parameters() if p.requires_grad]
        numel = sum(p.numel() for p in params)
        losses = torch.zeros(accum, device=self.device)  # a slot per micro-batch
        contributions, used = [], None
        before = _rng_state(self.device)
        for micro in mine:
            trainer.optimizer.zero_grad(set_to_none=True)
            x, y = trainer.sampler.batch(trainer.stream, trainer.cursor, micro)
            x, y = x.to(self.device), y.to(self.device)
            with trainer.autocast, trainer.dropout(micro):
                _, loss = trainer.model(x, y)
            (loss / accum).backward()
            losses[micro] = loss.detach()
            used = [p.grad is not None for p in params]
            contributions.append(_flatten(params, numel, self.device))
        trainer.optimizer.zero_grad(set_to_none=True)
        if not all(torch.equal(a, b) for a, b in zip(before, _rng_state(self.device), strict=True)):
            raise TeamError(
                "the model draws random numbers while training (other than dropout): its steps "
                "cannot be split across devices with the bits of one; train it on "
                "resources.devices: 1"
            )
        total = self._ordered_sum(contributions, losses)  # (numel + accum,)
        assert used is not None  # every worker has at least one micro-batch (spec validation)
        start = 0
        for param, has_grad in zip(params, used, strict=True):
            if has_grad:  # a fresh tensor, as backward would have allocated it
                param.grad = total[start : start + param.numel()].view_as(param).clone()
            start += param.numel()
        step_loss = torch.zeros((), device=self.device)
        for value in total[numel:]:
            step_loss += value
        return float(step_loss) / accum

    def _ordered_sum(self, contributions: list[torch.Tensor], losses: torch.Tensor) -> torch.Tensor:
        """The sum of every worker's contributions in rank order, then each worker's in its
        order, on every worker; the losses' slots ride along (each slot has one non-zero term)."""
        try:
            return self._chain(contributions, losses)
        except RuntimeError as exc:  # the backend's: a peer went away or timed out
            raise _Broken(f"the unit's workers lost each other: {exc}") from exc

    def _chain(self, contributions: list[torch.Tensor], losses: torch.Tensor) -> torch.Tensor:
        numel = contributions[0].numel()
        if self.rank == 0:
            total = contributions[0].clone()
            rest = contributions[1:]
            running = torch.zeros_like(losses)
        else:
            received = torch.empty(numel + losses.numel(), device=self.device)
            self.group.recv([received], self.rank - 1, _TAG).wait()
            total, running = received[:numel], received[numel:]
            rest = contributions
        for contribution in rest:
            total += contribution
        running += losses
        whole = torch.cat([total, running])
        last = self.size - 1
        if self.rank < last:
            self.group.send([whole], self.rank + 1, _TAG).wait()
        self.group.broadcast(whole, last).wait()
        return whole


@contextmanager
def team(
    devices: list[torch.device], follow: Callable[..., None], *args: Any
) -> Iterator[Team | None]:
    """This process as worker 0 of a team on `devices`, the others running `follow(team, *args)`
    (None on a single device: no team).

    The others are fresh processes, started here and stopped by the time the block is left; they
    meet this one through a file store in a private folder, with no port open beyond loopback.
    Whatever worker 0 hands to callbacks or returns stays in this process. A worker that fails
    makes this one raise TeamError with the worker's error, rather than wait for it.
    """
    if len(devices) == 1:
        yield None
        return
    with tempfile.TemporaryDirectory(prefix="zoo-team-") as folder:
        store_path, inputs = str(Path(folder, "store")), str(Path(folder, "inputs.pt"))
        # on disk, mapped by the others, rather than pickled through shared memory: a corpus or
        # a training state can be larger than /dev/shm
        torch.save(args, inputs)
        helpers = mp.start_processes(
            _helper,
            args=(store_path, devices, follow, inputs),
            nprocs=len(devices) - 1,
            join=False,
            start_method="spawn",
        )
        try:
            store = dist.FileStore(store_path, len(devices))
            _await_helpers(store, helpers, len(devices) - 1)
            with _member(store, 0, devices) as member:
                yield member
        except _Broken:  # a worker's own error says why
            _join(helpers, _FAILURE_WAIT_S)
            _stop(helpers)
            raise
        except BaseException:
            _stop(helpers)
            raise
        while not _join(helpers, None):
            pass


def _helper(
    index: int,
    store_path: str,
    devices: list[torch.device],
    follow: Callable[..., None],
    inputs: str,
) -> None:
    # written by worker 0 of this unit into its private folder a moment ago
    args = torch.load(inputs, mmap=True, weights_only=False)
    store = dist.FileStore(store_path, len(devices))
    store.add(_JOINED, 1)
    with _member(store, index + 1, devices) as member:
        follow(member, *args)


@contextmanager
def _member(store: dist.Store, rank: int, devices: list[torch.device]) -> Iterator[Team]:
    store.set_timeout(STEP_TIMEOUT)
    placement = place(store, rank, len(devices), devices[rank])
    try:
        group = open_group(store, rank, len(devices), placement, STEP_TIMEOUT)
    except RuntimeError as exc:  # the backend's: a worker went away while the group formed
        raise _Broken(f"the unit's workers could not form a group: {exc}") from exc
    try:
        yield Team(rank, len(devices), placement.device, group)
    finally:
        group.shutdown()


def _await_helpers(store: dist.Store, helpers: mp.ProcessContext, count: int) -> None:
    """Wait until the other workers are up (they import torch and the engine first); a worker
    that fails before raises here at once, rather than after the store's timeout."""
    deadline = time.monotonic() + STEP_TIMEOUT.total_seconds()
    while store.add(_JOINED, 0) < count:
        _join(helpers, _POLL_S)
        if time.monotonic() > deadline:
            _stop(helpers)
            raise TeamError(f"the unit's other workers did not start within {STEP_TIMEOUT}")


def _join(helpers: mp.ProcessContext, timeout: float | None) -> bool:
    """Whether the other workers are all done (waiting up to `timeout` s; None: until one ends);
    TeamError with a worker's error if one failed."""
    try:
        return helpers.join(timeout)
    except (mp.ProcessRaisedException, mp.ProcessExitedException) as failure:
        _stop(helpers)
        raise TeamError(f"a worker of the unit failed: {failure}") from None


def _stop(helpers: mp.ProcessContext) -> None:
    """Stop the unit's other workers (by their processes) after worker 0 failed."""
    for process in helpers.processes:
        if process.is_alive():
            process.terminate()
    for process in helpers.processes:
        process.join(timeout=10)


def _flatten(params: list[torch.nn.Parameter], numel: int, device: torch.device) -> torch.Tensor:
    """The parameters' gradients end to end, zeros for a parameter without one."""
    flat = torch.zeros(numel, device=device)
    start = 0
    for param in params:
        if param.grad is not None:
            flat[start : start + param.numel()] = param.grad.reshape(-1)
        start += param.numel()
    return flat


def _rng_state(device: torch.device) -> list[torch.Tensor]:
    states = [torch.get_rng_state()]
    if device.type == "cuda":
        states.append(torch.cuda.get_rng_state(device))
    return states
