"""`run_unit`: H optimizer steps from a checkpoint on a shard, as one verifiable work unit."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, NamedTuple

import torch

from marketplace.protocol import trace
from marketplace.protocol.checkpoint import Checkpoint, CheckpointError
from marketplace.protocol.execution import ExecutionClass
from marketplace.protocol.spec import HFSpec, JobSpec

from . import environment, parallel
from .allocator import keep_freed_memory
from .base import load_base
from .data import (
    NO_LOCAL_DATA,
    ContentStore,
    Corpus,
    DataError,
    LocalData,
    Sampler,
    Shard,
    load_corpora,
)
from .devices import unit_devices
from .environment import DEFAULT_HOST, Host
from .limits import DEFAULT_LIMITS, UnitLimits
from .speed import Speed
from .train import Trainer, is_spike

logger = logging.getLogger(__name__)


class TrainingDiverged(RuntimeError):
    """Loss spikes kept coming after the allowed number of rollbacks."""


# Called with each segment's record and the intermediate state it names, as training reaches it;
# after a loss-spike rollback the segments past the rollback come again, so key them by step.
SegmentSink = Callable[[dict[str, Any], Checkpoint], None]


class UnitResult(NamedTuple):
    checkpoint: Checkpoint  # state after the unit, with environment metadata
    state_hash: str  # the checkpoint's canonical hash, the value committed on-chain
    metrics: dict[str, Any]  # losses, eval loss, throughput, rollbacks (JSON-serialisable)


def unit_shard(spec: JobSpec, slot: int) -> Shard:
    """The data shard every unit of a single-node job's `slot` reads: the slot's own sample
    stream over the whole step range, the same for the provider that trains it and the verifier
    that re-runs it."""
    return Shard.of(spec, index=slot, start_step=0, end_step=spec.training.max_steps)


def run_unit(
    spec: JobSpec,
    checkpoint: Checkpoint | None,
    shard: Shard,
    steps: int,
    *,
    storage: ContentStore | None = None,
    local_data: LocalData = NO_LOCAL_DATA,
    limits: UnitLimits = DEFAULT_LIMITS,
    device: str | torch.device | None = None,
    host: Host = DEFAULT_HOST,
    on_segment: SegmentSink | None = None,
    devices: int | None = None,
    speed: Speed | None = None,
    skip: int = 0,
) -> UnitResult:
    """Train `steps` optimizer steps from `checkpoint` (None: a fresh model from the spec's seed).

    The unit's inputs fully determine its output: with `reproducibility.deterministic` on the
    CPU, the same inputs give the same state hash on every run, and splitting a run into
    several units gives the same hash as running it whole. A loss spike rolls back to the last
    good state (the unit's start, or the latest multiple of `checkpoint.every` inside it) and
    skips past the spiking batch; units that start on multiples of `checkpoint.every` therefore
    stay bit-identical to an uninterrupted run even when spikes occur.

    `storage` serves ipfs data sources (default: marketplace.storage.Storage()); `local_data` says
    which local files `file` sources may read (default: none); `limits` bound what the spec may
    use of this machine (SpecOverLimits before anything is built; its time when this machine's
    `speed` is given); `device` defaults to CUDA when available, else the CPU; `host` holds the
    settings the spec leaves to the machine (recorded, with the device, as the unit's execution
    class); `on_segment` receives every segment the trainer commits to (marketplace.protocol.trace)
    with its intermediate state, for a provider to keep for disputes; `devices` is how many devices
    train the unit, data parallel (default: the spec's resources.devices). The result's bits do not
    depend on it (node.engine.parallel), so a verifier may re-run a unit on fewer devices than the
    provider trained it on. `skip` batches are skipped before the first step, as a loss-spike
    rollback to the unit's start does (a verifier re-running a segment alone after one).
    """
    if steps < 1 or skip < 0:
        raise ValueError(f"steps must be >= 1 and skip >= 0; got {steps} and {skip}")
    if shard.sources != tuple(s.name for s in spec.data.sources):
        raise DataError(f"shard sources {list(shard.sources)} are not the job's data sources")
    count = spec.devices if devices is None else devices
    if count < 1 or spec.training.grad_accum_steps % count:
        raise ValueError(
            f"devices must be >= 1 and divide grad_accum_steps "
            f"({spec.training.grad_accum_steps}); got {count}"
        )
    limits.check(spec, count, speed)
    placed = unit_devices(device, count)
    device = placed[0]
    repro = spec.reproducibility
    executes = environment.execution_class(spec, device, host)
    keep_freed_memory()
    with _reproducible(executes):
        corpora = load_corpora(spec.data, storage, local_data, limits.max_source_bytes)
        sampler = Sampler(corpora, spec.data.seq_len, spec.training.batch_size, repro.seed)
        trainer = Trainer(spec, sampler, device)
        if checkpoint is None:
            if isinstance(spec.model, HFSpec) and spec.model.base is not None:
                load_base(spec, trainer.model, storage)
            good = trainer.state()
        else:
            progress = checkpoint.state.get("progress")
            if not isinstance(progress, dict) or progress.get("spec_sha256") != spec.sha256():
                raise CheckpointError("checkpoint was produced under a different job spec")
            good = checkpoint.state
            trainer.load(good)
        start = trainer.step
        if not (shard.start_step <= start and start + steps <= shard.end_step):
            raise DataError(
                f"steps [{start}, {start + steps}) fall outside the shard's "
                f"[{shard.start_step}, {shard.end_step})"
            )
        if trainer.stream != shard.index:
            trainer.stream, trainer.cursor = shard.index, start
        trainer.cursor += skip
        follow = (spec, corpora, good, trainer.stream, trainer.cursor, start + steps, executes)
        with parallel.team(placed, _follow, *follow) as trainer.team:
            record = _train(trainer, good, start + steps, on_segment)
        trainer.team = None
        eval_loss = None
        if spec.training.eval_batches:
            eval_loss = trainer.evaluate(sampler.eval_batches(spec.training.eval_batches))
        state = trainer.state()
    result = Checkpoint(state)
    digest = result.state_hash()
    window = (trainer.step - 1) // spec.checkpoint.every * spec.checkpoint.every
    tokens = steps * spec.training.batch_size * spec.training.grad_accum_steps * spec.data.seq_len
    metrics = {
        "start_step": start,
        "end_step": trainer.step,
        "losses": record["losses"],
        "loss": record["losses"][-1],
        "eval_loss": eval_loss,
        "lr": trainer.lr(),
        "grad_norm": record["grad_norm"],
        "tokens": tokens,
        "seconds": record["seconds"],
        "tokens_per_s": tokens / record["seconds"],
        "rollbacks": record["rollbacks"],
        "skipped_batches": record["skipped_batches"],
    }
    result.metadata = {
        "state_hash": digest,
        "environment": environment.capture(
            repro.seed, executes.num_threads, repro.deterministic, device
        ),
        # the device count is not part of the class: the bits do not depend on it
        "execution": {
            "class": executes.to_dict(),
            "class_id": executes.class_id(),
            "devices": count,
        },
        "trace": {
            "segment_steps": trace.segment_steps(spec),
            "root": trace.merkle_root(trainer.trace),
            # the current window's, the ones the state's trace binds
            "segments": [s for s in record["segments"] if s["step"] > window],
        },
        "unit": {
            "shard": shard.to_dict(),
            "start_step": start,
            "steps": steps,
            "spec_sha256": spec.sha256(),
            "data_sha256": {c.name: c.sha256 for c in corpora},
        },
        "metrics": {k: v for k, v in metrics.items() if k != "losses"},
    }
    logger.info(
        "unit %d..%d on shard %d: loss %.4f eval %s, %d rollbacks, hash %s",
        start,
        trainer.step,
        shard.index,
        metrics["loss"],
        eval_loss,
        record["rollbacks"],
        digest[:12],
    )
    return UnitResult(result, digest, metrics)


def record_segment(
    trainer: Trainer, losses: list[float], on_segment: SegmentSink | None
) -> dict[str, Any]:
    """Commit `trainer` to the segment that ends at its step, whose steps had `losses`: its
    record, which `on_segment` receives with the state it names."""
    keep = on_segment is not None
    segment, state = trainer.commit_segment(sum(losses) / len(losses), keep=keep)
    if on_segment is not None and state is not None:
        on_segment(segment, Checkpoint(state))
    return segment


def _follow(
    team: parallel.Team,
    spec: JobSpec,
    corpora: list[Corpus],
    good: dict[str, Any],
    stream: int,
    cursor: int,
    end: int,
    executes: ExecutionClass,
) -> None:
    """Another worker's side of a unit trained on several devices: the same steps from the same
    state as worker 0, on its own share of each batch; worker 0 keeps the result."""
    with _reproducible(executes):
        sampler = Sampler(
            corpora, spec.data.seq_len, spec.training.batch_size, spec.reproducibility.seed
        )
        trainer = Trainer(spec, sampler, team.device, team)
        trainer.load(good)
        trainer.stream, trainer.cursor = stream, cursor
        _train(trainer, good, end, None)


def _train(
    trainer: Trainer, good: dict[str, Any], end: int, on_segment: SegmentSink | None
) -> dict[str, Any]:
    """The step loop, with loss-spike rollback to `good` (updated every checkpoint.every steps),
    committing to a segment at each of the trace's boundaries."""
    spec = trainer.spec
    spike = spec.training.loss_spike
    every = spec.checkpoint.every
    start = trainer.step
    losses: list[float] = []
    segments: list[dict[str, Any]] = []
    segment_from = 0  # index in `losses` of the current segment's first step
    grad_norm = None
    rollbacks = skipped = 0
    began = time.perf_counter()
    while trainer.step < end:
        if trainer.step % every == 0:  # a new unit window: its trace starts empty
            trainer.trace = []
        loss, grad_norm = trainer.forward_backward()
        if is_spike(loss, trainer.loss_history, spike):
            rollbacks += 1
            if rollbacks > spike.max_rollbacks:
                raise TrainingDiverged(
                    f"loss {loss:.4g} at step {trainer.step} after {spike.max_rollbacks} rollbacks"
                )
            spike_step, resume_at = trainer.step, trainer.cursor + 1 + spike.skip_batches
            trainer.load(good)
            logger.warning(
                "loss spike %.4g at step %d: back to step %d, skipping batches %d..%d",
                loss,
                spike_step,
                trainer.step,
                trainer.cursor,
                resume_at - 1,
            )
            skipped += resume_at - trainer.cursor
            trainer.cursor = resume_at
            del losses[trainer.step - start :]
            segments = [s for s in segments if s["step"] <= trainer.step]
            segment_from = len(losses)
            continue
        trainer.apply(loss)
        losses.append(loss)
        if trace.is_boundary(spec, trainer.step):
            segments.append(record_segment(trainer, losses[segment_from:], on_segment))
            segment_from = len(losses)
        if trainer.step % every == 0 and trainer.step < end:
            good = trainer.state()
    return {
        "losses": losses,
        "segments": segments,
        "grad_norm": grad_norm,
        "rollbacks": rollbacks,
        "skipped_batches": skipped,
        "seconds": time.perf_counter() - began,
    }


@contextmanager
def _reproducible(executes: ExecutionClass) -> Iterator[None]:
    """Put the process in the unit's execution class for the unit; restore it afterwards.

    Deterministic runs use deterministic kernels on every device: on CUDA, cuBLAS with a fixed
    workspace (read when a cuBLAS handle is made), cuDNN's deterministic algorithms and no
    autotuning (which picks kernels by timing), and TF32 convolutions only where the class's
    matmul precision allows TF32 at all. Shapes are fixed by the spec (no packing, no ragged
    batches), so the same class runs the same kernels.
    """
    cudnn = torch.backends.cudnn
    saved = (
        torch.get_num_threads(),
        torch.are_deterministic_algorithms_enabled(),
        torch.get_float32_matmul_precision(),
        torch.backends.mkldnn.enabled,
        cudnn.benchmark,
        cudnn.deterministic,
        cudnn.allow_tf32,
    )
    torch.set_num_threads(executes.num_threads)
    torch.set_float32_matmul_precision(executes.matmul_precision)
    torch.backends.mkldnn.enabled = executes.mkldnn  # type: ignore[assignment]
    cudnn.allow_tf32 = executes.matmul_precision != "highest"
    if executes.deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True)
        cudnn.benchmark = False
        cudnn.deterministic = True
    try:
        yield
    finally:
        torch.set_num_threads(saved[0])
        torch.use_deterministic_algorithms(saved[1])
        torch.set_float32_matmul_precision(saved[2])
        torch.backends.mkldnn.enabled = saved[3]
        cudnn.benchmark, cudnn.deterministic, cudnn.allow_tf32 = saved[4:]
