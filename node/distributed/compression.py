"""Compression of what ranks send each other: top-k sparsification and 8/4-bit quantization."""

from __future__ import annotations

import hashlib
import logging
import math
from dataclasses import dataclass

import torch

from marketplace.errors import ZooError

logger = logging.getLogger(__name__)

_INDEX_DTYPE = torch.int32  # flat positions; 2**31 parameters is far beyond a job here


class CompressionError(ZooError, ValueError):
    """A compression setting that cannot work, or a payload that does not fit its compressor."""


@dataclass(frozen=True)
class Payload:
    """Exactly the tensors that cross the network for one compressed vector.

    Every rank compresses a vector of the same length with the same settings, so every
    payload has the same shapes and can be all-gathered without a size exchange first.
    """

    values: torch.Tensor  # (k,) float32, or (ceil(k * bits / 8),) uint8 when quantized
    indices: torch.Tensor  # (k,) int32 positions of the kept values; (0,) when dense
    scales: torch.Tensor  # (ceil(k / chunk),) float32 per-chunk scales; (0,) when unquantized

    @property
    def nbytes(self) -> int:
        """Bytes on the wire: values, indices and scales, nothing else."""
        return sum(t.numel() * t.element_size() for t in self.tensors())

    def tensors(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return self.values, self.indices, self.scales

    def sha256(self) -> str:
        """Digest of the payload's bytes: what a rank commits to for its update."""
        digest = hashlib.sha256()
        for tensor in self.tensors():
            digest.update(tensor.contiguous().view(torch.uint8).numpy().tobytes())
        return digest.hexdigest()


@dataclass(frozen=True)
class Compressor:
    """Keeps the largest `topk_ratio` of a vector's entries and quantizes them to `bits`.

    Quantization is symmetric with one float32 scale (the chunk's largest magnitude) per
    `chunk` kept values, so one large entry only coarsens its own chunk. `topk_ratio=1` and
    `bits=32` is the identity: a plain float32 vector and no indices.
    """

    topk_ratio: float = 1.0  # fraction of entries kept, in (0, 1]
    bits: int = 32  # 32 (no quantization), 8 or 4 bits per kept value
    chunk: int = 256  # kept values sharing one quantization scale

    def __post_init__(self) -> None:
        if not 0.0 < self.topk_ratio <= 1.0:
            raise CompressionError(f"topk_ratio must be in (0, 1]; got {self.topk_ratio}")
        if self.bits not in (32, 8, 4):
            raise CompressionError(f"bits must be 32, 8 or 4; got {self.bits}")
        if self.chunk < 1:
            raise CompressionError(f"chunk must be >= 1; got {self.chunk}")

    def kept(self, numel: int) -> int:
        """How many entries of a `numel`-long vector are sent."""
        return numel if self.topk_ratio == 1.0 else max(1, math.ceil(self.topk_ratio * numel))

    def payload_bytes(self, numel: int) -> int:
        """Bytes of the payload for a `numel`-long vector, known before compressing it."""
        k = self.kept(numel)
        values = 4 * k if self.bits == 32 else math.ceil(k * self.bits / 8)
        indices = 0 if k == numel else k * _INDEX_DTYPE.itemsize
        scales = 0 if self.bits == 32 else 4 * math.ceil(k / self.chunk)
        return values + indices + scales

    def compress(self, vector: torch.Tensor) -> Payload:
        """The payload for a flat float32 vector."""
        if vector.dim() != 1:
            raise CompressionError(f"compress takes a flat vector; got shape {tuple(vector.shape)}")
        vector = vector.detach().float()
        k = self.kept(vector.numel())
        if k == vector.numel():
            kept, indices = vector, torch.empty(0, dtype=_INDEX_DTYPE)
        else:
            # sorted positions make the payload, and so its hash, independent of topk's order
            indices = torch.topk(vector.abs(), k, sorted=False).indices.sort().values
            kept, indices = vector[indices], indices.to(_INDEX_DTYPE)
        if self.bits == 32:
            return Payload(kept.clone(), indices, torch.empty(0))
        values, scales = self._quantize(kept)
        return Payload(values, indices, scales)

    def decompress(self, payload: Payload, numel: int) -> torch.Tensor:
        """The dense float32 vector a payload stands for (zeros where nothing was sent)."""
        k = self.kept(numel)
        if payload.nbytes != self.payload_bytes(numel):
            raise CompressionError(
                f"payload has {payload.nbytes} bytes; {self.payload_bytes(numel)} expected "
                f"for {numel} entries"
            )
        kept = payload.values if self.bits == 32 else self._dequantize(payload, k)
        if k == numel:
            return kept.clone()
        dense = torch.zeros(numel)
        dense[payload.indices.long()] = kept
        return dense

    def _quantize(self, kept: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        k, level = kept.numel(), self._level()
        chunks = torch.zeros(math.ceil(k / self.chunk) * self.chunk)
        chunks[:k] = kept
        chunks = chunks.view(-1, self.chunk)  # (n_chunks, chunk)
        scales = chunks.abs().amax(dim=1) / level  # (n_chunks,)
        safe = torch.where(scales > 0, scales, torch.ones_like(scales))
        codes = (chunks / safe.unsqueeze(1)).round().clamp(-level, level).flatten()[:k]
        codes = (codes + level).to(torch.uint8)  # (k,) in [0, 2 * level]
        if self.bits == 4:
            if k % 2:
                codes = torch.cat([codes, codes.new_zeros(1)])
            pairs = codes.view(-1, 2)  # (ceil(k / 2), 2): low nibble, high nibble
            codes = pairs[:, 0] | (pairs[:, 1] << 4)
        return codes, scales

    def _dequantize(self, payload: Payload, k: int) -> torch.Tensor:
        codes = payload.values
        if self.bits == 4:
            codes = torch.stack([codes & 0x0F, codes >> 4], dim=1).flatten()[:k]  # (k,)
        signed = codes.float() - self._level()
        per_value = payload.scales.repeat_interleave(self.chunk)[:k]  # (k,)
        return signed * per_value

    def _level(self) -> int:
        """Largest code magnitude: 127 for 8 bits, 7 for 4 bits (symmetric around zero)."""
        return 2 ** (self.bits - 1) - 1


class ErrorFeedback:
    """One rank's residual: what compression dropped is added to that rank's next update.

    Without it top-k would never send the many small entries and quantization would keep
    the same rounding bias; with it, everything is sent eventually, so the sum of what a
    rank sent tracks the sum of its true updates to within one residual.
    """

    def __init__(self, compressor: Compressor):
        self.compressor = compressor
        self.residual: torch.Tensor | None = None  # (numel,) dropped so far, not yet sent

    def compress(self, update: torch.Tensor) -> tuple[Payload, torch.Tensor]:
        """The payload for `update` plus the residual, and the dense vector it decodes to."""
        corrected = update.detach().float() + (0 if self.residual is None else self.residual)
        payload = self.compressor.compress(corrected)
        sent = self.compressor.decompress(payload, corrected.numel())
        self.residual = corrected - sent
        return payload, sent
