"""Rank bundles: a group job's work units, one rank's inputs for a unit and the bytes it sent.

A unit's CID names a rank bundle: the rank's inputs for the unit (a `RankUnit`: the global
weights and outer momentum, its optimizer, data position and error-feedback residual at the
unit's start), the payloads it sent, back to back, and every exchange's members and what each
of them sent: a ddp step's aggregate is rebuilt from them, and so is the start of a DiLoCo
rank's next round (the outer step on the round's aggregate). Those payloads are a pure
function of the spec, the group's settings, the rank's inputs and, in ddp, what the others sent
at each step before, so a verifier re-runs the unit from the bundle on the CPU and gets the same
bytes, or names the rank that sent something else. The unit's state hash is the payloads'
sha256 (`update_sha256`), the rank's commitment. A rank's last bundle also holds the group's
trained model: every rank ends with the same weights, so the result is what all slots' last
units agree on.

A ddp rank with error feedback also commits its residual every `DDP_RESIDUAL_EVERY` steps
inside its unit: a verifier of another class takes it up there, so its re-run's residual,
which carries every step's rounding into the next, never drifts further from the rank's than
over the steps its bounds were measured on.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple, TypeGuard

import torch

from marketplace.protocol.checkpoint import state_hash
from marketplace.protocol.tagged import dump_tagged, load_tagged
from marketplace.protocol.units import RANK_BUNDLES, UnitFormatError

_RANK_UNIT_TAG = "zoo-compute/rank-inputs-v1"  # a rank's saved inputs, on its provider's disk
# a ddp rank's residual is committed after every this many steps of its unit (not at its end,
# where the next unit's inputs hold it): the stretch the rank table measures
# (scripts/calibrate_rank_verification.py)
DDP_RESIDUAL_EVERY = 20


@dataclass(frozen=True)
class RankUnit:
    """What one rank's unit starts from; with the spec and settings, it fixes what it sends."""

    rank: int  # the rank, which is also its data shard
    round_: int  # the unit's index: the DiLoCo round, or the ddp unit of checkpoint.every steps
    trainer: dict[str, Any]  # Trainer.state() at the unit's start; its model is the global one
    residual: torch.Tensor | None  # (N,) error feedback carried in; None before the first send
    # (N,) the outer optimizer's momentum, the same on every rank; None without one (ddp),
    # without momentum, or before the first outer step. Not needed to re-run the unit, but
    # to take the rank over.
    momentum: torch.Tensor | None = None

    def fields(self) -> dict[str, Any]:
        """The unit as saved, bundled and hashed."""
        return {
            "rank": self.rank,
            "round": self.round_,
            "trainer": self.trainer,
            "residual": self.residual,
            "momentum": self.momentum,
        }

    @classmethod
    def from_fields(cls, fields: Mapping[str, Any]) -> RankUnit:
        """The unit `fields` hold; UnitFormatError for fields of other types."""
        rank, round_, trainer = fields.get("rank"), fields.get("round"), fields.get("trainer")
        if not (_is_index(rank) and _is_index(round_) and isinstance(trainer, dict)):
            raise UnitFormatError("a rank unit's rank, round and trainer are not indices and a map")
        residual, momentum = fields.get("residual"), fields.get("momentum")
        if not all(t is None or isinstance(t, torch.Tensor) for t in (residual, momentum)):
            raise UnitFormatError("a rank unit's residual and momentum are not tensors")
        return cls(rank, round_, trainer, residual, momentum)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Written whole or not at all: the provider's daemon takes its existence as the
        previous unit's end."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(path.name + ".partial")
        partial.write_bytes(dump_tagged(_RANK_UNIT_TAG, self.fields()))
        os.replace(partial, path)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> RankUnit:
        return cls.from_fields(load_tagged(Path(path).read_bytes(), _RANK_UNIT_TAG))

    def state_hash(self) -> str:
        """The digest of everything the unit starts from (checkpoint.py's state hash)."""
        return state_hash(self.fields())


class RecordedRound(NamedTuple):
    """One exchange as a rank saw it: who made it up, what each of them sent and each one's
    signature on it (protocol.round_signatures); None in records that keep no signatures."""

    members: list[int]
    payloads: list[bytes]  # by member
    signatures: list[bytes] | None = None  # by member


