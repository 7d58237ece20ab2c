"""How fast this machine trains, measured on the device a unit trains on at the thread count it
asks for: a unit's work is FLOPs, tensor operators and training state (`node.engine.cost`), and
each has its price here, timed on training steps of two small GPTs (one too small for its FLOPs
to matter, one mostly matrix multiplies) and on a state's copy, hash and serialization. With a
unit's cost it gives the unit's seconds, which a provider's bidder checks against its limits and
the job's checkpoint interval before bidding."""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import math
import multiprocessing
import os
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from pydantic import BaseModel, ConfigDict, PositiveFloat, ValidationError

from marketplace.protocol import trace
from marketplace.protocol.checkpoint import Checkpoint, state_hash
from marketplace.protocol.spec import JobSpec, parse_spec

from .cost import UnitCost, fixed_weights, unit_cost
from .environment import code_version, hardware

log = logging.getLogger(__name__)

_REPEATS = 3  # each figure is the best of this many timings: a busy moment is not the machine
_STEPS = 3  # training steps timed each time


def _reference(width: int, seq_len: int, batch: int) -> JobSpec:
    """A one-layer GPT trained one step a unit, with nothing else in its unit."""
    return parse_spec(
        {
            "model": {"architecture": "gpt", "n_layer": 1, "n_embd": width, "n_head": 2},
            "data": {"seq_len": seq_len, "sources": [{"kind": "stdlib"}]},
            "training": {"lr": 1e-3, "batch_size": batch, "max_steps": 1, "eval_batches": 0},
            "checkpoint": {"every": 1},
        }
    )


@dataclass(frozen=True)
class Speed:
    flops_per_s: float  # matrix-multiply FLOPs a second
    seconds_per_op: float  # one small operator, forward, backward or optimizer
    bytes_per_s: float  # training state copied, hashed and serialized a second

    def seconds(self, cost: UnitCost) -> float:
        """The time a unit of `cost` takes here."""
        return (
            cost.flops / self.flops_per_s
            + cost.ops * self.seconds_per_op
            + cost.state_bytes / self.bytes_per_s
        )


