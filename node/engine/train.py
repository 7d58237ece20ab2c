"""The trainer: model, AdamW, warmup + cosine schedule, clipping, accumulation and autocast."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import torch
from torch.nn.parallel import DistributedDataParallel
from torch.optim.lr_scheduler import LambdaLR

from marketplace.protocol import trace
from marketplace.protocol.checkpoint import CheckpointError, state_hash
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
        """Restore a `state()`; `state` itself is left untouched, so it can be loaded again.

        A state may come from the network (a provider's checkpoint a verifier re-runs from), so
        its form is checked first (CheckpointError), and what the spec fixes is taken from the
        spec, not from the state: the optimizer's settings and the learning-rate schedule at
        the state's step. An honest state holds those very values; another one cannot make a
        re-run ascend the loss or scale its learning rate.
        """
        problem = self.form_problem(state)
        if problem is not None:
            raise CheckpointError(f"the training state is malformed: {problem}")
        settings = [
            {k: v for k, v in g.items() if k != "params"} for g in self.optimizer.param_groups
        ]
        schedule = self.scheduler.state_dict()
        self.optimizer.zero_grad(set_to_none=True)
        self.model.load_state_dict(state["model"])
        # it keeps references into what it loads (Adam moments are then updated in place)
        self.optimizer.load_state_dict(_to_cpu(state["optimizer"]))
        step = int(state["progress"]["step"])
        factor = lr_schedule(self.spec.training)
        lrs = [base * factor(step) for base in schedule["base_lrs"]]
        for group, setting, lr in zip(self.optimizer.param_groups, settings, lrs, strict=True):
            group.update(setting, lr=lr)
        self.scheduler.load_state_dict(
            schedule | {"last_epoch": step, "_step_count": step + 1, "_last_lr": lrs}
        )
        torch.set_rng_state(state["rng"]["torch"])
        if state["rng"]["cuda"] and self.device.type == "cuda":
            torch.cuda.set_rng_state(state["rng"]["cuda"][0], self.device)
        progress = state["progress"]
        self.step = int(progress["step"])
        self.stream = int(progress["stream"])
        self.cursor = int(progress["cursor"])
        self.loss_history = [float(x) for x in progress["loss_history"]]
        self.trace = [str(x) for x in state.get("trace", [])]

    def form_problem(self, state: Any) -> str | None:
        """Why `state` is not of the form this trainer's `state()` takes (form_problem)."""
        return form_problem(state, self.spec, self.model, self.optimizer)

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


def form_problem(
    state: Any, spec: JobSpec, model: torch.nn.Module, optimizer: torch.optim.Optimizer
) -> str | None:
    """Why `state` is not of the form a trainer of `spec`, with `model` and `optimizer`, saves
    (tensors of the model's names, shapes and dtypes; AdamW moments of its parameters' forms;
    progress, generator state and trace of their types, within range); None if it is."""
    try:
        weights, saved = state["model"], state["optimizer"]
        progress, rng = state["progress"], state["rng"]
        groups, moments = saved["param_groups"], saved["state"]
        if not isinstance(state.get("scheduler"), dict):
            return "no learning-rate schedule"
    except (KeyError, TypeError):
        return "a part of the training state is missing"
    if not isinstance(weights, dict) or tensor_forms(weights) != tensor_forms(model.state_dict()):
        return "the model's tensors are not the spec's model's"
    params = [p for group in optimizer.param_groups for p in group["params"]]
    if not isinstance(groups, list) or [_indices(g) for g in groups] != [
        _indices(g) for g in optimizer.state_dict()["param_groups"]
    ]:
        return "the optimizer's parameter groups are not the model's"
    if not isinstance(moments, dict) or not all(
        type(i) is int and 0 <= i < len(params) and _moments_fit(m, params[i])
        for i, m in moments.items()
    ):
        return "the optimizer's moments do not fit the model's parameters"
    if not (
        isinstance(progress, dict)
        and all(_count(progress.get(k)) for k in ("step", "stream", "cursor"))
        and isinstance(progress.get("loss_history"), list)
        and len(progress["loss_history"]) <= spec.training.loss_spike.window
        and all(type(x) is float and math.isfinite(x) for x in progress["loss_history"])
        and isinstance(progress.get("spec_sha256"), str)
    ):
        return "its progress is not a step, shard, cursor, loss history and spec"
    if not (
        isinstance(rng, dict)
        and _form(rng.get("torch")) == _form(torch.get_rng_state())
        and isinstance(rng.get("cuda"), list)
        and len(rng["cuda"]) <= 1
        and all(isinstance(t, torch.Tensor) and t.dtype == torch.uint8 for t in rng["cuda"])
    ):
        return "its generator state is not one"
    trail = state.get("trace", [])
    if not isinstance(trail, list) or not all(isinstance(x, str) for x in trail):
        return "its trace is not a list of digests"
    return None


_MAX_COUNT = 2**62  # steps, shards and batches past this are no progress a unit makes


def _count(x: Any) -> bool:
    return type(x) is int and 0 <= x < _MAX_COUNT


def _form(x: Any) -> tuple[str, tuple[int, ...]] | None:
    """A tensor's dtype and shape (None for anything else)."""
    return (str(x.dtype), tuple(x.shape)) if isinstance(x, torch.Tensor) else None


def tensor_forms(node: Any, path: str = "") -> dict[str, Any]:
    """Every leaf of nested maps and lists by its path: a tensor's dtype and shape, None for
    anything else. Two states of one form have equal forms."""
    if isinstance(node, Mapping):
        items: Iterable[tuple[Any, Any]] = node.items()
    elif isinstance(node, (list, tuple)):
        items = enumerate(node)
    else:
        return {path: _form(node)}
    out: dict[str, Any] = {}
    for key, value in items:
        out |= tensor_forms(value, f"{path}/{key}")
    return out


def _indices(group: Any) -> Any:
    return group.get("params") if isinstance(group, dict) else None


def _moments_fit(moments: Any, param: torch.Tensor) -> bool:
    """An AdamW parameter's state: none yet, or its step and two moments of the parameter's form."""
    if not isinstance(moments, dict):
        return False
    if not moments:
        return True
    step = moments.get("step")
    return (
        set(moments) == {"step", "exp_avg", "exp_avg_sq"}
        and isinstance(step, torch.Tensor)
        and step.numel() == 1
        and step.is_floating_point()
        and _form(moments["exp_avg"]) == _form(moments["exp_avg_sq"]) == _form(param.detach())
    )


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
