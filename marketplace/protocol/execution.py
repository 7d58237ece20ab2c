"""Execution classes: what decides a unit's bits beyond its inputs, and the stable id naming it.

Two runs of a unit from the same inputs give the same bytes only when everything below is
equal: the device and its model, the compute capability, the torch/CUDA/cuDNN builds, the
determinism switches, the CPU thread count, the float32 matmul precision, the oneDNN switch and
the dtype the spec trains in. A unit's checkpoint records its class; a verifier whose own class
has the same id checks the unit's state hash exactly, and any other verifier judges it within a
calibrated bound (verifier/trajectory.py). The record is the provider's word, so it only picks the
path: both paths are sound whatever it says.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, fields
from typing import Any

from marketplace.errors import ZooError

CLASS_ID_HEX = 16  # hex digits of a class id: 64 bits, no accidental collisions among classes
_MATMUL = ("highest", "high", "medium")


class ExecutionClassError(ZooError, ValueError):
    """A recorded execution class that is not one: missing or mistyped fields."""


@dataclass(frozen=True)
class ExecutionClass:
    """The settings a unit's bits depend on besides its inputs (see the module docstring)."""

    device: str  # "cpu" or "cuda"
    device_model: str  # CPU model name, or the GPU's name
    capability: str | None  # CUDA compute capability "major.minor"; None on the CPU
    torch: str  # torch version
    cuda: str | None  # CUDA runtime torch was built with; None without CUDA
    cudnn: int | None  # cuDNN version; None without it
    deterministic: bool  # torch.use_deterministic_algorithms, cuDNN deterministic, no benchmark
    num_threads: int  # intra-op CPU threads
    matmul_precision: str  # torch.get_float32_matmul_precision(): highest, high or medium
    mkldnn: bool  # torch.backends.mkldnn.enabled (oneDNN kernels on the CPU)
    dtype: str  # the spec's precision: fp32, or bf16 under autocast

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def class_id(self) -> str:
        """sha256 over the canonical JSON of the fields, truncated: equal ids, equal classes."""
        canonical = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(b"zoo-exec/1\n" + canonical.encode()).hexdigest()[:CLASS_ID_HEX]

    @classmethod
    def from_dict(cls, data: Any) -> ExecutionClass:
        """The class a checkpoint's metadata records; ExecutionClassError if it is malformed."""
        if not isinstance(data, dict):
            raise ExecutionClassError("an execution class is a mapping")
        types: dict[str, type | tuple[type, ...]] = {
            "device": str,
            "device_model": str,
            "capability": (str, type(None)),
            "torch": str,
            "cuda": (str, type(None)),
            "cudnn": (int, type(None)),
            "deterministic": bool,
            "num_threads": int,
            "matmul_precision": str,
            "mkldnn": bool,
            "dtype": str,
        }
        values: dict[str, Any] = {}
        for f in fields(cls):
            value = data.get(f.name)
            if not isinstance(value, types[f.name]) or (
                isinstance(value, bool) and types[f.name] is int
            ):
                raise ExecutionClassError(f"execution class field {f.name!r} is missing or bad")
            values[f.name] = value
        if values["matmul_precision"] not in _MATMUL:
            raise ExecutionClassError(f"matmul_precision must be one of {list(_MATMUL)}")
        return cls(**values)


def is_class_id(text: str) -> bool:
    """Whether `text` has the form of a class id (what a verifier may declare)."""
    return len(text) == CLASS_ID_HEX and all(c in "0123456789abcdef" for c in text)
