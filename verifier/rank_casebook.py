"""The cases cross-class judging of ranks is measured on: groups of the tiny GPT (ddp and
DiLoCo) under several compression settings, the CPU classes a rank's unit is re-run in, a
provider of one rank in any class, honest or cheating, and the slack a committed payload
needs. Shared by the calibration script, the verification bench and the tests, so all three
judge the same things."""

from __future__ import annotations

import copy
import functools
import hashlib
import math
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, nullcontext
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
import yaml

from marketplace.protocol.checkpoint import Checkpoint
from marketplace.protocol.rank_bundle import (
    RankBundle,
    RankUnit,
    RecordedRound,
    load_rank_bundle,
    rank_bundle,
    update_sha256,
)
from marketplace.protocol.round_signatures import RoundSigners
from marketplace.protocol.spec import JobSpec, parse_spec
from marketplace.protocol.units import is_last_unit
from node.distributed.compression import Compressor, Payload
from node.distributed.ddp import kept_in, replay_ddp_unit
from node.distributed.diloco import DilocoConfig, following_round, rerun_diloco_unit, round_vector
from node.distributed.exchange import (
    ReplayExchange,
    TolerantReplay,
    aggregate_recorded,
    encode_update,
    rms,
)
from node.distributed.group import GroupConfig
from node.distributed.job import group_config, train_spec, unit_bundle
from node.distributed.rank_unit import rank_class
from node.distributed.signing import local_signing
from verifier import casebook
from verifier.group_records import member_view
from verifier.rank_recompute import round_rerun, state_gap
from verifier.trajectory import Segment, StateSource, segment_drift

SPECS = Path(__file__).resolve().parents[1] / "node" / "specs"
GROUP_SPECS = {"ddp": SPECS / "tiny-ddp-3.yaml", "diloco": SPECS / "tiny-diloco-3.yaml"}

# How ranks' payloads are compressed: the shipped spec's, and the other kinds there are (top-k
# positions that may swap, 2-bit levels that may flip, plain float32 values).
COMPRESSIONS: dict[str, dict[str, Any]] = {
    "random-8bit": {"ratio": 0.1, "selection": "random", "bits": 8, "chunk": 256},
    "topk-2bit": {"ratio": 0.1, "selection": "topk", "bits": 2, "chunk": 256},
    "dense-fp32": {"ratio": 1.0, "bits": 32},
    "topk-fp32": {"ratio": 0.05, "selection": "topk", "bits": 32},
    "dense-4bit": {"ratio": 1.0, "bits": 4, "chunk": 64},
}

# Rank classes a CPU stands in with: (threads, oneDNN on). Ranks train in the first.
RANK_HOSTS: dict[str, tuple[int, bool]] = {
    "t1": (1, True),
    "t2": (2, True),
    "t1-nodnn": (1, False),
    "t2-nodnn": (2, False),
}

Tamper = Callable[[torch.Tensor], torch.Tensor]  # a rank's update -> what it compresses
NOISE_RATIO = 0.05  # of the update's RMS, in every entry


def group_spec(
    compression: str, seed: int = 1337, units: int = 2, every: int = 10, strategy: str = "ddp"
) -> JobSpec:
    """node/specs/tiny-{strategy}-3.yaml with `compression`, `units` units of `every` steps
    (in DiLoCo, rounds of `every` local steps)."""
    raw = yaml.safe_load(GROUP_SPECS[strategy].read_text())
    raw["distributed"]["compression"] = {**COMPRESSIONS[compression], "error_feedback": True}
    if strategy == "diloco":
        raw["distributed"]["diloco"]["inner_steps"] = every
    raw["training"] |= {"max_steps": units * every, "warmup_steps": 2}
    raw["checkpoint"]["every"] = every
    raw["reproducibility"]["seed"] = seed
    return parse_spec(raw)


def train_group(spec: JobSpec, folder: Path) -> None:
    """Train the group in this machine's rank class, every rank's inputs and payloads kept."""
    train_spec(spec, updates_dir=folder)


# A provider's IPFS node, standing in: content by its sha256 (the states a DiLoCo round's
# segment records name)
Store = dict[str, bytes]


def pin(store: Store, data: bytes) -> str:
    cid = hashlib.sha256(data).hexdigest()
    store[cid] = data
    return cid


def stored(store: Store) -> StateSource:
    """The provider's states a verifier fetches from `store`."""

    def state(segment: Mapping[str, Any]) -> Checkpoint | None:
        data = store.get(str(segment.get("cid")))
        return None if data is None else Checkpoint.load(data)

    return state


