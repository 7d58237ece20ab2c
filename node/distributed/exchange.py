"""One rank's side of a round: encode its update, get everyone's, aggregate, and account for it."""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NamedTuple

import torch
import torch.distributed as dist

from marketplace.protocol.rank_bundle import RecordedRound
from marketplace.protocol.round_signatures import SIGNATURE_BYTES
from node.engine.devices import group_device

from .aggregation import Aggregate
from .compression import CompressionError, Compressor, ErrorFeedback, Payload
from .group import Delay, GroupConfig, Tamper
from .quorum import RoundBoard

logger = logging.getLogger(__name__)

_OPEN_POLL_S = 0.05  # between looks at whether the rank's daemon opened the next exchange


def update_path(updates_dir: str | os.PathLike[str], round_: int, rank: int) -> Path:
    """Where a rank saves the payload it sent in a round: its update, to pin and commit."""
    return Path(updates_dir, f"round-{round_:06d}", f"rank-{rank}.bin")


def signature_path(updates_dir: str | os.PathLike[str], round_: int, rank: int) -> Path:
    """Where a rank saves a member's signature on what it sent in a round."""
    return update_path(updates_dir, round_, rank).with_suffix(".sig")


def aggregate_path(updates_dir: str | os.PathLike[str], round_: int) -> Path:
    """Where a rank notes who made up a round and whom the aggregator excluded (JSON)."""
    return Path(updates_dir, f"round-{round_:06d}", "aggregate.json")


def recorded_round(updates_dir: str | os.PathLike[str], round_: int) -> RecordedRound:
    """A round as a rank saved it: its members, what each of them sent and signed."""
    members = json.loads(aggregate_path(updates_dir, round_).read_text())["members"]
    return RecordedRound(
        members,
        [update_path(updates_dir, round_, m).read_bytes() for m in members],
        [signature_path(updates_dir, round_, m).read_bytes() for m in members],
    )


def settle_round(updates_dir: str | os.PathLike[str], round_: int, recorded: RecordedRound) -> None:
    """Write down a round the group closed before, as a committed unit records it: a rank that
    meets it takes it as recorded rather than exchanging (`Exchange`). A group whose host
    dropped meets again on a new board, which holds none of its rounds; a rank starting again
    from its last committed unit goes through the rounds the group committed meanwhile
    exactly as they were."""
    if recorded.signatures is None:
        raise ValueError(f"round {round_}: a settled round keeps every member's signature")
    aggregate_path(updates_dir, round_).parent.mkdir(parents=True, exist_ok=True)
    _write_round(updates_dir, round_, recorded, [])


def _write_round(
    updates_dir: str | os.PathLike[str],
    round_: int,
    recorded: RecordedRound,
    outliers: list[int],
    saved: int | None = None,
) -> None:
    """Save a round as `recorded_round` reads it back: every member's payload and signature
    (but member `saved`'s, already saved) and who made it up and was flagged."""
    assert recorded.signatures is not None
    for member, data, signature in zip(
        recorded.members, recorded.payloads, recorded.signatures, strict=True
    ):
        if member != saved:
            update_path(updates_dir, round_, member).write_bytes(data)
            signature_path(updates_dir, round_, member).write_bytes(signature)
    seen = {"members": recorded.members, "outliers": outliers}
    aggregate_path(updates_dir, round_).write_text(json.dumps(seen))


def sent_in(updates_dir: str | os.PathLike[str], rounds: range, rank: int) -> bytes:
    """What a rank sent in `rounds`, back to back: the payload of the unit they make up."""
    return b"".join(update_path(updates_dir, round_, rank).read_bytes() for round_ in rounds)


def encode_update(
    compressor: Compressor, feedback: ErrorFeedback | None, update: torch.Tensor, round_: int
) -> Payload:
    """The payload a rank sends for `update` in `round_` (with its residual, if it keeps one).

    Training and a verifier's re-run both go through here, so both produce the same bytes.
    """
    if feedback is None:
        return compressor.compress(update, round_)
    return feedback.compress(update, round_)[0]


