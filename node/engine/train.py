"""The trainer: model, AdamW, warmup + cosine schedule, clipping, accumulation and autocast."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import torch
from torch.nn.parallel import DistributedDataParallel
from torch.optim.lr_scheduler import LambdaLR

from marketplace.protocol import trace
from marketplace.protocol.checkpoint import state_hash
from marketplace.protocol.spec import JobSpec, LossSpikeSpec, TrainingSpec

from . import models  # noqa: F401  (the built-in architectures' modules, which `spec.model.build` makes)
from .data import Sampler
from .dropout import CountedDropout
from .parallel import Team

logger = logging.getLogger(__name__)


def lr_schedule(training: TrainingSpec) -> Callable[[int], float]:
    """Multiplier of the peak lr at a step: linear warmup, then cosine decay to min_lr_ratio."""
    warmup, total, floor = training.warmup_steps, training.max_steps, training.min_lr_ratio

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / (warmup + 1)
        if step >= total:
            return floor
        progress = (step - warmup) / max(1, total - warmup)
        return floor + 0.5 * (1.0 + math.cos(math.pi * progress)) * (1.0 - floor)

    return factor


def build_optimizer(model: torch.nn.Module, training: TrainingSpec) -> torch.optim.AdamW:
    """AdamW that decays matrices and embeddings but not biases or norm gains (as in nanoGPT)."""
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": training.weight_decay},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=training.lr, betas=training.betas)


def is_spike(loss: float, history: list[float], spec: LossSpikeSpec) -> bool:
    """A non-finite loss, or one above `factor` times the mean of the last `window` losses."""
    if not spec.enabled:
        return False
    if not math.isfinite(loss):
        return True
    recent = history[-spec.window :]
    return len(recent) == spec.window and loss > spec.factor * sum(recent) / len(recent)


class Trainer:
    """Holds everything that changes during training; `state()`/`load()` capture all of it."""

    def __init__(
        self, spec: JobSpec, sampler: Sampler, device: torch.device, team: Team | None = None
    ):
        self.spec = spec
        self.sampler = sampler
        self.device = device
        torch.manual_seed(spec.reproducibility.seed)
        # built on the CPU so the initial weights are the same bits on every device
        self.model = spec.build_model().to(device)
        self.optimizer = build_optimizer(self.model, spec.training)
        self.scheduler = LambdaLR(self.optimizer, lr_schedule(spec.training))
        self.autocast = torch.autocast(
            device.type, dtype=torch.bfloat16, enabled=spec.training.precision == "bf16"
        )
        # the model's DDP wrapper when it trains as one rank of a group: its communication
        # hook exchanges the gradients in backward
        self.ddp: DistributedDataParallel | None = None
        # this process's place among the unit's workers when it trains on several devices
        self.team = team
        self.step = 0  # optimizer steps applied so far
        self.stream = 0  # shard index the cursor belongs to
        self.cursor = 0  # next batch of that shard's stream; runs ahead of step after skips
        self.loss_history: list[float] = []  # recent losses, for spike detection
        self.trace: list[
            str
        ] = []  # digests of this unit window's segments (marketplace.protocol.trace)

    def forward_backward(self) -> tuple[float, float | None]:
        """Accumulate gradients over the micro-batches of the batch at the cursor.

        Returns the mean loss and, when clipping is on, the global grad norm before clipping.
        In a ddp group the gradients are the group's aggregate by then, so clipping bounds
        the aggregate, as one process training on the whole batch would; on a unit's team of
        devices they are, bit for bit, what this loop accumulates on one (node.engine.parallel).
        """
        if self.team is not None:
            return self._clipped(self.team.forward_backward(self))
        accum = self.spec.training.grad_accum_steps
        model = self.model if self.ddp is None else self.ddp
        total = torch.zeros((), device=self.device)
        for micro in range(accum):
            if self.ddp is not None:  # exchange once per batch: in the last micro-batch's backward
                self.ddp.require_backward_grad_sync = micro == accum - 1
            x, y = self.sampler.batch(self.stream, self.cursor, micro)
            x, y = x.to(self.device), y.to(self.device)
            with self.autocast, self.dropout(micro):
                _, loss = model(x, y)
            (loss / accum).backward()
            total += loss.detach()
        return self._clipped(float(total) / accum)

    def dropout(self, micro: int) -> AbstractContextManager[object]:
        """Where micro-batch `micro` of the batch at the cursor trains: under hashed dropout
        masks when the model has dropout (node.engine.dropout), else as it is (the hashing mode
        would cost every operation of the forward a Python call)."""
        if not self.spec.model.has_dropout():
            return nullcontext()
        return CountedDropout(self.spec.reproducibility.seed, self.stream, self.cursor, micro)

    def _clipped(self, loss: float) -> tuple[float, float | None]:
        """Clip the step's gradient; `loss` with the grad norm before clipping (None: off)."""
        grad_norm = None
        if self.spec.training.grad_clip > 0:
            grad_norm = float(
                torch.nn.utils.clip_grad_norm_(
                    self.model.parameters(), self.spec.training.grad_clip
                )
            )
        return loss, grad_norm

    def apply(self, loss: float) -> None:
        """Take the optimizer step for the gradients just accumulated."""
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.step += 1
        self.cursor += 1
        window = self.spec.training.loss_spike.window
        self.loss_history = (self.loss_history + [loss])[-window:]

    @torch.no_grad()
    def evaluate(self, batches: list[tuple[torch.Tensor, torch.Tensor]]) -> float:
        self.model.eval()
        losses = []
        for x, y in batches:
            with self.autocast:
                _, loss = self.model(x.to(self.device), y.to(self.device))
            losses.append(float(loss))
        self.model.train()
        return sum(losses) / len(losses)

    def lr(self) -> float:
        return self.optimizer.param_groups[0]["lr"]

    def state(self, copy: bool = True) -> dict[str, Any]:
        """A detached CPU copy of the full training state (the `state` of a Checkpoint); with
        `copy` off, the live tensors themselves, the same bits until the next step, to hash."""
        tensors = _to_cpu if copy else _as_is
        return {
            "model": tensors(self.model.state_dict()),
            "optimizer": tensors(self.optimizer.state_dict()),
            "scheduler": tensors(self.scheduler.state_dict()),
            "rng": {
                "torch": torch.get_rng_state(),
                # the training device's alone, so the state is the same however many GPUs
                # the machine has and whichever of them trained
                "cuda": [torch.cuda.get_rng_state(self.device)]
                if self.device.type == "cuda"
                else [],
            },
            "trace": list(self.trace),
            "progress": {
                "step": self.step,
                "stream": self.stream,
                "cursor": self.cursor,
                "loss_history": list(self.loss_history),
                "spec_sha256": self.spec.sha256(),
            },
        }

    def load(self, state: dict[str, Any]) -> None:
        """Restore a `state()`; `state` itself is left untouched, so it can be loaded again."""
        self.optimizer.zero_grad(set_to_none=True)
        self.model.load_state_dict(state["model"])
        # both keep references into what they load (Adam moments are then updated in place)
        self.optimizer.load_state_dict(_to_cpu(state["optimizer"]))
        self.scheduler.load_state_dict(_to_cpu(state["scheduler"]))
        torch.set_rng_state(state["rng"]["torch"])
        if state["rng"]["cuda"] and self.device.type == "cuda":
            torch.cuda.set_rng_state(state["rng"]["cuda"][0], self.device)
        progress = state["progress"]
        self.step = int(progress["step"])
        self.stream = int(progress["stream"])
        self.cursor = int(progress["cursor"])
        self.loss_history = [float(x) for x in progress["loss_history"]]
        self.trace = [str(x) for x in state.get("trace", [])]

    def commit_segment(
        self, loss: float, keep: bool
    ) -> tuple[dict[str, Any], dict[str, Any] | None]:
        """Record the segment that ends at the current step, with `loss` its mean loss: its digest
        joins the trace (and so every later state hash). Returns the record and, when `keep`, a
        copy of the state it names, the intermediate state a dispute re-runs the next segment
        from (without it the live state is hashed in place: no copy is made)."""
        state = self.state(copy=keep)
        segment = trace.record(self.step, state_hash(state), loss, state["model"])
        self.trace.append(trace.leaf(segment))
        return segment, state if keep else None


def _as_is(node: Any) -> Any:
    return node


def _to_cpu(node: Any) -> Any:
    """Deep copy with every tensor cloned to the CPU, so later training cannot alter it."""
    if isinstance(node, torch.Tensor):
        return node.detach().to("cpu", copy=True)
    if isinstance(node, dict):
        return {key: _to_cpu(value) for key, value in node.items()}
    if isinstance(node, (list, tuple)):
        return type(node)(_to_cpu(value) for value in node)
    return node