def committed_bundle(
    spec: JobSpec, folder: Path, rank: int, index: int, store: Store | None = None
) -> tuple[str, bytes]:
    """The commitment and bundle of `rank`'s unit `index` of a group trained into `folder`, as
    its provider pins them (a DiLoCo round's segment states into `store`; the job's last unit
    with the trained model)."""
    into = {} if store is None else store
    config = group_config(spec)
    last = is_last_unit(spec, index)
    return unit_bundle(spec, config, folder, rank, index, functools.partial(pin, into), last)


@contextmanager
def rank_host(name: str) -> Iterator[int]:
    """Run in the rank class `name`: oneDNN as it says; yields its thread count."""
    threads, mkldnn = RANK_HOSTS[name]
    before = torch.backends.mkldnn.enabled
    torch.backends.mkldnn.enabled = mkldnn  # type: ignore[assignment]
    try:
        yield threads
    finally:
        torch.backends.mkldnn.enabled = before


class _Providing(ReplayExchange):
    """A provider's exchanges with the others' payloads as recorded: its own computed here,
    after `tamper`, and put in the rounds in place of the recorded one."""

    def __init__(
        self, rank: int, config: GroupConfig, rounds: list[RecordedRound], tamper: Tamper | None
    ):
        super().__init__(rank, config, rounds)
        self.tamper = tamper
        self.recorded: list[RecordedRound] = []

    def __call__(self, update: torch.Tensor, round_: int) -> Any:
        if self.tamper is not None:
            update = self.tamper(update)
        payload = encode_update(self.config.compressor, self.feedback, update, round_)
        self.sent.append(payload.to_bytes())
        recorded = next(self.rounds)
        own = [
            self.sent[-1] if m == self.rank else data
            for m, data in zip(recorded.members, recorded.payloads)
        ]
        self.recorded.append(recorded._replace(payloads=own))
        return aggregate_recorded(self.config, own, update.numel(), round_)


def provide(
    spec: JobSpec,
    bundle: bytes,
    host: str,
    *,
    tamper: Tamper | None = None,
    trains: JobSpec | None = None,
    unit: RankUnit | None = None,
) -> tuple[str, bytes]:
    """The rank's unit of `bundle` as a provider in class `host` commits it, the other members'
    payloads being the recorded ones: honest, or cheating by sending `tamper(update)`, by
    training another spec (`trains`: less precision, a smaller batch) or from other inputs
    (`unit`: another shard). Its commitment and bundle, the job's last unit's with the weights
    its run leaves the rank at."""
    loaded = load_rank_bundle(bundle)
    start = unit or loaded.unit
    assert loaded.rounds is not None, "a ddp bundle"
    config = group_config(spec)
    exchange = _Providing(start.rank, config, loaded.rounds, tamper)
    residuals: list[torch.Tensor] = []
    with rank_host(host) as threads:
        following = replay_ddp_unit(
            trains or spec, config, start, exchange, threads, kept_in(residuals)
        )
        execution = rank_class(spec, threads).to_dict()
    payload = b"".join(exchange.sent)
    weights = following.trainer["model"] if is_last_unit(spec, loaded.unit.round_) else None
    recorded = exchange.recorded
    made = rank_bundle(loaded.unit, payload, weights, recorded, execution, residuals=residuals)
    return update_sha256(payload), made


def _noised(update: torch.Tensor) -> torch.Tensor:
    generator = torch.Generator().manual_seed(update.numel())
    return update + torch.randn(update.shape, generator=generator) * NOISE_RATIO * rms(update)


def noise(spec: JobSpec, bundle: bytes, other: bytes, host: str) -> tuple[str, bytes]:
    """Sends every step's update with noise of NOISE_RATIO of its RMS in every entry."""
    return provide(spec, bundle, host, tamper=_noised)


def stale_gradient(spec: JobSpec, bundle: bytes, other: bytes, host: str) -> tuple[str, bytes]:
    """Sends the unit's first update at every step: skips every later step's backward."""
    first: list[torch.Tensor] = []

    def tamper(update: torch.Tensor) -> torch.Tensor:
        if not first:
            first.append(update.clone())
        return first[0]

    return provide(spec, bundle, host, tamper=tamper)


def other_shard(spec: JobSpec, bundle: bytes, other: bytes, host: str) -> tuple[str, bytes]:
    """Trains on the next rank's data stream."""
    unit = load_rank_bundle(bundle).unit
    trainer = copy.deepcopy(unit.trainer)
    trainer["progress"]["stream"] = (unit.rank + 1) % spec.distributed.nodes
    return provide(spec, bundle, host, unit=replace(unit, trainer=trainer))


