"""The provider's training engine: verifiable, bit-identical work units from a YAML job spec.

A job is a sequence of work units. A unit is `steps` optimizer steps from a checkpoint on a
data shard; its result is a new checkpoint (marketplace/protocol/checkpoint.py) whose state
hash the provider commits on-chain and a verifier recomputes by running the same unit again.

    spec = load_spec("node/specs/tiny.yaml")             # or parse_spec(yaml_text_or_dict)
    shard = unit_shard(spec, slot=0)                      # the whole step range of slot 0
    ckpt, state_hash, metrics = run_unit(spec, None, shard, spec.checkpoint.every)
    ckpt, state_hash, metrics = run_unit(spec, ckpt, shard, spec.checkpoint.every)
    blob = ckpt.to_bytes(); same = Checkpoint.load(blob); same.state_hash() == state_hash

`run_unit(spec, checkpoint, shard, steps, *, storage=None, local_data=LocalData(),
limits=UnitLimits(), device=None, devices=None) -> UnitResult`
returns `(checkpoint, state_hash, metrics)`. A spec's `resources.devices` trains each unit on
that many devices, data parallel, with the bits of one (node/engine/parallel.py); `devices`
overrides the count, e.g. for a verifier that re-runs on one. A checkpoint's metadata records
the unit that made it (shard, start step, steps;
`Shard.from_dict(ckpt.metadata["unit"]["shard"])`), so a verifier can rerun that unit from the
previous checkpoint and compare hashes.

Errors: `SpecError` (bad spec; names the field), `DataError` (unreadable source, or a shard
that does not fit; `SpecOverLimits` for a spec that would use more of the machine than `limits`
allow), `CheckpointError` (unreadable checkpoint, or one from another job),
`TrainingDiverged` (loss spikes beyond the rollbacks allowed), `TeamError` (a unit that cannot
be split across devices with one device's bits, or whose other workers failed). What a unit
costs (peak memory, FLOPs, operators; `cost.unit_cost(spec)`) is counted from its spec on fake
tensors, and `speed.machine_speed(device, max_threads)` turns it into seconds on this machine. A
spec's `file` sources are read only under the directories `LocalData` names: by default none.
New architectures plug in with `@register("name")` on a `ModelSpec` subclass.
"""

from marketplace.protocol.spec import (
    ARCHITECTURES,
    JobSpec,
    ModelSpec,
    SpecError,
    load_spec,
    parse_spec,
    register,
)

from .data import ContentStore, DataError, LocalData, Shard
from .limits import SpecOverLimits, UnitLimits
from .parallel import TeamError
from .unit import TrainingDiverged, UnitResult, run_unit, unit_shard

__all__ = [
    "ARCHITECTURES",
    "ContentStore",
    "DataError",
    "JobSpec",
    "LocalData",
    "ModelSpec",
    "Shard",
    "SpecError",
    "SpecOverLimits",
    "TeamError",
    "TrainingDiverged",
    "UnitLimits",
    "UnitResult",
    "load_spec",
    "parse_spec",
    "register",
    "run_unit",
    "unit_shard",
]
