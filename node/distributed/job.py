"""A job's `distributed` section as the group's settings; training by it, and re-running a unit."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from marketplace.protocol.rank_bundle import RankUnit, RecordedRound, rank_bundle, update_sha256
from marketplace.protocol.spec import AggregationSpec, CompressionSpec, DilocoSpec, JobSpec
from node.engine.limits import checkpoint_bytes, parameter_count
from node.engine.unit import SegmentSink

from .aggregation import Aggregator
from .compression import Compressor
from .ddp import ddp_rank, rerun_ddp_unit, train_ddp
from .diloco import DilocoConfig, diloco_rank, rerun_diloco_unit, train_diloco
from .exchange import recorded_round, sent_in
from .group import (
    Delay,
    DistributedConfigError,
    DistributedResult,
    GroupConfig,
    Tamper,
    join_and_run,
    rank_trainer,
)
from .rank_unit import (
    RankUpdate,
    kept_residuals,
    kept_segments,
    rank_class,
    rank_threads,
    unit_path,
)


def group_config(
    spec: JobSpec, *, updates_dir: str | os.PathLike[str] | None = None
) -> GroupConfig:
    """The settings of `spec`'s group: a DilocoConfig for diloco, a GroupConfig for ddp.

    Random selections are drawn from the job's seed, which every node of the job shares.
    """
    distributed = spec.distributed
    if distributed.strategy == "single":
        raise DistributedConfigError("distributed.strategy is single: one node trains this job")
    compression = distributed.compression or CompressionSpec()
    aggregation = distributed.aggregation or AggregationSpec()
    common: dict[str, Any] = {  # the settings ddp and diloco share
        "ranks": distributed.nodes,
        "compressor": Compressor(
            ratio=compression.ratio,
            bits=compression.bits,
            selection=compression.selection,
            chunk=compression.chunk,
            seed=spec.reproducibility.seed,
        ),
        "aggregator": Aggregator(
            method=aggregation.method,
            trim=aggregation.trim,
            clip_multiplier=aggregation.clip_multiplier,
            clip_iterations=aggregation.clip_iterations,
        ),
        "error_feedback": compression.error_feedback,
        "quorum": distributed.quorum,
        "deadline_s": distributed.unit_deadline_s,
        "updates_dir": None if updates_dir is None else str(updates_dir),
    }
    if distributed.strategy == "ddp":
        return GroupConfig(**common)
    diloco = distributed.diloco or DilocoSpec()
    return DilocoConfig(
        **common,
        inner_steps=diloco.inner_steps,
        outer_lr=diloco.outer_lr,
        outer_momentum=diloco.outer_momentum,
    )


def train_spec(
    spec: JobSpec, *, updates_dir: str | os.PathLike[str] | None = None
) -> DistributedResult:
    """Train `spec` on `distributed.nodes` local ranks with the strategy it names."""
    config = group_config(spec, updates_dir=updates_dir)
    if isinstance(config, DilocoConfig):
        return train_diloco(spec, config)
    return train_ddp(spec, config)


def run_rank(
    spec: JobSpec,
    config: GroupConfig,
    rank: int,
    host: str,
    port: int,
    report: str,
    tamper: Tamper | None = None,
    start: RankUnit | None = None,
    keep_board: bool = False,
    delay: Delay | None = None,
) -> None:
    """One rank of a group that meets at `host:port`, in a process of its own (a provider's):
    join, train every unit from the seed or from `start`, and write the report to `report`.

    `tamper` replaces what the rank sends and `delay` holds it back, to play a Byzantine rank
    or a straggler in tests; `keep_board`: see `join_and_run`."""
    worker = diloco_rank if isinstance(config, DilocoConfig) else ddp_rank
    join_and_run(
        rank,
        spec,
        config,
        host,
        port,
        worker,
        (tamper, delay, start),
        Path(report),
        keep_board=keep_board,
    )


def run_rank_unit(
    spec: JobSpec,
    config: GroupConfig,
    unit: RankUnit,
    rounds: list[RecordedRound] | None = None,
    on_segment: SegmentSink | None = None,
) -> RankUpdate:
    """Re-run one rank's unit from its inputs (and, in ddp, the unit's recorded rounds): what
    it should have sent, the hash it should have committed and, in DiLoCo, the segments, which
    `on_segment` receives with their states."""
    if isinstance(config, DilocoConfig):
        payload, segments = rerun_diloco_unit(spec, config, unit, on_segment=on_segment)
        return RankUpdate(payload, update_sha256(payload), segments=segments)
    if rounds is None:
        raise ValueError("a ddp unit is re-run from the rounds it took part in")
    payload, following, residuals = rerun_ddp_unit(spec, config, unit, rounds)
    return RankUpdate(payload, update_sha256(payload), following, residuals=residuals)


def rank_bundle_bytes(spec: JobSpec) -> int:
    """The most bytes an honest rank bundle of `spec`'s group can take: two checkpoints' (the
    rank's trainer and, in the last unit, the trained model; the room covers its residual and
    outer momentum, and the members' signatures), every exchange of a unit, its own payload
    and each member's, and in ddp the residuals committed inside the unit (each with a few KiB
    for its framing). Reading one stops past this, whoever committed it."""
    config = group_config(spec)
    exchanges = len(config.unit_rounds(spec, 0))
    numel = parameter_count(spec)
    payload = config.compressor.payload_bytes(numel)
    residuals = len(config.residual_steps(spec)) * (4 * numel + 4096)
    return 2 * checkpoint_bytes(spec) + exchanges * (config.ranks + 1) * payload + residuals


def first_unit(spec: JobSpec, rank: int) -> RankUnit:
    """The inputs every rank's unit 0 starts from: the spec's seed, nothing sent yet."""
    with rank_threads():
        trainer, _ = rank_trainer(spec, rank)
        return RankUnit(rank, 0, trainer.state(), None)


def unit_bundle(
    spec: JobSpec,
    config: GroupConfig,
    updates_dir: str | os.PathLike[str],
    rank: int,
    index: int,
    pin: Callable[[bytes], str],
    last: bool = False,
) -> tuple[str, bytes]:
    """The commitment and rank bundle of `rank`'s unit `index` from its `updates_dir`: its
    inputs and payloads; every exchange's members and what they sent (a ddp unit's steps, a
    DiLoCo round's one); in DiLoCo the round's segment records, each naming the state it ends
    in by the CID `pin` gives its bytes; in ddp the residuals committed inside the unit; and
    the class it trained in (this node's CPU). The last unit's also holds the trained
    model."""
    rounds = config.unit_rounds(spec, index)
    payload = sent_in(updates_dir, rounds, rank)
    inputs = RankUnit.load(unit_path(updates_dir, index, rank))
    weights = (
        RankUnit.load(unit_path(updates_dir, index + 1, rank)).trainer["model"] if last else None
    )
    # ddp steps are re-run from the others' payloads; a DiLoCo round's make the next one's start
    recorded = [recorded_round(updates_dir, r) for r in rounds]
    segments, residuals = None, []
    if isinstance(config, DilocoConfig):
        segments = [
            record | {"cid": pin(state.read_bytes())}
            for record, state in kept_segments(updates_dir, index, rank)
        ]
    else:
        residuals = kept_residuals(updates_dir, index, rank, len(config.residual_steps(spec)))
    execution = rank_class(spec).to_dict()
    bundle = rank_bundle(inputs, payload, weights, recorded, execution, segments, residuals)
    return update_sha256(payload), bundle
