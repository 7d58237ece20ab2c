"""Compression of what ranks send each other: top-k or random-k sparsification, 8/4/2-bit
quantization."""

from __future__ import annotations

import hashlib
import logging
import math
from dataclasses import dataclass
from typing import Literal

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
    indices: torch.Tensor  # (k,) int32 positions of top-k values; (0,) when dense or random
    scales: torch.Tensor  # (ceil(k / chunk),) float32 per-chunk scales; (0,) when unquantized

    @property
    def nbytes(self) -> int:
        """Bytes on the wire: values, indices and scales, nothing else."""
        return sum(t.numel() * t.element_size() for t in self.tensors())

    def tensors(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return self.values, self.indices, self.scales

    def to_bytes(self) -> bytes:
        """Values, indices and scales back to back: what is sent, pinned and hashed."""
        return b"".join(t.contiguous().view(torch.uint8).numpy().tobytes() for t in self.tensors())

    def sha256(self) -> str:
        """Digest of the payload's bytes: what a rank commits to for its update."""
        return hashlib.sha256(self.to_bytes()).hexdigest()


Selection = Literal["topk", "random"]


@dataclass(frozen=True)
class Compressor:
    """Keeps a `ratio` of a vector's entries and quantizes them to `bits`.

    `topk` keeps the largest magnitudes and must send their positions (4 bytes each, more
    than a 4-bit value's eight times over); `random` keeps positions drawn from `seed` and
    the exchange's round, which every rank of the group draws alike, so no position crosses
    the network and all ranks send the same coordinates (which coordinate-wise robust
    aggregation needs). Quantization is symmetric with one float32 scale per `chunk` kept
    values, so one large entry only coarsens its own chunk. At 8 and 4 bits the scale is
    the chunk's largest magnitude over 127 or 7 levels; at 2 bits it is the chunk's RMS and
    the four levels are +-0.5 and +-1.5 of it (near the best uniform 2-bit quantizer for
    bell-shaped values; a max scale would round most of them to zero), the clipped tails
    being left to error feedback. `ratio=1` and `bits=32` is the identity.
    """

    ratio: float = 1.0  # fraction of entries kept, in (0, 1]
    bits: int = 32  # 32 (no quantization), 8, 4 or 2 bits per kept value
    selection: Selection = "topk"  # which entries are kept when ratio < 1
    chunk: int = 256  # kept values sharing one quantization scale
    seed: int = 0  # shared by the group: draws the random selection of every round

    def __post_init__(self) -> None:
        if not 0.0 < self.ratio <= 1.0:
            raise CompressionError(f"ratio must be in (0, 1]; got {self.ratio}")
        if self.bits not in (32, 8, 4, 2):
            raise CompressionError(f"bits must be 32, 8, 4 or 2; got {self.bits}")
        if self.selection not in ("topk", "random"):
            raise CompressionError(f"selection must be topk or random; got {self.selection!r}")
        if self.chunk < 1:
            raise CompressionError(f"chunk must be >= 1; got {self.chunk}")

    def kept(self, numel: int) -> int:
        """How many entries of a `numel`-long vector are sent."""
        return numel if self.ratio == 1.0 else max(1, math.ceil(self.ratio * numel))

    def payload_bytes(self, numel: int) -> int:
        """Bytes of the payload for a `numel`-long vector, known before compressing it."""
        k = self.kept(numel)
        values = 4 * k if self.bits == 32 else math.ceil(k * self.bits / 8)
        indices = k * _INDEX_DTYPE.itemsize if k < numel and self.selection == "topk" else 0
        scales = 0 if self.bits == 32 else 4 * math.ceil(k / self.chunk)
        return values + indices + scales

    def compress(self, vector: torch.Tensor, round_: int = 0) -> Payload:
        """The payload for a flat float32 vector in exchange `round_` (it draws random masks)."""
        if vector.dim() != 1:
            raise CompressionError(f"compress takes a flat vector; got shape {tuple(vector.shape)}")
        vector = vector.detach().float()
        numel, k = vector.numel(), self.kept(vector.numel())
        sent_indices = torch.empty(0, dtype=_INDEX_DTYPE)
        if k == numel:
            kept = vector
        elif self.selection == "random":
            kept = vector[self._random_positions(numel, round_)]
        else:
            # sorted positions make the payload, and so its hash, independent of topk's order
            positions = torch.topk(vector.abs(), k, sorted=False).indices.sort().values
            kept, sent_indices = vector[positions], positions.to(_INDEX_DTYPE)
        if self.bits == 32:
            return Payload(kept.clone(), sent_indices, torch.empty(0))
        values, scales = self._quantize(kept)
        return Payload(values, sent_indices, scales)

    def parse(self, data: bytes, numel: int) -> Payload:
        """The payload whose `to_bytes()` is `data`; its layout follows from the settings."""
        if len(data) != self.payload_bytes(numel):
            raise CompressionError(
                f"payload has {len(data)} bytes; {self.payload_bytes(numel)} expected "
                f"for {numel} entries"
            )
        k = self.kept(numel)
        values = 4 * k if self.bits == 32 else math.ceil(k * self.bits / 8)
        indices = k * _INDEX_DTYPE.itemsize if k < numel and self.selection == "topk" else 0
        raw = torch.frombuffer(bytearray(data), dtype=torch.uint8)
        value_dtype = torch.float32 if self.bits == 32 else torch.uint8
        payload = Payload(  # each part cloned before viewing: a view needs an aligned start
            raw[:values].clone().view(value_dtype),
            raw[values : values + indices].clone().view(_INDEX_DTYPE),
            raw[values + indices :].clone().view(torch.float32),
        )
        self.validate(payload, numel)
        return payload

    def validate(self, payload: Payload, numel: int) -> None:
        """CompressionError unless `payload` could come from compressing a finite `numel`-long
        vector: its size, its positions distinct and in order inside the vector, its values and
        scales finite. Payloads come from other ranks and from bundles; one that is not would
        crash whoever aggregates it, or poison the group's weights with NaN."""
        if payload.nbytes != self.payload_bytes(numel):
            raise CompressionError(
                f"payload has {payload.nbytes} bytes; {self.payload_bytes(numel)} expected "
                f"for {numel} entries"
            )
        positions = payload.indices
        if positions.numel() and (
            positions[0] < 0 or positions[-1] >= numel or torch.any(positions.diff() <= 0)
        ):
            raise CompressionError("the payload's positions are not distinct positions, in order")
        floats = payload.values if self.bits == 32 else payload.scales
        if not bool(torch.isfinite(floats).all()) or bool((payload.scales < 0).any()):
            raise CompressionError("the payload holds a value or scale that is not finite")

    def decompress(self, payload: Payload, numel: int, round_: int = 0) -> torch.Tensor:
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
        dense[self.positions(payload, numel, round_)] = kept
        return dense

    def positions(self, payload: Payload, numel: int, round_: int = 0) -> torch.Tensor:
        """The positions of a `numel`-long vector a payload of exchange `round_` sends."""
        if self.kept(numel) == numel:
            return torch.arange(numel)
        if self.selection == "random":
            return self._random_positions(numel, round_)
        return payload.indices.long()

    def explains(
        self, payload: Payload, vector: torch.Tensor, slack: float, round_: int = 0
    ) -> str | None:
        """Why `payload` (a parsed one: its positions are checked) is not what this compressor
        makes of any vector within `slack` of the flat `vector` in every entry; None when it is.

        A verifier of another execution class holds its own `vector`, which an honest rank's
        differs from by rounding: so the kept positions may swap where two magnitudes are within
        rounding of each other, a quantized value may round to the next level where it lies
        that close to a level's edge, and a scale may move by what its chunk's entries can. A
        payload that needs more than `slack` anywhere is not a compression of the same work.
        """
        numel = vector.numel()
        vector = vector.detach().float()
        positions = self.positions(payload, numel, round_)
        if self.kept(numel) < numel and self.selection == "topk":
            dropped = torch.ones(numel, dtype=torch.bool)
            dropped[positions] = False
            smallest_kept = vector[positions].abs().min()
            largest_dropped = vector[dropped].abs().max()
            if smallest_kept + slack < largest_dropped - slack:
                return "the kept positions are not the largest entries"
        kept = vector[positions]
        if self.bits == 32:
            gap = float((payload.values - kept).abs().max())
            return None if gap <= slack else f"a kept value is {gap:.3g} off (slack {slack:.3g})"
        return self._explains_codes(payload, kept, slack)

    def _explains_codes(self, payload: Payload, kept: torch.Tensor, slack: float) -> str | None:
        """Whether the quantized `payload` is a quantization of some vector within `slack` of
        `kept` (the kept entries), by its own scales, once those are shown to be near ours."""
        k = kept.numel()
        _, scales = self._quantize(kept)
        # a chunk's largest magnitude, or its RMS, moves by at most what every entry may
        scale_slack = slack if self.bits == 2 else slack / self._level()
        gap = float((payload.scales - scales).abs().max())
        if not gap <= scale_slack:  # NaN fails too
            return f"a chunk's scale is {gap:.3g} off (slack {scale_slack:.3g})"
        codes = self._codes(payload, k).long()
        theirs = payload.scales.repeat_interleave(self.chunk)[:k]  # (k,)
        safe = torch.where(theirs > 0, theirs, torch.ones_like(theirs))
        low, high = (kept - slack) / safe, (kept + slack) / safe
        if self.bits == 2:
            lowest, highest = (low.floor() + 2).clamp(0, 3), (high.floor() + 2).clamp(0, 3)
        else:
            level = self._level()
            lowest = low.round().clamp(-level, level) + level
            highest = high.round().clamp(-level, level) + level
        if torch.any((codes < lowest) | (codes > highest)):
            return "a quantized value is not a rounding of its entry"
        return None

    def _random_positions(self, numel: int, round_: int) -> torch.Tensor:
        """The sorted positions kept in `round_`: the same on every rank, new every round."""
        key = hashlib.sha256(f"{self.seed}:{round_}".encode()).digest()
        generator = torch.Generator().manual_seed(int.from_bytes(key[:8], "little") >> 1)
        return torch.randperm(numel, generator=generator)[: self.kept(numel)].sort().values

    def _quantize(self, kept: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        k = kept.numel()
        chunks = torch.zeros(math.ceil(k / self.chunk) * self.chunk)
        chunks[:k] = kept
        chunks = chunks.view(-1, self.chunk)  # (n_chunks, chunk)
        if self.bits == 2:
            counts = torch.full((chunks.shape[0],), float(self.chunk))  # (n_chunks,)
            counts[-1] = k - (chunks.shape[0] - 1) * self.chunk  # the last chunk is padded
            scales = (chunks.square().sum(dim=1) / counts).sqrt()  # (n_chunks,) RMS
        else:
            scales = chunks.abs().amax(dim=1) / self._level()  # (n_chunks,)
        safe = torch.where(scales > 0, scales, torch.ones_like(scales))
        scaled = chunks / safe.unsqueeze(1)
        if self.bits == 2:  # the interval [-1, 0), [0, 1) or beyond that x / RMS falls in
            codes = (scaled.floor() + 2).clamp(0, 3).flatten()[:k]
        else:
            level = self._level()
            codes = scaled.round().clamp(-level, level).flatten()[:k] + level
        codes = codes.to(torch.uint8)  # (k,) in [0, 2 ** bits)
        per_byte = 8 // self.bits
        padded = torch.cat([codes, codes.new_zeros(-k % per_byte)])
        slots = padded.view(-1, per_byte)  # (ceil(k / per_byte), per_byte), low bits first
        packed = torch.zeros(slots.shape[0], dtype=torch.uint8)
        for slot in range(per_byte):
            packed |= slots[:, slot] << (slot * self.bits)
        return packed, scales

    def _codes(self, payload: Payload, k: int) -> torch.Tensor:
        """The (k,) quantization codes packed in a payload's values, low bits first."""
        per_byte, mask = 8 // self.bits, (1 << self.bits) - 1
        slots = [(payload.values >> (slot * self.bits)) & mask for slot in range(per_byte)]
        return torch.stack(slots, dim=1).flatten()[:k]

    def _dequantize(self, payload: Payload, k: int) -> torch.Tensor:
        codes = self._codes(payload, k)  # (k,)
        signed = codes.float() - (1.5 if self.bits == 2 else self._level())
        per_value = payload.scales.repeat_interleave(self.chunk)[:k]  # (k,)
        return signed * per_value

    def _level(self) -> int:
        """Largest code magnitude at 8 or 4 bits: 127 or 7 (symmetric around zero)."""
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

    def compress(self, update: torch.Tensor, round_: int = 0) -> tuple[Payload, torch.Tensor]:
        """The payload for `update` plus the residual, and the dense vector it decodes to."""
        corrected = update.detach().float() + (0 if self.residual is None else self.residual)
        payload = self.compressor.compress(corrected, round_)
        sent = self.compressor.decompress(payload, corrected.numel(), round_)
        self.residual = corrected - sent
        return payload, sent