def bf16(spec: JobSpec, bundle: bytes, other: bytes, host: str) -> tuple[str, bytes]:
    """Trains under bf16 autocast where the spec asks for fp32."""
    return provide(spec, bundle, host, trains=_training(spec, precision="bf16"))


def fewer_tokens(spec: JobSpec, bundle: bytes, other: bytes, host: str) -> tuple[str, bytes]:
    """Trains on half of every batch."""
    half = spec.training.batch_size // 2
    return provide(spec, bundle, host, trains=_training(spec, batch_size=half))


def copy_of_another(spec: JobSpec, bundle: bytes, other: bytes, host: str) -> tuple[str, bytes]:
    """Commits what another rank (`other`'s) sent, as its own. It records no class, so that it
    is judged within the slack rather than by its hash."""
    mine, sent = load_rank_bundle(bundle), _steps(other)
    assert mine.rounds is not None
    rounds = [
        r._replace(
            payloads=[own if m == mine.unit.rank else d for m, d in zip(r.members, r.payloads)]
        )
        for r, own in zip(mine.rounds, sent, strict=True)
    ]
    payload = b"".join(sent)
    made = rank_bundle(*mine._replace(payload=payload, rounds=rounds, execution=None))
    return update_sha256(payload), made


# (spec, the rank's honest bundle, another rank's bundle of the unit, the cheater's class) ->
# the cheater's commitment and bundle
Cheat = Callable[[JobSpec, bytes, bytes, str], tuple[str, bytes]]
CHEATS: dict[str, Cheat] = {
    "noise": noise,
    "stale_gradient": stale_gradient,
    "other_shard": other_shard,
    "bf16": bf16,
    "fewer_tokens": fewer_tokens,
    "copy": copy_of_another,
}


def provide_round(
    spec: JobSpec,
    bundle: bytes,
    host: str,
    store: Store,
    *,
    cheat: str | None = None,
) -> tuple[str, bytes]:
    """The rank's DiLoCo round of `bundle` as a provider in class `host` commits it, its
    segment states pinned into `store`: honest, or cheating in its local steps as
    casebook.CHEATING[cheat] does. Its commitment and bundle (`_round_bundle`)."""
    loaded = load_rank_bundle(bundle)
    config = group_config(spec)
    assert isinstance(config, DilocoConfig), "a DiLoCo spec"
    segments: list[dict[str, Any]] = []

    def keep(segment: dict[str, Any], state: Checkpoint) -> None:
        segments.append(segment | {"cid": pin(store, state.to_bytes())})

    begin = int(loaded.unit.trainer["progress"]["step"])
    steps = config.steps_per_unit(spec)
    way = nullcontext() if cheat is None else casebook.CHEATING[cheat](begin, steps)
    with rank_host(host) as threads, way:
        payload, _ = rerun_diloco_unit(spec, config, loaded.unit, threads, keep)
        execution = rank_class(spec, threads).to_dict()
    return _round_bundle(
        spec, loaded._replace(payload=payload, execution=execution), segments, store
    )


def _round_bundle(
    spec: JobSpec, sent: RankBundle, segments: list[dict[str, Any]], store: Store
) -> tuple[str, bytes]:
    """The commitment and bundle of a DiLoCo round as its provider commits it: `sent`'s inputs,
    payload and class, its exchange as the group received that payload (`as_sent`), and
    `segments`, whose states are in `store`. The job's last round's holds the trained model:
    the outer step on that exchange from the state its last segment names, as the rank makes
    its next inputs (diloco.following_round), so that only what a cheat changes fails it."""
    unit, payload = sent.unit, sent.payload
    rounds = as_sent(sent, payload)
    weights = None
    if is_last_unit(spec, unit.round_):
        config = group_config(spec)
        assert isinstance(config, DilocoConfig) and rounds is not None, "a DiLoCo round"
        end = _state(store, segments[-1]).state
        weights = following_round(spec, config, unit, end, payload, rounds[0]).trainer["model"]
    bundle = rank_bundle(unit, payload, weights, rounds, sent.execution, segments)
    return update_sha256(payload), bundle


def as_sent(bundle: RankBundle, payload: bytes) -> list[RecordedRound] | None:
    """A DiLoCo bundle's recorded exchange, the rank's own payload in it `payload`: what the
    group received from a rank that sent it."""
    if bundle.rounds is None:
        return None
    recorded = bundle.rounds[0]
    sent = [
        payload if m == bundle.unit.rank else p
        for m, p in zip(recorded.members, recorded.payloads, strict=True)
    ]
    return [recorded._replace(payloads=sent)]


