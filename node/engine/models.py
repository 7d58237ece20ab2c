"""Built-in architectures' modules: a small GPT and a next-byte MLP, built from the protocol's
configs."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from marketplace.protocol.hf import hf_model
from marketplace.protocol.spec import VOCAB_SIZE, GPTSpec, HFSpec, MLPSpec, builds


@builds("gpt")
def _gpt(spec: GPTSpec, seq_len: int, vocab_size: int) -> nn.Module:
    return GPT(spec, block_size=seq_len, vocab_size=vocab_size)


@builds("mlp")
def _mlp(spec: MLPSpec, seq_len: int, vocab_size: int) -> nn.Module:
    return MLP(spec, vocab_size)


class CausalSelfAttention(nn.Module):
    def __init__(self, spec: GPTSpec):
        super().__init__()
        self.c_attn = nn.Linear(spec.n_embd, 3 * spec.n_embd, bias=spec.bias)
        self.c_proj = nn.Linear(spec.n_embd, spec.n_embd, bias=spec.bias)
        self.resid_dropout = nn.Dropout(spec.dropout)
        self.n_head = spec.n_head
        self.dropout = spec.dropout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(C, dim=2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        y = F.scaled_dot_product_attention(
            q, k, v, dropout_p=self.dropout if self.training else 0.0, is_causal=True
        )
        y = y.transpose(1, 2).contiguous().view(B, T, C)  # (B, T, C)
        return self.resid_dropout(self.c_proj(y))


class FeedForward(nn.Module):
    def __init__(self, spec: GPTSpec):
        super().__init__()
        self.c_fc = nn.Linear(spec.n_embd, 4 * spec.n_embd, bias=spec.bias)
        self.c_proj = nn.Linear(4 * spec.n_embd, spec.n_embd, bias=spec.bias)
        self.dropout = nn.Dropout(spec.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.c_proj(F.gelu(self.c_fc(x))))


class Block(nn.Module):
    def __init__(self, spec: GPTSpec):
        super().__init__()
        self.ln_1 = nn.LayerNorm(spec.n_embd, bias=spec.bias)
        self.attn = CausalSelfAttention(spec)
        self.ln_2 = nn.LayerNorm(spec.n_embd, bias=spec.bias)
        self.mlp = FeedForward(spec)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class Transformer(nn.Module):
    """GPT's body under the names of nanoGPT's ModuleDict (`transformer.wte`, ...), so that
    checkpoints keep their keys, as attributes so that each part keeps its type."""

    def __init__(self, spec: GPTSpec, block_size: int, vocab_size: int):
        super().__init__()
        self.wte = nn.Embedding(vocab_size, spec.n_embd)  # token embeddings, tied to lm_head
        self.wpe = nn.Embedding(block_size, spec.n_embd)  # position embeddings
        self.drop = nn.Dropout(spec.dropout)
        self.h = nn.ModuleList([Block(spec) for _ in range(spec.n_layer)])
        self.ln_f = nn.LayerNorm(spec.n_embd, bias=spec.bias)


class GPT(nn.Module):
    def __init__(self, spec: GPTSpec, block_size: int, vocab_size: int = VOCAB_SIZE):
        super().__init__()
        self.block_size = block_size
        self.transformer = Transformer(spec, block_size, vocab_size)
        self.lm_head = nn.Linear(spec.n_embd, vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # weight tying, as in GPT-2
        self.apply(_init_weights)
        # GPT-2's scaled init of the projections that write into the residual stream
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * spec.n_layer))

    def forward(
        self, idx: torch.Tensor, targets: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        T = idx.size(1)
        pos = torch.arange(T, dtype=torch.long, device=idx.device)  # (T,)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))
        for block in self.transformer.h:
            x = block(x)
        logits = self.lm_head(self.transformer.ln_f(x))  # (B, T, vocab)
        return logits, _next_token_loss(logits, targets)


class MLP(nn.Module):
    def __init__(self, spec: MLPSpec, vocab_size: int = VOCAB_SIZE):
        super().__init__()
        self.context = spec.context
        self.wte = nn.Embedding(vocab_size, spec.n_embd)
        layers: list[nn.Module] = []
        width = spec.context * spec.n_embd
        for _ in range(spec.n_layer):
            layers += [nn.Linear(width, spec.hidden), nn.GELU(), nn.Dropout(spec.dropout)]
            width = spec.hidden
        self.hidden = nn.Sequential(*layers)
        self.lm_head = nn.Linear(width, vocab_size)
        self.apply(_init_weights)

    def forward(
        self, idx: torch.Tensor, targets: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        T = idx.size(1)
        # left-pad with byte 0 so the first positions also see a full window
        padded = F.pad(idx, (self.context, 0), value=0)  # (B, context + T)
        windows = padded.unfold(1, self.context, 1)[:, 1 : T + 1]  # (B, T, context), ends at idx[t]
        x = self.wte(windows).flatten(2)  # (B, T, context * n_embd)
        logits = self.lm_head(self.hidden(x))  # (B, T, vocab)
        return logits, _next_token_loss(logits, targets)


def _init_weights(module: nn.Module) -> None:
    if isinstance(module, nn.Linear):
        nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if module.bias is not None:
            nn.init.zeros_(module.bias)
    elif isinstance(module, nn.Embedding):
        nn.init.normal_(module.weight, mean=0.0, std=0.02)


def _next_token_loss(logits: torch.Tensor, targets: torch.Tensor | None) -> torch.Tensor | None:
    if targets is None:
        return None
    return F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.view(-1))


@builds("hf")
def _hf(spec: HFSpec, seq_len: int, vocab_size: int) -> nn.Module:
    return HFCausalLM(hf_model(spec, seq_len, vocab_size))


class HFCausalLM(nn.Module):
    """A `transformers` causal LM under the engine's contract: `(idx, targets) -> (logits,
    loss)`, with targets already shifted by one as the sampler yields them (the same loss as the
    engine's own models, not the library's, which shifts labels itself)."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.hf = model  # the name is PREFIX: exported weights drop it

    def forward(
        self, idx: torch.Tensor, targets: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        logits = self.hf(input_ids=idx, use_cache=False).logits
        return logits, _next_token_loss(logits, targets)