class Exchange:
    """Sends this rank's update, receives the round's updates and aggregates them.

    Updates are compressed with error feedback and all-gathered (rather than all-reduced) so
    every rank can run the robust aggregator on every rank's update. Without a deadline the
    gloo group all-gathers them; with one, they go through a `RoundBoard`, which closes a
    round with a quorum and lets a late rank pick up the result. Each payload travels with its
    sender's signature, and one its sender did not sign is refused like an unsound one, whoever
    relayed it (marketplace/protocol/round_signatures.py). Each exchange is counted:
    the bytes this rank sent, the sha256 of its payload (its commitment), the ranks that
    made up the round and the ones the aggregator flagged.
    """

    def __init__(
        self,
        rank: int,
        config: GroupConfig,
        store: dist.Store,
        *,
        tamper: Tamper | None = None,
        delay: Delay | None = None,
    ):
        self.rank = rank
        self.config = config
        self.tamper = tamper  # plays a Byzantine rank in tests and benchmarks
        self.delay = delay  # plays a straggler in tests
        self.feedback = ErrorFeedback(config.compressor) if config.error_feedback else None
        self.signing = config.round_signing
        self.board = None
        if config.deadline_s is not None:  # the rounds have a deadline: `config.uses_board`
            self.board = RoundBoard(store, config.ranks, config.fewest_members, config.deadline_s)
        self.bytes_sent = 0
        self.commitments: list[str] = []  # this rank's payload digest, per exchange
        self.outliers: list[list[int]] = []  # ranks the aggregator flagged, per exchange
        self.members: list[list[int]] = []  # ranks aggregated, per exchange

    def __call__(self, update: torch.Tensor, round_: int) -> Aggregate:
        """The aggregate of the round's updates (flat vectors of the same length)."""
        update = update.detach().cpu()  # payloads are built, sent and aggregated on the CPU
        if self.tamper is not None:
            update = self.tamper(self.rank, update)
        settled = self._settled(round_)  # read before this rank's payload is saved over it
        if settled is None:
            self._await_open(round_)
        payload = encode_update(self.config.compressor, self.feedback, update, round_)
        signature = self.signing.sign(self.rank, round_, payload.to_bytes())
        self._account(payload, signature, round_)
        if self.delay is not None:
            time.sleep(self.delay(self.rank, round_))
        received: Sequence[Signed]
        signed = self._signed
        if settled is not None:
            members, received = self._as_settled(settled, payload, round_)
            signed = _checked_when_settled
        elif self.board is None:
            members, received = list(range(self.config.ranks)), _all_gather(payload, signature)
        else:
            self.board.post(round_, self.rank, signature + payload.to_bytes())
            members = self.board.members(round_)
            posted = self.board.payloads(round_, members, SIGNATURE_BYTES + payload.nbytes)
            received = [_unpacked(data) for data in posted]
        members, payloads, signatures, refused = _sound(
            signed, self.config.compressor, members, received, update.numel(), round_
        )
        result = aggregate(self.config, payloads, update.numel(), round_)
        self.members.append(members)
        self.outliers.append(sorted(refused + [members[row] for row in result.outliers]))
        if self.config.updates_dir is not None:
            self._record(self.config.updates_dir, round_, members, payloads, signatures)
        return result

    def _settled(self, round_: int) -> RecordedRound | None:
        """The round as its daemon wrote it down before the rank started (`settle_round`), if
        the group closed it before."""
        if self.config.updates_dir is None:
            return None
        if not aggregate_path(self.config.updates_dir, round_).exists():
            return None
        return recorded_round(self.config.updates_dir, round_)

    def _as_settled(
        self, settled: RecordedRound, payload: Payload, round_: int
    ) -> tuple[list[int], list[Signed]]:
        """A settled round's members and what they signed; this rank, if one of them, must have
        sent what the round holds, or it would go on from another state than the group's."""
        members = settled.members
        if (
            self.rank in members
            and settled.payloads[members.index(self.rank)] != payload.to_bytes()
        ):
            raise ReplayMismatch(
                f"round {round_} was settled with another payload from rank {self.rank} "
                "than its re-run sends"
            )
        assert settled.signatures is not None  # `settle_round` writes every one
        logger.info("round %d: settled before, with ranks %s", round_, settled.members)
        return members, [
            Signed(data, sig)
            for data, sig in zip(settled.payloads, settled.signatures, strict=True)
        ]

    def _await_open(self, round_: int) -> None:
        """Wait until the provider's daemon has read who holds the slots late enough for the
        rank to take part in `round_` (`RoundSigning.open_through`), and check what the round's
        members send against those holders: a slot's former holder's payload stands in a
        record only so long (round_signatures.slot_tenures)."""
        if self.signing.holders_file is None:  # no daemon: a group one machine plays whole
            return
        if self.signing.open_through is not None and round_ <= self.signing.open_through:
            return  # opened by a read of the holders already: the file is read once a unit
        waited = False
        while True:
            latest = self.signing.refreshed()
            if latest.open_through is not None and round_ <= latest.open_through:
                self.signing = latest
                return
            if not waited:
                logger.info("round %d: waiting for this rank's daemon to commit", round_)
                waited = True
            time.sleep(_OPEN_POLL_S)

    def _signed(self, member: int, round_: int, data: bytes, signature: bytes) -> bool:
        """Whether `member`'s signer signed `data` for the round; where not, asked again of the
        holders the provider's daemon last wrote down, once they changed: a slot may have
        changed hands."""
        if self.signing.signed(member, round_, data, signature):
            return True
        latest = self.signing.refreshed()
        if latest.addresses == self.signing.addresses:
            return False
        self.signing = latest
        return latest.signed(member, round_, data, signature)

    def _record(
        self,
        updates_dir: str,
        round_: int,
        members: list[int],
        payloads: list[Payload],
        signatures: list[bytes],
    ) -> None:
        """Save who made up the round, whom the aggregator flagged and what every member sent
        and signed: a ddp unit's verifier rebuilds each step's aggregate from them."""
        recorded = RecordedRound(members, [p.to_bytes() for p in payloads], signatures)
        _write_round(updates_dir, round_, recorded, self.outliers[-1], saved=self.rank)

    def _account(self, payload: Payload, signature: bytes, round_: int) -> None:
        self.bytes_sent += payload.nbytes
        self.commitments.append(payload.sha256())
        if self.config.updates_dir is not None:
            path = update_path(self.config.updates_dir, round_, self.rank)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(payload.to_bytes())
            signature_path(self.config.updates_dir, round_, self.rank).write_bytes(signature)