def round_drift(
    spec: JobSpec, bundle: bytes, store: Store, host: str
) -> list[tuple[int, dict[str, float]]]:
    """(steps since a common start, distances) for every pair of segment ends a verifier in
    class `host` compares with the DiLoCo round of `bundle`, whose states are in `store`:
    re-running from the round's start and from each of the provider's segment states, as the
    judge does (verifier.trajectory.judge_trajectory)."""
    loaded = load_rank_bundle(bundle)
    config = group_config(spec)
    assert isinstance(config, DilocoConfig) and loaded.segments is not None, "a DiLoCo round"
    theirs = [(segment, _state(store, segment)) for segment in loaded.segments]
    end = (loaded.unit.round_ + 1) * config.steps_per_unit(spec)
    origins = [Checkpoint(loaded.unit.trainer)] + [state for _, state in theirs[:-1]]
    out = []
    for i, origin in enumerate(origins):
        ours: list[Segment] = []
        with rank_host(host) as threads:
            keep = functools.partial(_keep, ours)
            round_rerun(spec, config, loaded.unit.rank, threads, keep)(origin, end - origin.step)
        out += segment_drift(theirs[i:], ours, origin.state["model"], origin.step)
    return out


def _keep(into: list[Segment], segment: dict[str, Any], state: Checkpoint) -> None:
    into.append((segment, state))


def _state(store: Store, segment: Mapping[str, Any]) -> Checkpoint:
    state = stored(store)(segment)
    assert state is not None, "the provider's store holds every state it committed"
    return state


def _cheating_round(name: str) -> RoundCheat:
    def cheat(
        spec: JobSpec, bundle: bytes, other: bytes, host: str, store: Store
    ) -> tuple[str, bytes]:
        return provide_round(spec, bundle, host, store, cheat=name)

    cheat.__doc__ = casebook.CHEATING[name].__doc__
    return cheat


def noised_payload(
    spec: JobSpec, bundle: bytes, other: bytes, host: str, store: Store
) -> tuple[str, bytes]:
    """Trains the round honestly, then sends what it compresses with noise of NOISE_RATIO of
    its RMS in every entry."""
    _, made = provide_round(spec, bundle, host, store)
    loaded = load_rank_bundle(made)
    config = group_config(spec)
    assert isinstance(config, DilocoConfig) and loaded.segments is not None, "a DiLoCo round"
    end = _state(store, loaded.segments[-1]).state["model"]
    _, vector = round_vector(spec, config, loaded.unit, end)
    payload = config.compressor.compress(_noised(vector), loaded.unit.round_).to_bytes()
    return _round_bundle(spec, loaded._replace(payload=payload), loaded.segments, store)


def copied_round(
    spec: JobSpec, bundle: bytes, other: bytes, host: str, store: Store
) -> tuple[str, bytes]:
    """Commits another rank's round (`other`'s payload and segments) as its own, and sends it."""
    mine, theirs = load_rank_bundle(bundle), load_rank_bundle(other)
    assert theirs.segments is not None, "a DiLoCo round"
    copied = mine._replace(payload=theirs.payload, execution=theirs.execution)
    return _round_bundle(spec, copied, theirs.segments, store)


# (spec, the rank's honest bundle, another rank's bundle of the round, the cheater's class, the
# provider's store) -> the cheater's commitment and bundle
RoundCheat = Callable[[JobSpec, bytes, bytes, str, Store], tuple[str, bytes]]
ROUND_CHEATS: dict[str, RoundCheat] = {name: _cheating_round(name) for name in casebook.CHEATING}
ROUND_CHEATS |= {"payload_noise": noised_payload, "copy": copied_round}


def own_weights(unit: RankUnit, end: Checkpoint) -> RankUnit:
    """Skips the outer step: starts from where its own local steps of the round before ended."""
    return replace(unit, trainer=unit.trainer | {"model": end.state["model"]})


def nudged_weights(unit: RankUnit, end: Checkpoint) -> RankUnit:
    """Starts from global weights moved by 1e-3 of each tensor's RMS in every entry: a poison."""
    generator = torch.Generator().manual_seed(0)
    model = {
        name: t + 1e-3 * rms(t) * torch.randn(t.shape, generator=generator)
        for name, t in unit.trainer["model"].items()
    }
    return replace(unit, trainer=unit.trainer | {"model": model})


def made_up_momentum(unit: RankUnit, end: Checkpoint) -> RankUnit:
    """Starts with outer momentum of its own: half the group's, or some where it keeps none."""
    assert unit.residual is not None, "a later round of a group with error feedback"
    momentum = torch.zeros_like(unit.residual) if unit.momentum is None else unit.momentum / 2
    return replace(unit, momentum=momentum)