def default_device() -> torch.device:
    """Where a unit trains unless told otherwise (as run_unit chooses)."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


@dataclass(frozen=True)
class MachineSpeed:
    """This machine's speed on one device at a few thread counts: 1, the powers of two and the
    most a unit may ask for."""

    by_threads: dict[int, Speed]

    def at(self, threads: int) -> Speed:
        """The speed at `threads` threads: the best measured at that many or fewer (more threads
        make no step slower on a machine of its own, whatever a busy moment timed)."""
        fewer = [speed for n, speed in self.by_threads.items() if n <= max(threads, 1)]
        return Speed(
            flops_per_s=max(speed.flops_per_s for speed in fewer),
            seconds_per_op=min(speed.seconds_per_op for speed in fewer),
            bytes_per_s=max(speed.bytes_per_s for speed in fewer),
        )


@functools.cache
def machine_speed(device: str, max_threads: int, remembered: Path | None = None) -> MachineSpeed:
    """This machine's speed on `device` up to `max_threads` threads, measured once and remembered
    for the process, and in the folder `remembered` when given: a provider knows it as it starts,
    since a bid window may be over in seconds. The measuring runs in a process of its own (a few
    seconds, most of them loading torch): the thread count it sets is a whole process's, and a
    unit may be training in this one, whose bits depend on its thread count."""
    counts = sorted({max_threads} | {1 << i for i in range(max_threads.bit_length())})
    key = _machine_key(device, counts)
    path = None if remembered is None else remembered / f"speed-{_digest(key)}.json"
    if path is not None and (known := _read_speed(path, key)) is not None:
        log.info("this machine's speed as measured before, from %s (--measure-speed: again)", path)
        return known
    speed = _measure_apart(device, counts)
    if path is not None:
        try:
            _write_speed(path, key, speed)
        except OSError as exc:
            log.warning("this machine's speed is not remembered for the next start: %s", exc)
    return speed


def _measure_apart(device: str, counts: list[int]) -> MachineSpeed:
    """The speed at each thread count in `counts`, measured in a process of its own."""
    spawn = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(1, mp_context=spawn) as measuring:
        measured = measuring.submit(_measure_each, torch.device(device), counts).result()
    return MachineSpeed(dict(zip(counts, measured)))


def speed_folder() -> Path:
    """Where a machine's speed is remembered between starts: the user's cache folder (XDG)."""
    cache = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(cache) / "zoo-compute"


def forget_speed(folder: Path) -> None:
    """Forget every speed remembered in `folder`: the next start measures this machine again."""
    for path in folder.glob("speed-*.json"):
        path.unlink(missing_ok=True)


def _machine_key(device: str, counts: list[int]) -> dict:
    """What a remembered speed holds for: the hardware, the torch and engine code that time it,
    and the thread counts timed. Any change is another machine, measured anew."""
    return {
        "hardware": hardware(torch.device(device)),
        "device": device,
        "torch": str(torch.__version__),
        "engine_sha256": code_version()["engine_sha256"],
        "threads": counts,
    }


def _digest(key: dict) -> str:
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:24]


class _SpeedFigures(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    flops_per_s: PositiveFloat
    seconds_per_op: PositiveFloat
    bytes_per_s: PositiveFloat


class _RememberedSpeed(BaseModel):
    model_config = ConfigDict(extra="forbid")

    key: dict
    by_threads: dict[int, _SpeedFigures]


def _read_speed(path: Path, key: dict) -> MachineSpeed | None:
    """The speed remembered at `path` for `key`, or None (no file, or one unreadable, of another
    machine, or without a finite positive figure for each count: all mean measuring again)."""
    try:
        with path.open("rb") as f:
            saved = _RememberedSpeed.model_validate_json(f.read(1 << 16))
    except (OSError, ValidationError):
        return None
    if saved.key != key or sorted(saved.by_threads) != key["threads"]:
        return None
    return MachineSpeed({n: Speed(**f.model_dump()) for n, f in saved.by_threads.items()})


def _write_speed(path: Path, key: dict, speed: MachineSpeed) -> None:
    """Remember `speed` at `path`, whole or not at all (a provider starting beside may read it)."""
    figures = {n: asdict(s) for n, s in speed.by_threads.items()}
    text = json.dumps({"key": key, "by_threads": figures})
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=path.parent, suffix=".tmp", delete=False) as f:
        f.write(text)
    os.replace(f.name, path)


def _measure_each(device: torch.device, counts: list[int]) -> list[Speed]:
    return [measure_speed(device, threads) for threads in counts]


def measure_speed(
    device: torch.device, threads: int, clock: Callable[[], float] = time.perf_counter
) -> Speed:
    """This machine's speed on `device` with `threads` CPU threads, measured now in this process
    by `clock` (the wall's by default): an operator's and a FLOP's price from two models' steps,
    each the sum of its FLOPs' and its operators'."""
    saved = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(True)  # as units train
    try:
        small, large = _reference(64, 64, 8), _reference(256, 128, 4)
        (f1, o1), (f2, o2) = ((c.flops, c.ops) for c in map(unit_cost, (small, large)))
        t1, t2 = _step_seconds(small, device, clock), _step_seconds(large, device, clock)
        # t = flops x seconds_per_flop + ops x seconds_per_op, for each model
        per_flop = (t2 * o1 - t1 * o2) / (f2 * o1 - f1 * o2)
        per_op = (t1 - f1 * per_flop) / o1
        if per_flop <= 0 or per_op <= 0:  # a timing too noisy to split: the large one's FLOPs
            per_op = t1 / o1 / 2
            per_flop = max(t2 - o2 * per_op, t2 / 2) / f2
        return Speed(
            flops_per_s=1 / per_flop,
            seconds_per_op=per_op,
            # a one-step unit commits two states: its segment and its result
            bytes_per_s=unit_cost(large).state_bytes / 2 / _segment_seconds(large, device, clock),
        )
    finally:
        torch.set_num_threads(saved[0])
        torch.use_deterministic_algorithms(saved[1])


def _step_seconds(spec: JobSpec, device: torch.device, clock: Callable[[], float]) -> float:
    """The best time of one training step of `spec`'s model (forward, backward, clipping, AdamW)
    on `device`."""
    step = _training(spec, device)[2]
    step()  # the optimizer's state is made in its first step
    return _fastest(step, device, clock)


def _segment_seconds(spec: JobSpec, device: torch.device, clock: Callable[[], float]) -> float:
    """The best time of a trace segment's commit of `spec`'s training state, as the trainer makes
    it: copied to the CPU, hashed, sketched, serialized for the provider's IPFS node."""
    from .train import _to_cpu

    model, optimizer, step = _training(spec, device)
    step()

    def commit() -> None:
        state = _to_cpu({"model": model.state_dict(), "optimizer": optimizer.state_dict()})
        trace.record(1, state_hash(state), 0.0, state["model"])
        Checkpoint(state).to_bytes()

    return _fastest(commit, device, clock)


def _training(
    spec: JobSpec, device: torch.device
) -> tuple[torch.nn.Module, torch.optim.Optimizer, Callable[[], None]]:
    """`spec`'s model on `device` with fixed weights (nothing is drawn from the random
    generators), its optimizer, and a step of both."""
    from .train import build_optimizer  # here: the trainer's modules import the limits

    with torch.device("meta"):
        model = spec.build_model()
    model = fixed_weights(model, device)
    optimizer = build_optimizer(model, spec.training)
    idx = torch.zeros(spec.training.batch_size, spec.data.seq_len, dtype=torch.long, device=device)

    def step() -> None:
        _, loss = model(idx, idx)
        assert loss is not None
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), spec.training.grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return model, optimizer, step


def _fastest(work: Callable[[], None], device: torch.device, clock: Callable[[], float]) -> float:
    """The best of _REPEATS timings of _STEPS runs of `work`, per run."""
    fastest = math.inf
    for _ in range(_REPEATS):
        _synchronize(device)
        began = clock()
        for _ in range(_STEPS):
            work()
        _synchronize(device)
        fastest = min(fastest, clock() - began)
    return fastest / _STEPS


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
