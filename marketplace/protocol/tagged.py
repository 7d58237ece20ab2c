"""A work unit's bytes: one torch file holding a mapping tagged with the unit's format.

Reading one runs no code (tensors and plain values only), since every unit is written by a
party that may be an attacker.
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from typing import Any

import torch

from marketplace.protocol.units import UnitFormatError


def dump_tagged(tag: str, fields: Mapping[str, Any]) -> bytes:
    """`fields` under the format tag `tag`, as a torch file."""
    buffer = io.BytesIO()
    torch.save({"format": tag, **fields}, buffer)
    return buffer.getvalue()


def load_tagged(data: bytes, tag: str | None = None) -> dict[str, Any]:
    """The tagged mapping `data` holds, whose format must be `tag` when one is given;
    UnitFormatError for anything else."""
    try:
        fields = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    # torch's weights-only unpickler fails on crafted bytes with whatever its stack manipulation
    # raises (IndexError, KeyError, TypeError, ...), not one type
    except Exception as exc:  # noqa: BLE001
        raise UnitFormatError(f"not a torch file: {type(exc).__name__}: {exc}") from None
    if not isinstance(fields, dict) or not isinstance(fields.get("format"), str):
        raise UnitFormatError("no format tag")
    if tag is not None and fields["format"] != tag:
        raise UnitFormatError(f"format {fields['format']!r}, not {tag}")
    return fields