def nudged_residual(unit: RankUnit, end: Checkpoint) -> RankUnit:
    """Starts with its residual moved by 1e-3 of its RMS in every entry: with a residual of its
    choosing, its payload could carry anything while explaining the round's end."""
    assert unit.residual is not None, "a later round of a group with error feedback"
    generator = torch.Generator().manual_seed(0)
    noise = torch.randn(unit.residual.shape, generator=generator)
    return replace(unit, residual=unit.residual + 1e-3 * rms(unit.residual) * noise)


# A later round's inputs moved from where the slot's previous round leaves the rank: (the
# inputs, the previous round's committed end state) -> the inputs the cheater starts from
StartMove = Callable[[RankUnit, Checkpoint], RankUnit]
START_CHEATS: dict[str, StartMove] = {
    "own_weights": own_weights,
    "nudged_weights": nudged_weights,
    "made_up_momentum": made_up_momentum,
    "nudged_residual": nudged_residual,
}


def started_elsewhere(
    spec: JobSpec, bundle: bytes, previous: bytes, host: str, store: Store, move: StartMove
) -> tuple[str, bytes] | None:
    """The rank's round of `bundle`, trained honestly and committed in class `host` from the
    inputs `move` makes of its own; `previous` is the slot's bundle of the round before. None
    where the move leaves the inputs as they are (no residual to nudge where values are sent
    whole, as an honest rank keeps none there): there is no cheat to commit."""
    loaded, before = load_rank_bundle(bundle), load_rank_bundle(previous)
    assert before.segments is not None, "a DiLoCo round"
    unit = move(loaded.unit, _state(store, before.segments[-1]))
    if unit.state_hash() == loaded.unit.state_hash():
        return None
    return provide_round(spec, rank_bundle(*loaded._replace(unit=unit)), host, store)


def _training(spec: JobSpec, **training: Any) -> JobSpec:
    return spec.model_copy(update={"training": spec.training.model_copy(update=training)})


def _steps(bundle: bytes) -> list[bytes]:
    loaded = load_rank_bundle(bundle)
    assert loaded.rounds is not None
    view = member_view(loaded.payload, loaded.rounds)
    assert view is not None
    return view.sent


class NeededSlack(TolerantReplay):
    """A tolerant replay that records the slack each step's committed payload needs (a share of
    the vector's RMS) instead of judging it."""

    def __init__(
        self, rank: int, config: GroupConfig, rounds: list[RecordedRound], sent: list[bytes]
    ):
        super().__init__(rank, config, rounds, sent, 0.0)
        self.needed: list[float] = []

    def check(self, payload: Payload, vector: torch.Tensor, round_: int) -> None:
        self.needed.append(needed_slack(self.config.compressor, payload, vector, round_))


def needed_slack(
    compressor: Compressor, payload: Payload, vector: torch.Tensor, round_: int
) -> float:
    """The least share of `vector`'s RMS within which `payload` is explained (to 1%); inf past
    a thousand times the RMS."""
    scale = rms(vector)

    def fits(share: float) -> bool:
        return compressor.explains(payload, vector, share * scale, round_) is None

    if fits(0.0):
        return 0.0
    high = 1e-9
    while not fits(high):
        high *= 10
        if high > 1e3:
            return math.inf
    low = high / 10
    while high > low * 1.01:
        middle = math.sqrt(low * high)
        low, high = (low, middle) if fits(middle) else (middle, high)
    return high


def rerun_needs(
    spec: JobSpec, bundle: bytes, host: str
) -> tuple[list[float], list[float], RankUnit]:
    """When a verifier in class `host` re-runs the bundle's unit: the slack every step needs,
    how far each residual the unit commits inside it is from the re-run's (which goes on from
    the committed one, as a verifier's does: `rank_recompute.replay_within`), and where the
    re-run leaves the rank."""
    loaded = load_rank_bundle(bundle)
    assert loaded.rounds is not None
    config = group_config(spec)
    exchange = NeededSlack(loaded.unit.rank, config, loaded.rounds, _steps(bundle))
    gaps: list[float] = []

    def measured(index: int, residual: torch.Tensor) -> torch.Tensor:
        gaps.append(state_gap(residual, loaded.residuals[index]))
        return loaded.residuals[index].clone()

    with rank_host(host) as threads:
        following = replay_ddp_unit(spec, config, loaded.unit, exchange, threads, measured)
    return exchange.needed, gaps, following


def local_signers(spec: JobSpec) -> RoundSigners:
    """Who signed what a group trained here whole sent: each rank with its well-known key."""
    return local_signing(spec.distributed.nodes).signers
