"""What one unit of a job spec costs: its peak memory and its work, counted without running it.

The model is built under PyTorch's fake tensor mode (shapes and devices, no memory) and one
micro-batch goes forward and backward on it, under a dispatch mode that counts each operator and
its FLOPs (`torch.utils.flop_counter`'s formulas) and a saved-tensors hook that adds up what
autograd keeps for the backward pass: the activations, whatever the architecture. Fake tensors
on the CPU take the kernels a CPU runs (a fused attention that keeps no T x T weights), and
libraries that branch on their data (`transformers`' masks) take their tracing path. A unit is
then that micro-batch `grad_accum_steps x checkpoint.every` times over, plus the optimizer, the
held-out batches and the copies, hashes and sketches of the training state the trace needs
(marketplace/protocol/trace.py). A machine's measured speed (`node.engine.speed`) turns the work
into seconds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import flop_registry

from marketplace.protocol import trace
from marketplace.protocol.spec import JobSpec, TrainingSpec

from . import models  # noqa: F401  (the built-in architectures' modules, which `build_model` makes)

# fp32 bytes per parameter of a model in training: weights, gradients and AdamW's two moments
TRAINING_BYTES_PER_PARAMETER = 16
# states held beside the trainer's own at a unit's worst moment: the checkpoint the unit started
# from (its rollback point), a segment's state copy and that copy serialized for the provider's
# IPFS node; each weighs the weights and the optimizer's moments
STATE_COPIES = 3


@dataclass(frozen=True)
class UnitCost:
    """One unit of a spec: the memory of all its devices together, the work of each."""

    parameters: int  # of the model (shared tensors once)
    memory_bytes: int  # peak
    flops: int  # matrix-multiply FLOPs, forward, backward and held-out batches
    ops: int  # tensor operators dispatched: each costs a launch whatever its size
    state_bytes: int  # training state copied, hashed and serialized at the trace's segments


@dataclass(frozen=True)
class _Pass:
    """One micro-batch forward and backward on fake tensors."""

    forward_flops: int
    forward_ops: int
    flops: int  # forward and backward
    ops: int
    saved_bytes: int  # activations autograd keeps between the two
    largest_bytes: int  # the largest tensor made: a transient beside the saved ones


def unit_cost(spec: JobSpec, devices: int | None = None) -> UnitCost:
    """The cost of a full unit (`checkpoint.every` steps) of `spec` on `devices` devices (default:
    its resources.devices), each taking its share of every step's micro-batches."""
    devices = spec.devices if devices is None else devices
    parameters, state_elements, tensors = model_sizes(spec)
    micro = _micro_batch(spec)
    training = spec.training
    steps = spec.checkpoint.every
    micro_batches = steps * max(1, training.grad_accum_steps // devices)
    state = 4 * state_elements + 8 * parameters  # weights (a tied one per name) and moments
    per_device = (
        TRAINING_BYTES_PER_PARAMETER * parameters
        + STATE_COPIES * state
        + micro.saved_bytes
        + 2 * micro.largest_bytes
    )
    segments = math.ceil(steps / trace.segment_steps(spec)) + 1  # and the unit's final state
    return UnitCost(
        parameters=parameters,
        memory_bytes=devices * per_device,
        flops=micro_batches * micro.flops + training.eval_batches * micro.forward_flops,
        ops=micro_batches * micro.ops
        + steps * _optimizer_ops_per_tensor() * tensors
        + training.eval_batches * micro.forward_ops,
        state_bytes=segments * state,
    )


def model_sizes(spec: JobSpec) -> tuple[int, int, int]:
    """Parameters (shared ones once), elements of the state's tensors (a tied weight once for each
    of its names) and parameter tensors of the model `spec` builds, counted on the meta device."""
    key = (spec.model.model_dump_json(), spec.data.seq_len, spec.vocab_size)
    if key not in _SIZES:
        with torch.device("meta"):
            model = spec.build_model()
        params = list(model.parameters())
        state = sum(t.numel() for t in model.state_dict().values())
        _remember(_SIZES, key, (sum(p.numel() for p in params), state, len(params)))
    return _SIZES[key]


def _micro_batch(spec: JobSpec) -> _Pass:
    """Trace one micro-batch of `spec` on fake tensors, remembered per shape: a bidder asks for
    every job it sees, and a verifier for every unit."""
    batch, seq_len = spec.training.batch_size, spec.data.seq_len
    key = (spec.model.model_dump_json(), seq_len, spec.vocab_size, batch)
    if key not in _PASSES:
        _remember(_PASSES, key, _trace(spec, batch, seq_len))
    return _PASSES[key]


def _trace(spec: JobSpec, batch: int, seq_len: int) -> _Pass:
    with FakeTensorMode():
        model = spec.build_model()
        idx = torch.zeros(batch, seq_len, dtype=torch.long)
        return _traced(model, idx)


def _traced(model: torch.nn.Module, idx: torch.Tensor) -> _Pass:
    # by storage, so views of one tensor count once and the weights (counted apart) not at all
    weights = {p.untyped_storage()._cdata for p in model.parameters()}
    saved: dict[int, int] = {}

    def keep(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        if storage._cdata not in weights:
            saved[storage._cdata] = storage.nbytes()
        return tensor

    with OpCounter() as counter:
        with torch.autograd.graph.saved_tensors_hooks(keep, lambda tensor: tensor):
            _, loss = model(idx, idx)
        forward_flops, forward_ops = counter.flops, counter.ops
        assert loss is not None  # given targets, every model returns its loss
        loss.backward()
    return _Pass(
        forward_flops=forward_flops,
        forward_ops=forward_ops,
        flops=counter.flops,
        ops=counter.ops,
        saved_bytes=sum(saved.values()),
        largest_bytes=counter.largest_bytes,
    )


class OpCounter(TorchDispatchMode):
    """Counts the tensor operators dispatched under it (in this thread), the FLOPs of those
    `torch.utils.flop_counter` knows (matrix multiplies, attention, convolutions) and the bytes of
    the largest tensor any of them made. Not FlopCounterMode itself: its module hooks are global,
    and would reach a unit training in another thread."""

    def __init__(self) -> None:
        super().__init__()
        self.ops = 0
        self.flops = 0
        self.largest_bytes = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        self.ops += 1
        count = flop_registry.get(func.overloadpacket)
        if count is not None:
            self.flops += count(*args, **kwargs, out_val=out)
        for tensor in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(tensor, torch.Tensor):
                size = tensor.numel() * tensor.element_size()
                self.largest_bytes = max(self.largest_bytes, size)
        return out


@cache
def _optimizer_ops_per_tensor() -> int:
    """Operators one optimizer step dispatches per parameter tensor (clipping, AdamW, zeroing the
    gradients), counted on a two-tensor model: the count depends on the tensors, not their
    sizes."""
    from .train import build_optimizer  # here: the trainer's modules import the limits

    model = fixed_weights(torch.nn.Linear(2, 2, device="meta"), torch.device("cpu"))
    optimizer = build_optimizer(model, TrainingSpec(lr=1e-3, batch_size=1, max_steps=1))
    model(torch.ones(1, 2)).sum().backward()
    with OpCounter() as counter:
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return math.ceil(counter.ops / 2)


def fixed_weights(model: torch.nn.Module, device: torch.device) -> torch.nn.Module:
    """A model built on the meta device, put on `device` with every weight the same small
    number: a machine's measurements draw nothing from the random generators, which a unit
    training in another thread draws from."""
    model = model.to_empty(device=device)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.fill_(0.01)
    return model


def _remember(memory: dict, key: Any, value: Any) -> None:
    if len(memory) >= _REMEMBERED:  # the oldest goes: strangers write specs
        del memory[next(iter(memory))]
    memory[key] = value


_REMEMBERED = 256
_SIZES: dict[tuple[str, int, int], tuple[int, int, int]] = {}
_PASSES: dict[tuple[str, int, int, int], _Pass] = {}
