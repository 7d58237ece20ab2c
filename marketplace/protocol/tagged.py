"""A work unit's bytes: one safetensors file holding a mapping tagged with the unit's format.

Every unit is written by a party that may be an attacker, so reading one runs no code: the file
is the safetensors layout (an 8-byte little-endian header length, a JSON header, raw tensor
bytes), whose reader only copies bytes. The mapping's tensors are its safetensors tensors, named
by their path in the mapping ("state/model/lm_head.weight"); everything else (nested dicts with
str or int keys, lists, tuples, None, bools, ints, floats including inf and nan, strings) is one
JSON document in the header's `__metadata__`, under "zoo", in which each tensor is
`{"tensor": name}`, each dict `{"dict": [[key, value], ...]}`, each list `{"list": [...]}` and
each tuple `{"tuple": [...]}`. The header, the number of leaves, the nesting depth and the
tensors' dtypes are bounded before anything else is read, and anything outside them is a
UnitFormatError.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping
from typing import Any

import torch
from safetensors.torch import load as load_safetensors
from safetensors.torch import save as save_safetensors

from marketplace.protocol.units import UnitFormatError

MAX_HEADER_BYTES = 16 << 20  # the safetensors header: tensor table and structure together
MAX_LEAVES = 1 << 18  # tensors and plain values, all together
MAX_DEPTH = 64  # containers inside containers
DTYPES = frozenset(
    {"F64", "F32", "F16", "BF16", "I64", "I32", "I16", "I8", "U8", "BOOL"}
)  # what units hold: weights, moments, RNG states and payload bytes
_KEY = "zoo"  # the structure's key in __metadata__


def dump_tagged(tag: str, fields: Mapping[str, Any]) -> bytes:
    """`fields` under the format tag `tag`, as a safetensors file."""
    tensors: dict[str, torch.Tensor] = {}
    storages: set[tuple[int, int]] = set()

    def encode(node: Any, path: str) -> Any:
        if isinstance(node, torch.Tensor):
            name = path or "/"
            while name in tensors:  # a str and an int key that print alike
                name += "~"
            tensors[name] = _owned(node.detach().to("cpu"), storages)
            return {"tensor": name}
        if isinstance(node, Mapping):
            return {"dict": [[key, encode(value, f"{path}/{key}")] for key, value in node.items()]}
        if isinstance(node, (list, tuple)):
            kind = "list" if isinstance(node, list) else "tuple"
            return {kind: [encode(value, f"{path}/{i}") for i, value in enumerate(node)]}
        if node is None or isinstance(node, (bool, int, float, str)):
            return node
        raise TypeError(f"a unit cannot hold {type(node).__name__} (at {path or '/'})")

    structure = encode({"format": tag, **fields}, "")
    return save_safetensors(tensors, metadata={_KEY: json.dumps(structure)})


def load_tagged(data: bytes, tag: str | None = None) -> dict[str, Any]:
    """The tagged mapping `data` holds, whose format must be `tag` when one is given;
    UnitFormatError for anything else."""
    header = _header(data)
    try:
        tensors = load_safetensors(data)
    # the reader refuses bad offsets, sizes and dtypes with its own error, or a ValueError
    except Exception as exc:  # noqa: BLE001
        raise UnitFormatError(f"not a unit file: {type(exc).__name__}: {exc}") from None
    try:
        structure = json.loads(header[_KEY])
    except (ValueError, RecursionError):
        raise UnitFormatError("not a unit file: its structure is not JSON") from None
    fields = _Decoder(tensors).decode(structure, 0)
    if not isinstance(fields, dict) or not isinstance(fields.get("format"), str):
        raise UnitFormatError("no format tag")
    if tag is not None and fields["format"] != tag:
        raise UnitFormatError(f"format {fields['format']!r}, not {tag}")
    return fields


def _owned(tensor: torch.Tensor, storages: set[tuple[int, int]]) -> torch.Tensor:
    """`tensor`, contiguous and with a storage no other saved tensor shares (safetensors stores
    each tensor once, so a tied weight is written at each of its paths)."""
    tensor = tensor.contiguous()
    storage = (tensor.untyped_storage().data_ptr(), tensor.untyped_storage().nbytes())
    if tensor.numel() and storage in storages:
        return tensor.clone()
    storages.add(storage)
    return tensor


def _header(data: bytes) -> dict[str, str]:
    """The file's `__metadata__`, after checking the header's size, the number of tensors and
    their dtypes."""
    if len(data) < 8:
        raise UnitFormatError("not a unit file: shorter than a safetensors header")
    (size,) = struct.unpack("<Q", data[:8])
    if size > MAX_HEADER_BYTES or 8 + size > len(data):
        raise UnitFormatError(f"not a unit file: a header of {size} bytes")
    try:
        header = json.loads(data[8 : 8 + size])
    except (ValueError, RecursionError):
        raise UnitFormatError("not a unit file: its header is not JSON") from None
    if not isinstance(header, dict):
        raise UnitFormatError("not a unit file: its header is not a JSON object")
    metadata = header.pop("__metadata__", None)
    if not isinstance(metadata, dict) or not isinstance(metadata.get(_KEY), str):
        raise UnitFormatError("no format tag")
    if len(header) > MAX_LEAVES:
        raise UnitFormatError(f"{len(header)} tensors (at most {MAX_LEAVES})")
    for name, entry in header.items():
        dtype = entry.get("dtype") if isinstance(entry, dict) else None
        if dtype not in DTYPES:
            raise UnitFormatError(f"tensor {name!r} has dtype {dtype!r}, none of a unit's")
    return metadata


class _Decoder:
    """Rebuilds the structure of a unit around its tensors, each of which it must use once."""

    def __init__(self, tensors: dict[str, torch.Tensor]):
        self.tensors = tensors
        self.unused = set(tensors)
        self.leaves = 0

    def decode(self, node: Any, depth: int) -> Any:
        value = self._node(node, depth)
        if depth == 0 and self.unused:
            raise UnitFormatError(f"tensor {min(self.unused)!r} is not part of the unit")
        return value

    def _node(self, node: Any, depth: int) -> Any:
        if depth > MAX_DEPTH:
            raise UnitFormatError(f"nested deeper than {MAX_DEPTH}")
        if not isinstance(node, (dict, list)):
            self._leaf()
            return node  # None, a bool, int, float or str: what JSON holds besides containers
        if not isinstance(node, dict) or len(node) != 1:
            raise UnitFormatError("not a unit file: a container is not tagged with its kind")
        ((kind, body),) = node.items()
        if kind == "tensor" and isinstance(body, str):
            self._leaf()
            if body not in self.unused:
                raise UnitFormatError(f"tensor {body[:80]!r} is missing or used twice")
            self.unused.remove(body)
            return self.tensors[body]
        if kind in ("list", "tuple") and isinstance(body, list):
            items = [self._node(value, depth + 1) for value in body]
            return items if kind == "list" else tuple(items)
        if kind == "dict" and isinstance(body, list):
            out: dict[str | int, Any] = {}
            for item in body:
                if (
                    not isinstance(item, list)
                    or len(item) != 2
                    or not isinstance(item[0], (str, int))
                    or isinstance(item[0], bool)
                ):
                    raise UnitFormatError("not a unit file: a dict item is not [key, value]")
                out[item[0]] = self._node(item[1], depth + 1)
            return out
        raise UnitFormatError(f"not a unit file: a container of unknown kind {kind[:40]!r}")

    def _leaf(self) -> None:
        self.leaves += 1
        if self.leaves > MAX_LEAVES:
            raise UnitFormatError(f"more than {MAX_LEAVES} values")
