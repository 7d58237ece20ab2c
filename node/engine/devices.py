"""Which devices a unit's workers or a group's ranks train on, and the backend that joins them:
NCCL when every rank has a CUDA device, gloo otherwise (one choice for in-node data parallelism
and for group jobs)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Literal

import torch
import torch.distributed as dist

from .gloo_listener import gloo_listeners_closed
from .limits import SpecOverLimits

LOOPBACK = "127.0.0.1"  # a node's own workers talk over loopback only
_KIND_KEY = "zoo-device/{rank}"  # where a rank posts the kind of device it would train on


@dataclass(frozen=True)
class Placement:
    backend: Literal["nccl", "gloo"]  # the collectives' backend, the same on every rank
    device: torch.device  # where this rank trains, and where its collectives' tensors live


def unit_devices(device: str | torch.device | None, count: int) -> list[torch.device]:
    """The devices of a unit's `count` workers: consecutive CUDA devices from `device`'s index
    when it is CUDA (the default when present), else the CPU for every worker.

    SpecOverLimits when the machine has fewer CUDA devices than the unit asks for: a provider
    sells the devices it has, and a unit squeezed onto fewer would not be what was bought.
    """
    chosen = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if chosen.type != "cuda" or count == 1:
        return [chosen] * count
    first = chosen.index or 0
    available = torch.cuda.device_count()
    if first + count > available:
        raise SpecOverLimits(
            f"the job asks for {count} CUDA devices from cuda:{first}; this machine has {available}"
        )
    return [torch.device("cuda", first + i) for i in range(count)]


def place(store: dist.Store, rank: int, world: int, device: torch.device) -> Placement:
    """Agree with the other ranks on the backend: each posts the kind of `device`, where it would
    train; with NCCL when every rank has a CUDA device, it trains there, and with gloo (whose
    collectives work on CPU tensors) on the CPU, so that a group mixing kinds trains alike.

    Blocks until every rank of the group has posted (the store's timeout bounds the wait).
    """
    store.set(_KIND_KEY.format(rank=rank), device.type)
    kinds = [store.get(_KIND_KEY.format(rank=r)).decode() for r in range(world)]
    if all(kind == "cuda" for kind in kinds):
        return Placement("nccl", device)
    return Placement("gloo", torch.device("cpu"))


def group_device() -> torch.device:
    """Where this process's ranks train: its CUDA device when its process group runs on NCCL,
    else the CPU (gloo groups, the board's rounds, a verifier's replay)."""
    if dist.is_initialized() and dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def open_group(
    store: dist.Store, rank: int, world: int, placement: Placement, timeout: timedelta
) -> dist.ProcessGroupGloo | dist.ProcessGroupNCCL:
    """A process group of a node's own workers on `placement`'s backend, outside torch's
    default group (so that a caller may be in a group of its own): gloo over loopback, or NCCL."""
    if placement.backend == "nccl":
        torch.cuda.set_device(placement.device)
        options = dist.ProcessGroupNCCL.Options()
        options._timeout = timeout
        return dist.ProcessGroupNCCL(store, rank, world, options)
    options = dist.ProcessGroupGloo._Options()  # type: ignore[attr-defined]
    options._devices = [dist.ProcessGroupGloo.create_device(hostname=LOOPBACK)]
    options._timeout = timeout
    with gloo_listeners_closed():
        return dist.ProcessGroupGloo(store, rank, world, options)
