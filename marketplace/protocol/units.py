"""A job's work units: the format its spec commits them in, and how the spec cuts a slot's work
into them. What the user asks the market for, providers deliver and verifiers re-run.

A single-node job (`distributed.strategy: single`) commits checkpoints: slot `s` trains on data
shard `s` over the whole step range, and its unit `i` is the `checkpoint.every` optimizer steps
from step `i * every` (the last may be shorter), from the spec's seed for unit 0 and from the
checkpoint committed as unit `i - 1` after it. A group job (`ddp`, `diloco`) commits rank
bundles: slot `s` is rank `s` of the job's group, and its unit `i` is its DiLoCo round `i`, or
in ddp its `checkpoint.every` steps from step `i * every`.

`unit_format(spec)` is the one place that tells the two apart: roles keep their own work for each
format in a table keyed by what it returns, and everyone reads units through it. A reader that
holds a unit but not its job's spec asks `read_unit`, which goes by the format the unit's bytes
are tagged with. Naming a format and counting its units needs no torch, so the gateway and the
CLI quote a job with it; both formats are safetensors files read into torch tensors, so reading
a unit loads torch, with the first unit read.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from marketplace.errors import ZooError
from marketplace.protocol.spec import DilocoSpec, JobSpec

if TYPE_CHECKING:
    import torch

    from marketplace.protocol.checkpoint import Checkpoint
    from marketplace.protocol.rank_bundle import RankBundle


class UnitFormatError(ZooError, ValueError):
    """Bytes that are not a work unit, or not one of the format they were read as."""


class ResultError(ZooError):
    """A job's committed units do not make a trained model."""


@dataclass(frozen=True, order=True)
class LastUnit:
    """A slot's live last unit, as the chain or a gateway reports it; ordered by slot first.

    A dataclass, not a NamedTuple, whose `index` field would hide `tuple.index`.
    """

    slot: int
    index: int
    cid: str
    state_hash: str  # hex, 0x optional


class TrainedModel(NamedTuple):
    """A job's result: the trained weights, read from `cid` and checked against `state_hash`."""

    cid: str  # slot 0's last unit
    state_hash: str  # hex: the checkpoint's committed state hash, or the group model's own
    weights: dict[str, torch.Tensor]


class UnitFormat(ABC):
    """One kind of work unit: how a spec cuts a slot's work into units, what a unit's bytes hold,
    the loss a unit reports, and what the job's trained model is."""

    tag: str  # the `format` field a unit's bytes are tagged with

    @abstractmethod
    def units(self, spec: JobSpec) -> int:
        """How many units one slot delivers: what `createJob` is asked for."""

    @abstractmethod
    def steps(self, spec: JobSpec, index: int) -> int:
        """Optimizer steps in unit `index`; ValueError for an index past the job's units."""

    @abstractmethod
    def read(self, data: bytes) -> Any:
        """The unit `data` holds; UnitFormatError when it is not one of this format."""

    @abstractmethod
    def from_fields(self, fields: Mapping[str, Any]) -> Any:
        """The unit of a tagged mapping already loaded (see `read_unit`)."""

    @abstractmethod
    def loss(self, unit: Any) -> float | None:
        """The training loss the unit (as `read` gives it) reports; None when it holds none."""

    @abstractmethod
    def trained_model(
        self,
        job_id: int,
        units: Sequence[LastUnit],
        read: Callable[[LastUnit], Any],
        nodes: int,
        units_per_node: int,
    ) -> TrainedModel:
        """The job's model from its slots' live last units, read through `read`; ResultError
        when they do not make one."""

    def _check_index(self, spec: JobSpec, index: int) -> None:
        if not 0 <= index < self.units(spec):
            raise ValueError(f"unit {index} is outside the job's {self.units(spec)} units")


class CheckpointUnits(UnitFormat):
    """A single-node job's units: checkpoints, each committed with its state hash."""

    tag = "zoo-checkpoint/1"

    def units(self, spec: JobSpec) -> int:
        return math.ceil(spec.training.max_steps / spec.checkpoint.every)

    def steps(self, spec: JobSpec, index: int) -> int:
        self._check_index(spec, index)
        return min(spec.checkpoint.every, spec.training.max_steps - index * spec.checkpoint.every)

    def read(self, data: bytes) -> Checkpoint:
        # torch, loaded with the first unit read
        from marketplace.protocol.checkpoint import Checkpoint

        return Checkpoint.load(data)

    def from_fields(self, fields: Mapping[str, Any]) -> Checkpoint:
        from marketplace.protocol.checkpoint import Checkpoint

        return Checkpoint.from_fields(fields)

    def loss(self, unit: Checkpoint) -> float | None:
        """The loss of the unit's last step, from its metrics."""
        return unit.metadata.get("metrics", {}).get("loss")

    def trained_model(
        self,
        job_id: int,
        units: Sequence[LastUnit],
        read: Callable[[LastUnit], Any],
        nodes: int,
        units_per_node: int,
    ) -> TrainedModel:
        """Slot 0's model, from a checkpoint that holds the state hash committed on-chain."""
        unit = min(units)
        committed = unit.state_hash.removeprefix("0x")
        checkpoint = read(unit)
        if checkpoint.state_hash() != committed:
            raise ResultError(
                f"checkpoint {unit.cid} does not hold the committed state {committed}"
            )
        return TrainedModel(unit.cid, committed, checkpoint.state["model"])


