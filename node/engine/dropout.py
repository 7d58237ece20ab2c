"""Dropout whose masks are the same bits on every device: hashed from where they fall.

torch draws a dropout mask from the device's generator, and each kind of device (on CUDA each
GPU model) draws other numbers from the same seed: a unit with dropout could be re-run only on
its provider's kind of device, and split across devices only with other bits. While a micro-batch
trains under `CountedDropout`, each mask entry is instead a hash of the job's seed, the batch
(stream, cursor, micro-batch), the dropout's place among that batch's dropouts and the entry's
position: integer arithmetic, exact on any device, and drawn from no generator.

It covers `F.dropout` (which `nn.Dropout` and the `transformers` models call) and the attention
dropout of `F.scaled_dot_product_attention`, which then runs as the plain softmax attention it
computes, so that its mask can be applied.
"""

from __future__ import annotations

import hashlib
import math
from typing import Any

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

_MASK32 = 0xFFFFFFFF
_MIX = 0x7FEB352D  # a 32-bit mixing multiplier under 2**31: its products stay inside int64
_MAX_ENTRIES = 1 << 32  # positions are hashed as 32-bit words


def keep_mask(shape: torch.Size, p: float, key: bytes, device: torch.device) -> torch.Tensor:
    """Which entries of a tensor of `shape` a dropout of rate `p` keyed by `key` keeps (bool).

    Each position (row-major) goes through two rounds of a keyed 32-bit mix; an entry is kept
    when its hash is at least p * 2**32."""
    numel = math.prod(shape)
    if numel >= _MAX_ENTRIES:
        raise ValueError(f"dropout over {numel} entries: at most {_MAX_ENTRIES - 1} are hashed")
    first, second = int.from_bytes(key[:4], "little"), int.from_bytes(key[4:8], "little")
    bits = torch.arange(numel, dtype=torch.int64, device=device)
    bits ^= first
    _mix(bits)
    bits ^= second
    return (_mix(bits) >= round(p * _MASK32)).view(shape)


def _mix(x: torch.Tensor) -> torch.Tensor:
    """A 32-bit integer hash of each entry of `x` (int64 in [0, 2**32)), in place: masks are
    as large as the activations, and a fresh tensor per operation would double the traffic."""
    for _ in range(2):
        x ^= x >> 16
        x *= _MIX
        x &= _MASK32
    x ^= x >> 16
    return x


class CountedDropout(TorchFunctionMode):
    """Active while one micro-batch's forward runs: its dropouts draw hashed masks, counted in
    the order the model calls them (the same on every device: the forward is the same code)."""

    def __init__(self, seed: int, stream: int, cursor: int, micro: int):
        super().__init__()
        self.batch = f"{seed}/{stream}/{cursor}/{micro}"
        self.calls = 0

    def _key(self) -> bytes:
        key = hashlib.sha256(f"zoo-dropout/1/{self.batch}/{self.calls}".encode()).digest()
        self.calls += 1
        return key

    def _dropout(self, x: torch.Tensor, p: float, inplace: bool = False) -> torch.Tensor:
        keep = keep_mask(x.shape, p, self._key(), x.device)
        scale = 1.0 / (1.0 - p)
        if inplace:
            return x.mul_(keep).mul_(scale)
        return x * keep * scale

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if func is F.dropout:
            return self._on_dropout(*args, **kwargs)
        if func is F.scaled_dot_product_attention:
            return self._on_attention(*args, **kwargs)
        return func(*args, **kwargs)

    def _on_dropout(  # F.dropout's parameters, by its names
        self, input: torch.Tensor, p: float = 0.5, training: bool = True, inplace: bool = False
    ) -> torch.Tensor:
        if not training or p == 0:
            return input
        if p == 1:
            return input.mul_(0) if inplace else torch.zeros_like(input)
        return self._dropout(input, p, inplace)

    def _on_attention(  # F.scaled_dot_product_attention's parameters, by its names
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        attn_mask: torch.Tensor | None = None,
        dropout_p: float = 0.0,
        is_causal: bool = False,
        scale: float | None = None,
        enable_gqa: bool = False,
    ) -> torch.Tensor:
        q, k, v = query, key, value
        if dropout_p == 0:
            return F.scaled_dot_product_attention(
                q, k, v, attn_mask, 0.0, is_causal, scale=scale, enable_gqa=enable_gqa
            )
        if enable_gqa:  # each group of query heads shares one key and value head
            k = k.repeat_interleave(q.size(-3) // k.size(-3), -3)
            v = v.repeat_interleave(q.size(-3) // v.size(-3), -3)
        scores = q @ k.transpose(-2, -1) * (1.0 / math.sqrt(q.size(-1)) if scale is None else scale)
        if is_causal:
            length, keys = q.size(-2), k.size(-2)
            causal = torch.ones(length, keys, dtype=torch.bool, device=q.device).tril()
            scores = scores.masked_fill(~causal, float("-inf"))
        if attn_mask is not None:
            if attn_mask.dtype == torch.bool:
                scores = scores.masked_fill(~attn_mask, float("-inf"))
            else:
                scores = scores + attn_mask
        return self._dropout(scores.softmax(-1), dropout_p) @ v
