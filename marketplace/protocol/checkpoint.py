"""Checkpoints: a single-node job's work units, the full training state of its slot, and the
canonical hash of a training state, which the chain commits.

The state hash identifies a checkpoint independently of the bytes of its file. Every leaf of the
nested `state` mapping gets a path (keys joined by "/", list positions as numbers), leaves are
taken in sorted path order, and each is fed to BLAKE3 as a length-prefixed JSON header line
followed, for tensors, by the tensor's raw little-endian bytes:

    tensor: ["<path>", "tensor", "<dtype>", [shape...], <nbytes>] + "\\n" + raw bytes
    other:  ["<path>", "value", <JSON value>] + "\\n"

after the prefix b"zoo-state/2\\n". Floats are encoded by their shortest exact repr, so equal
hashes mean equal bits. `metadata` (environment, timings) is not part of the hash. A trainer
hashes its whole state at every trajectory record (marketplace.protocol.trace), so the hash is
BLAKE3: about four times faster than SHA-256 here, with the same 128-bit collision security.
"""

from __future__ import annotations

import copy
import ctypes
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from operator import itemgetter
from pathlib import Path
from typing import Any

import blake3
import torch

from marketplace.protocol.tagged import dump_tagged, load_tagged
from marketplace.protocol.units import CHECKPOINTS, UnitFormatError

_HASH_PREFIX = b"zoo-state/2\n"
# header lines and tensors under this many bytes are fed to the hash in one joined update
_SMALL_BYTES = 8192


class CheckpointError(UnitFormatError):
    """A checkpoint that cannot be read, or that does not belong to the job at hand."""


@dataclass
class Checkpoint:
    """Model, optimizer, scheduler, RNG and progress state, plus unhashed metadata.

    `state` holds "model", "optimizer", "scheduler", "rng" and "progress" (step, shard index,
    batch cursor, recent losses, the job spec's sha256).
    """

    state: dict[str, Any]  # everything the state hash covers
    metadata: dict[str, Any] = field(default_factory=dict)  # environment and unit record

    @property
    def step(self) -> int:
        return int(self.state["progress"]["step"])

    def state_hash(self) -> str:
        return state_hash(self.state)

    def clone(self) -> Checkpoint:
        return Checkpoint(copy.deepcopy(self.state), copy.deepcopy(self.metadata))

    def to_bytes(self) -> bytes:
        return dump_tagged(CHECKPOINTS.tag, {"state": self.state, "metadata": self.metadata})

    def save(self, path: str | os.PathLike[str]) -> None:
        Path(path).write_bytes(self.to_bytes())

    @classmethod
    def load(cls, source: bytes | str | os.PathLike[str]) -> Checkpoint:
        """Read a checkpoint from serialized bytes or a file path (tensors only, no code)."""
        try:
            raw = source if isinstance(source, bytes) else Path(source).read_bytes()
            fields = load_tagged(raw, CHECKPOINTS.tag)
        except (OSError, UnitFormatError) as exc:
            raise CheckpointError(f"cannot read checkpoint: {exc}") from None
        return cls.from_fields(fields)

    @classmethod
    def from_fields(cls, fields: Mapping[str, Any]) -> Checkpoint:
        """The checkpoint a loaded tagged mapping holds; refused unless its state and metadata are
        mappings (a checkpoint is written by whoever committed it)."""
        state, metadata = fields.get("state"), fields.get("metadata")
        if not isinstance(state, dict) or not isinstance(metadata, dict):
            raise CheckpointError("not a checkpoint: it needs a 'state' and a 'metadata' mapping")
        return cls(state, metadata)


def state_hash(state: Mapping[str, Any]) -> str:
    """BLAKE3 over the leaves of `state` in sorted path order (format in the module docstring)."""
    leaves: list[tuple[str, Any]] = []
    _leaves(state, "", leaves)
    leaves.sort(key=itemgetter(0))
    digest = blake3.blake3()
    # short pieces are joined into one update: a call each would cost more than their bytes
    small = [_HASH_PREFIX]
    for path, leaf in leaves:
        if not isinstance(leaf, torch.Tensor):
            small.append(_value_line(path, leaf))
            continue
        flat = leaf.detach().to("cpu").contiguous()
        nbytes = flat.nbytes
        small.append(_tensor_line(path, flat.dtype, flat.shape, nbytes))
        if nbytes < _SMALL_BYTES:
            small.append(ctypes.string_at(flat.data_ptr(), nbytes))
            continue
        digest.update(b"".join(small))
        small.clear()
        # hash the tensor's memory in place rather than copying it out
        digest.update(memoryview((ctypes.c_char * nbytes).from_address(flat.data_ptr())).cast("B"))
    digest.update(b"".join(small))
    return digest.hexdigest()


# A state's paths, shapes and most of its values repeat from one state to the next, and a unit
# hashes one at every segment, so their header lines are kept: short ones only, and a bounded
# number, since a checkpoint may come from anyone. Floats are not kept: -0.0 == 0.0, and they
# would share a line; the key's type keeps 1 and True apart.
_KEPT_LINES = 8192
_KEPT_LINE_BYTES = 512
_kept: dict[tuple[Any, ...], bytes] = {}


def _tensor_line(path: str, dtype: torch.dtype, shape: torch.Size, nbytes: int) -> bytes:
    key = (path, dtype, shape, nbytes)
    if (line := _kept.get(key)) is None:
        header = [path, "tensor", str(dtype).removeprefix("torch."), list(shape), nbytes]
        line = _keep(key, json.dumps(header).encode() + b"\n")
    return line


def _value_line(path: str, leaf: float | str | None) -> bytes:
    if isinstance(leaf, float):
        return json.dumps([path, "value", leaf]).encode() + b"\n"
    key = (path, type(leaf), leaf)
    if (line := _kept.get(key)) is None:
        line = _keep(key, json.dumps([path, "value", leaf]).encode() + b"\n")
    return line


def _keep(key: tuple[Any, ...], line: bytes) -> bytes:
    if len(line) <= _KEPT_LINE_BYTES:
        if len(_kept) >= _KEPT_LINES:
            _kept.clear()
        _kept[key] = line
    return line


def _leaves(node: Any, path: str, out: list[tuple[str, Any]]) -> None:
    """Append every leaf under `node` to `out` with its path."""
    if isinstance(node, Mapping):
        for key, value in node.items():
            _leaves(value, f"{path}/{key}", out)
    elif isinstance(node, (list, tuple)):
        for i, value in enumerate(node):
            _leaves(value, f"{path}/{i}", out)
    elif node is None or isinstance(node, (bool, int, float, str, torch.Tensor)):
        out.append((path, node))
    else:
        raise CheckpointError(f"state leaf {path} has unhashable type {type(node).__name__}")