class RankBundle(NamedTuple):
    unit: RankUnit  # the rank's inputs for the unit
    payload: bytes  # what it sent, back to back
    weights: dict[str, torch.Tensor] | None  # the group's model after the job's last unit
    # every exchange's members and what they sent: a ddp unit's steps, a DiLoCo round's one.
    # None in DiLoCo bundles that record none
    rounds: list[RecordedRound] | None
    # the execution class the rank trained in (protocol.execution), the provider's word: it
    # only chooses how a verifier judges the unit. None in bundles that record none
    execution: dict[str, Any] | None = None
    # DiLoCo: the round's segment records (protocol.trace), each naming by "cid" the state it
    # ends in, which the provider pins; a verifier of another class judges the round by them.
    # None in ddp and in bundles that record none
    segments: list[dict[str, Any]] | None = None
    # ddp with error feedback: the rank's residual after each `DDP_RESIDUAL_EVERY` steps of
    # the unit, before its end; (N,) tensors, their form checked where they are used
    residuals: tuple[torch.Tensor, ...] = ()

    @classmethod
    def from_fields(cls, fields: Mapping[str, Any]) -> RankBundle:
        """The bundle a loaded tagged mapping holds; UnitFormatError for fields of other types
        (the segment records' and execution class's form is checked where they are used)."""
        weights = fields.get("weights")
        if weights is not None and not _tensor_map(weights):
            raise UnitFormatError("a rank bundle's weights are not a map of tensors")
        recorded = fields.get("rounds")
        rounds = None if recorded is None else [_recorded_round(r) for r in _list(recorded)]
        residuals = _list(fields.get("residuals", []))
        if not all(isinstance(r, torch.Tensor) for r in residuals):
            raise UnitFormatError("a rank bundle's residuals are not tensors")
        unit = RankUnit.from_fields(fields)
        return cls(
            unit,
            _bytes(fields.get("payload")),
            weights,
            rounds,
            fields.get("execution"),
            fields.get("segments"),
            tuple(residuals),
        )


def update_sha256(payload: bytes) -> str:
    """The commitment to a rank's unit: the sha256 of its payload bytes, in hex."""
    return hashlib.sha256(payload).hexdigest()


def rank_bundle(
    unit: RankUnit,
    payload: bytes,
    weights: dict[str, torch.Tensor] | None = None,
    rounds: list[RecordedRound] | None = None,
    execution: dict[str, Any] | None = None,
    segments: list[dict[str, Any]] | None = None,
    residuals: Sequence[torch.Tensor] = (),
) -> bytes:
    """What a group job's unit pins: the rank's inputs and the payloads it sent, the unit's
    exchanges, in DiLoCo the round's segment records, in ddp the residuals it committed inside
    the unit, and the class it ran in; the last unit's also holds the trained model, the
    job's result."""
    return dump_tagged(
        RANK_BUNDLES.tag,
        {
            **unit.fields(),
            "payload": _tensor(payload),
            "weights": weights,
            "rounds": None
            if rounds is None
            else [
                {
                    "members": r.members,
                    "payloads": [_tensor(p) for p in r.payloads],
                    "signatures": None
                    if r.signatures is None
                    else [_tensor(s) for s in r.signatures],
                }
                for r in rounds
            ],
            "execution": execution,
            "segments": segments,
            "residuals": list(residuals),
        },
    )


def load_rank_bundle(data: bytes) -> RankBundle:
    """The inputs, payload, (last unit) weights, exchanges and segments of a rank bundle;
    UnitFormatError when it is not one."""
    try:
        fields = load_tagged(data, RANK_BUNDLES.tag)
    except UnitFormatError as exc:
        raise UnitFormatError(f"not a rank bundle: {exc}") from None
    return RankBundle.from_fields(fields)


def _tensor(data: bytes) -> torch.Tensor:
    return torch.frombuffer(bytearray(data), dtype=torch.uint8)


def _bytes(tensor: Any) -> bytes:
    """The bytes a stored (n,) uint8 tensor holds."""
    if not isinstance(tensor, torch.Tensor) or tensor.dtype != torch.uint8 or tensor.dim() != 1:
        raise UnitFormatError("a rank bundle's payload is not a byte string")
    return tensor.numpy().tobytes()


def _recorded_round(fields: Any) -> RecordedRound:
    """An exchange as a bundle records it: distinct members, a payload for each and, where it
    keeps them, a signature for each."""
    if not isinstance(fields, dict):
        raise UnitFormatError("a rank bundle's round is not a map")
    members, payloads = _list(fields.get("members")), _list(fields.get("payloads"))
    if not all(_is_index(m) for m in members) or len(set(members)) != len(members):
        raise UnitFormatError("a rank bundle's round names members that are not distinct ranks")
    if len(payloads) != len(members):
        raise UnitFormatError("a rank bundle's round has not one payload for each member")
    signatures = fields.get("signatures")
    if signatures is not None and len(_list(signatures)) != len(members):
        raise UnitFormatError("a rank bundle's round has not one signature for each member")
    return RecordedRound(
        members,
        [_bytes(p) for p in payloads],
        None if signatures is None else [_bytes(s) for s in signatures],
    )


def _list(value: Any) -> list[Any]:
    if not isinstance(value, list):
        raise UnitFormatError("a rank bundle holds a list where it holds something else")
    return value


def _is_index(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _tensor_map(value: Any) -> bool:
    return isinstance(value, dict) and all(isinstance(t, torch.Tensor) for t in value.values())
