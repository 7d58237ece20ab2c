"""A unit's trajectory commitment: what a provider commits every k steps while it trains.

Every `segment_steps(spec)` optimizer steps (and at the end of the schedule) the trainer records
a segment: the step, the state hash of the full training state at that step, the mean loss of
the segment's steps, and a sketch of the model's weights. Each record's digest is appended to
the training state's `trace` list, so the unit's state hash binds every record it made; the list
restarts at each multiple of `checkpoint.every`, so a unit's trace holds exactly its own segments
and a run split into units still hashes like one run whole. The Merkle root over a unit's
digests is what evidence cites, and a Merkle path proves one segment without the others.

A verifier of another execution class cannot match the state hash, but it can re-run the unit and
compare its own trajectory with these records (verifier/trajectory.py); where they part, the
record's state hash names the provider's intermediate state, from which one segment is re-run.
"""

from __future__ import annotations

import hashlib
import json
import math
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from marketplace.protocol.spec import JobSpec

SKETCH_DIM = 64  # sketch coordinates; distances on sketches are within ~1/sqrt(64) of the truth
_SKETCH_SEED = 0x5EED_2026
_LEAF_PREFIX = b"zoo-segment/1\n"
_NODE_PREFIX = b"zoo-merkle/1\n"
_SEGMENTS_PER_UNIT = 8  # aim: about this many segments in a full unit
# and none longer than this: the honest cross-class drift a dispute's one-segment re-run is
# judged by is measured up to this many steps (scripts/calibrate_verification.py)
MAX_SEGMENT_STEPS = 16


def segment_steps(spec: JobSpec) -> int:
    """k of a unit of `checkpoint.every` steps (`segment_length`)."""
    return segment_length(spec.checkpoint.every)


def segment_length(every: int) -> int:
    """k for units of `every` steps: the largest divisor of `every` at most ceil(every / 8) and
    at most MAX_SEGMENT_STEPS, so every unit boundary is a segment boundary, a full unit has
    about eight segments or more, and none is longer than the calibration measured."""
    target = min(MAX_SEGMENT_STEPS, max(1, math.ceil(every / _SEGMENTS_PER_UNIT)))
    return max(d for d in range(1, target + 1) if every % d == 0)


def is_boundary(spec: JobSpec, step: int) -> bool:
    """Whether the trainer records a segment after optimizer step `step`."""
    return step % segment_steps(spec) == 0 or step == spec.training.max_steps


def boundaries(spec: JobSpec, start: int, steps: int) -> list[int]:
    """The segment ends inside the unit that trains steps (start, start + steps]."""
    return [s for s in range(start + 1, start + steps + 1) if is_boundary(spec, s)]


def sketch(model: Mapping[str, torch.Tensor]) -> list[float]:
    """A CountSketch of the floating-point weights: each entry goes, with a random sign, to one of
    SKETCH_DIM buckets fixed by its tensor's name and position. Linear, so the sketch of a
    difference is the difference of sketches, and its norm estimates the difference's norm."""
    out = torch.zeros(SKETCH_DIM, dtype=torch.float64)
    for name in sorted(model):
        tensor = model[name]
        if not tensor.is_floating_point():
            continue
        flat = tensor.detach().to("cpu", torch.float64).reshape(-1)
        buckets, signs = _hashing(name, flat.numel())
        out.index_add_(0, buckets, flat * signs)
    return [float(x) for x in out]


def _hashing(name: str, numel: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The buckets and signs of a tensor's entries, drawn from a generator seeded by its name.
    A trainer sketches the same tensors every segment, so they are kept (as int32 and int8, 5
    bytes an entry) up to _HASHING_CACHE_BYTES in all; drawing them is most of a sketch's time."""
    global _hashings_bytes
    key = (name, numel)
    if (kept := _hashings.get(key)) is not None:
        return kept
    seed = int.from_bytes(hashlib.sha256(name.encode()).digest()[:6], "big") ^ _SKETCH_SEED
    gen = torch.Generator().manual_seed(seed)
    buckets = torch.randint(SKETCH_DIM, (numel,), generator=gen)
    signs = torch.randint(2, (numel,), generator=gen, dtype=torch.int8) * 2 - 1
    hashing = buckets.to(torch.int32), signs
    with _hashings_lock:
        if _hashings_bytes + 5 * numel <= _HASHING_CACHE_BYTES:
            _hashings[key] = hashing
            _hashings_bytes += 5 * numel
    return hashing


_HASHING_CACHE_BYTES = 64 << 20
_hashings: dict[tuple[str, int], tuple[torch.Tensor, torch.Tensor]] = {}
_hashings_bytes = 0
_hashings_lock = threading.Lock()


def record(step: int, state_hash: str, loss: float, model: Mapping[str, torch.Tensor]) -> dict:
    """One segment's record (what the checkpoint's metadata lists; its digest is in the state)."""
    return {"step": step, "state_hash": state_hash, "loss": loss, "sketch": sketch(model)}


def leaf(segment: Mapping[str, Any]) -> str:
    """The digest of a segment record: sha256 over its canonical JSON (floats by exact repr)."""
    body = json.dumps(
        {k: segment[k] for k in ("step", "state_hash", "loss", "sketch")},
        sort_keys=True,
        separators=(",", ":"),
    )
    return hashlib.sha256(_LEAF_PREFIX + body.encode()).hexdigest()


def merkle_root(leaves: Sequence[str]) -> str:
    """Binary Merkle root over hex leaves (an odd node is promoted); the empty tree's root is the
    hash of nothing."""
    level = [bytes.fromhex(x) for x in leaves]
    if not level:
        return hashlib.sha256(_NODE_PREFIX).hexdigest()
    while len(level) > 1:
        level = [
            hashlib.sha256(_NODE_PREFIX + level[i] + level[i + 1]).digest()
            if i + 1 < len(level)
            else level[i]
            for i in range(0, len(level), 2)
        ]
    return level[0].hex()