class ReplayMismatch(ValueError):
    """Recorded rounds that contradict the rank's own re-run."""


class ReplayExchange:
    """A rank's exchanges played back from recorded rounds, for a verifier's re-run of a ddp
    unit: this rank's update is encoded as `Exchange` encodes it, and aggregated with what
    the round's members sent, as recorded. What the rank sends is kept, in order."""

    def __init__(self, rank: int, config: GroupConfig, rounds: list[RecordedRound]):
        self.rank = rank
        self.config = config
        self.feedback = ErrorFeedback(config.compressor) if config.error_feedback else None
        self.rounds = iter(rounds)
        self.sent: list[bytes] = []

    def __call__(self, update: torch.Tensor, round_: int) -> Aggregate:
        payload = encode_update(self.config.compressor, self.feedback, update, round_).to_bytes()
        self.sent.append(payload)
        members, recorded, _ = next(self.rounds)
        if self.rank in members and recorded[members.index(self.rank)] != payload:
            raise ReplayMismatch(
                f"round {round_} records another payload from rank {self.rank} "
                "than its re-run sends"
            )
        return aggregate_recorded(self.config, recorded, update.numel(), round_)


class RankCheat(ValueError):
    """A committed payload that no vector within the slack of a verifier's own makes."""


class TolerantReplay:
    """A rank's exchanges played back for a verifier of another execution class: what the rank
    committed for each step must be a compression of a vector within `slack` (a share of the
    vector's RMS, in any entry) of the verifier's own, its update plus its residual. The
    residual then takes what the committed payload left out, and the step aggregates what the
    members sent, as recorded, so the re-run stays on the group's trajectory rather than
    drifting from it. Error feedback still carries each step's rounding into the next, so the
    slack holds only over as many steps as it was measured on: the re-run takes up the rank's
    committed residual every DDP_RESIDUAL_EVERY steps (verifier.rank_recompute.replay_within)."""

    def __init__(
        self,
        rank: int,
        config: GroupConfig,
        rounds: list[RecordedRound],
        committed: list[bytes],
        slack: float,
    ):
        self.rank = rank
        self.config = config
        self.feedback = ErrorFeedback(config.compressor) if config.error_feedback else None
        self.rounds = iter(rounds)
        self.committed = iter(committed)
        self.slack = slack

    def __call__(self, update: torch.Tensor, round_: int) -> Aggregate:
        compressor, numel = self.config.compressor, update.numel()
        residual = None if self.feedback is None else self.feedback.residual
        vector = update.detach().float() + (0 if residual is None else residual)
        data = next(self.committed)
        members, recorded, _ = next(self.rounds)
        if self.rank in members and recorded[members.index(self.rank)] != data:
            raise RankCheat(f"round {round_} records another payload than the rank committed")
        payload = compressor.parse(data, numel)
        self.check(payload, vector, round_)
        if self.feedback is not None:
            residual = vector - compressor.decompress(payload, numel, round_)
            if compressor.bits == 32:  # values sent whole leave an honest rank no residual
                residual[compressor.positions(payload, numel, round_)] = 0.0
            self.feedback.residual = residual
        return aggregate_recorded(self.config, recorded, numel, round_)

    def check(self, payload: Payload, vector: torch.Tensor, round_: int) -> None:
        """RankCheat unless `payload` is explained by `vector` within the slack."""
        slack = self.slack * rms(vector)
        why = self.config.compressor.explains(payload, vector, slack, round_)
        if why is not None:
            raise RankCheat(f"round {round_}: {why}")