class RankBundleUnits(UnitFormat):
    """A group job's units: rank bundles, each committed with the sha256 of what its rank sent."""

    tag = "zoo-compute/rank-unit-v2"

    def units(self, spec: JobSpec) -> int:
        return spec.training.max_steps // group_unit_steps(spec)

    def steps(self, spec: JobSpec, index: int) -> int:
        self._check_index(spec, index)
        return group_unit_steps(spec)

    def read(self, data: bytes) -> RankBundle:
        # torch, loaded with the first unit read
        from marketplace.protocol.rank_bundle import load_rank_bundle

        return load_rank_bundle(data)

    def from_fields(self, fields: Mapping[str, Any]) -> RankBundle:
        from marketplace.protocol.rank_bundle import RankBundle

        return RankBundle.from_fields(fields)

    def loss(self, unit: RankBundle) -> float | None:
        """The last loss the rank had seen when its unit began."""
        history = unit.unit.trainer["progress"]["loss_history"]
        return float(history[-1]) if history else None

    def trained_model(
        self,
        job_id: int,
        units: Sequence[LastUnit],
        read: Callable[[LastUnit], Any],
        nodes: int,
        units_per_node: int,
    ) -> TrainedModel:
        """The model every rank's last bundle holds: each rank applies the same outer steps, so
        all of them must hold the same weights, and any disagreement is refused."""
        from marketplace.protocol.checkpoint import state_hash

        if len(units) < nodes or any(u.index != units_per_node - 1 for u in units):
            raise ResultError(f"job {job_id} has not delivered every rank's last round")

        def weights_of(unit: LastUnit) -> dict[str, torch.Tensor]:
            held = read(unit).weights
            if held is None:
                raise ResultError(f"rank bundle {unit.cid} holds no trained model")
            return held

        first, *others = sorted(units)
        weights = weights_of(first)
        digests = {first.slot: state_hash(weights)}
        digests.update((unit.slot, state_hash(weights_of(unit))) for unit in others)
        if len(set(digests.values())) != 1:
            raise ResultError(
                f"job {job_id}: the ranks' final weights disagree (by slot: {digests})"
            )
        return TrainedModel(first.cid, digests[first.slot], weights)


CHECKPOINTS = CheckpointUnits()
RANK_BUNDLES = RankBundleUnits()
_BY_TAG = {fmt.tag: fmt for fmt in (CHECKPOINTS, RANK_BUNDLES)}


def unit_format(spec: JobSpec) -> UnitFormat:
    """The format `spec`'s units are committed in: the one place a single-node job's units are
    told from a group's."""
    return CHECKPOINTS if spec.distributed.strategy == "single" else RANK_BUNDLES


def is_group_job(spec: JobSpec) -> bool:
    """Whether the job's slots train together as one group rather than each on its own."""
    return unit_format(spec) is RANK_BUNDLES


def units_per_node(spec: JobSpec) -> int:
    """How many work units one slot delivers: what `createJob` is asked for."""
    return unit_format(spec).units(spec)


def is_last_unit(spec: JobSpec, index: int) -> bool:
    """Whether unit `index` is a slot's last: a group rank's holds the trained model."""
    return index == units_per_node(spec) - 1


def unit_steps(spec: JobSpec, index: int) -> int:
    """Optimizer steps in a slot's unit `index`."""
    return unit_format(spec).steps(spec, index)


def group_unit_steps(spec: JobSpec) -> int:
    """Optimizer steps in one of a group rank's units: a DiLoCo round, in ddp `checkpoint.every`."""
    if spec.distributed.strategy == "diloco":
        return diloco_round_steps(spec, (spec.distributed.diloco or DilocoSpec()).inner_steps)
    return spec.checkpoint.every


def diloco_round_steps(spec: JobSpec, inner_steps: int | None) -> int:
    """H, the local steps of a DiLoCo round: `inner_steps`, by default `checkpoint.every`."""
    return inner_steps or spec.checkpoint.every


def read_unit(data: bytes) -> tuple[UnitFormat, Any]:
    """The format `data` is tagged with and the unit it holds, for a reader without the job's
    spec; UnitFormatError for bytes that are no work unit."""
    # torch, loaded with the first unit read
    from marketplace.protocol.tagged import load_tagged

    fields = load_tagged(data)
    fmt = _BY_TAG.get(fields["format"])
    if fmt is None:
        known = ", ".join(_BY_TAG)
        raise UnitFormatError(f"not a work unit: format {fields['format']!r} is none of {known}")
    return fmt, fmt.from_fields(fields)


def trained_model(
    job_id: int,
    units: Sequence[LastUnit],
    nodes: int,
    units_per_node: int,
    fetch: Callable[[str], bytes],
) -> TrainedModel:
    """A job's trained model from its slots' live last units (`fetch` gives a CID's bytes), by the
    rules of the format slot 0's unit is in; ResultError when the units do not make one."""
    if not units:
        raise ResultError(f"job {job_id} has no committed checkpoint")
    first = min(units)
    try:
        fmt, held = read_unit(fetch(first.cid))
    except UnitFormatError as exc:
        raise ResultError(f"unit {first.cid}: {exc}") from None

    def read(unit: LastUnit) -> Any:
        if unit == first:
            return held
        try:
            return fmt.read(fetch(unit.cid))
        except UnitFormatError as exc:
            raise ResultError(f"unit {unit.cid}: {exc}") from None

    return fmt.trained_model(job_id, units, read, nodes, units_per_node)