def rms(vector: torch.Tensor) -> float:
    """The root mean square of a vector's entries: what a rank's slack is a share of."""
    return float(vector.double().square().mean().sqrt())


def aggregate(config: GroupConfig, payloads: list[Payload], numel: int, round_: int) -> Aggregate:
    """The round's aggregate of the members' payloads, in the members' order."""
    received = [config.compressor.decompress(p, numel, round_) for p in payloads]
    return config.aggregator(torch.stack(received))  # (members, numel)


def aggregate_recorded(
    config: GroupConfig, recorded: list[bytes], numel: int, round_: int
) -> Aggregate:
    """The aggregate of a recorded round's payloads (CompressionError for one that does not
    parse): how a re-run rebuilds a step the rank took part in."""
    parse = config.compressor.parse
    return aggregate(config, [parse(data, numel) for data in recorded], numel, round_)


class Signed(NamedTuple):
    """A payload as it arrived (parsed by gloo's all-gather, or bytes off the board) and the
    signature that came with it."""

    payload: Payload | bytes
    signature: bytes


def _unpacked(posted: bytes) -> Signed:
    """A board entry: the sender's signature, then its payload."""
    return Signed(posted[SIGNATURE_BYTES:], posted[:SIGNATURE_BYTES])


def _checked_when_settled(member: int, round_: int, data: bytes, signature: bytes) -> bool:
    """A settled round's signatures were checked against its slots' holders on the chain,
    former ones included, before the daemon wrote it down (node/daemon/group_worker.py)."""
    return True


def _sound(
    signed: Callable[[int, int, bytes, bytes], bool],
    compressor: Compressor,
    members: list[int],
    received: Sequence[Signed],
    numel: int,
    round_: int,
) -> tuple[list[int], list[Payload], list[bytes], list[int]]:
    """The members whose payloads their signers signed and are sound (`Compressor.validate`),
    those payloads and signatures, and the members refused: a round goes on without what
    would crash or poison its aggregate, or that another rank made up, and the refused are
    reported with the outliers, for verifiers to re-run."""
    kept: list[int] = []
    payloads: list[Payload] = []
    signatures: list[bytes] = []
    refused: list[int] = []
    for member, (item, signature) in zip(members, received, strict=True):
        data = item.to_bytes() if isinstance(item, Payload) else item
        try:
            if not signed(member, round_, data, signature):
                raise CompressionError("its sender did not sign it")
            if isinstance(item, Payload):
                compressor.validate(item, numel)
                parsed = item
            else:
                parsed = compressor.parse(item, numel)
        except CompressionError as exc:
            logger.warning("rank %d's payload is refused: %s", member, exc)
            refused.append(member)
            continue
        kept.append(member)
        payloads.append(parsed)
        signatures.append(signature)
    return kept, payloads, signatures, refused


def _all_gather(payload: Payload, signature: bytes) -> list[Signed]:
    """Every rank's payload and signature, by rank; the shapes agree because the settings and
    sizes do. They travel on the group's device (NCCL's are CUDA tensors) and come back to the
    CPU."""
    ranks = dist.get_world_size()
    device = group_device()
    gathered = []
    for tensor in (*payload.tensors(), torch.frombuffer(bytearray(signature), dtype=torch.uint8)):
        if tensor.numel() == 0:
            gathered.append([tensor] * ranks)
            continue
        parts = [torch.empty_like(tensor, device=device) for _ in range(ranks)]
        dist.all_gather(parts, tensor.contiguous().to(device))
        gathered.append([part.cpu() for part in parts])
    *tensors, signatures = gathered
    return [
        Signed(Payload(*parts), bytes(sig.numpy().tobytes()))
        for *parts, sig in zip(*tensors, signatures, strict=True)
    ]
