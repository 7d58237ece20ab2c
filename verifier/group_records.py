"""Check a group unit's records of its exchanges by the signatures they carry.

A rank's bundle records, for each exchange of its unit (a ddp step, a DiLoCo round), who made
it up and what every member sent, each payload with its sender's signature
(marketplace/protocol/round_signatures.py), and its re-run aggregates those records. A record
can lie in two ways, and each is settled by a signature, which only its signer can make:

- a rank records a payload a member did not send: the record fails its recorder unless the
  member's signer, or a provider that held its slot earlier in the job, signed it, or it is
  what the member committed;
- a rank sends the group one payload and commits another: a peer's record of a payload the
  rank's signer signed for that exchange, other than the one it committed, fails the rank.

Who made up an exchange is not put to a vote: the rank hosting the board's store, or relaying
gloo's ring, could show honest ranks different members, and a vote would then name an honest
one. A rank that leaves a member's update out changes only where its own next step starts,
which its re-run checks, not the work it does.
"""

from __future__ import annotations

from typing import NamedTuple

from marketplace.protocol.rank_bundle import RecordedRound
from marketplace.protocol.round_signatures import RoundSigners, signed_by, signed_by_a_holder


class MemberView(NamedTuple):
    """One member's side of a unit: what it committed, step by step, and what it recorded."""

    sent: list[bytes]  # its committed payload cut into the unit's steps
    rounds: list[RecordedRound]  # each step's members and what it received from each


def member_view(payload: bytes, rounds: list[RecordedRound]) -> MemberView | None:
    """The view of a member whose payload is `rounds` equal parts (None when it is not)."""
    if not rounds or len(payload) % len(rounds):
        return None
    size = len(payload) // len(rounds)
    return MemberView([payload[i : i + size] for i in range(0, len(payload), size)], rounds)


def record_problem(
    rank: int,
    exchanges: range,
    views: dict[int, MemberView],
    signers: RoundSigners,
    exchange: str,
) -> str | None:
    """Why `rank`'s records of its unit (`exchanges`, the unit's global step or round numbers,
    `exchange` what one is called) or a peer's record of what it sent fail it; None when they
    do not. `views` holds `rank`'s and every peer's that could be read, all of the same unit.
    A member of whose slot no holder is known (a journal without the slot's assignment)
    cannot be checked."""
    own = views[rank]
    for position, number in enumerate(exchanges):
        recorded = own.rounds[position]
        for index, (sender, data) in enumerate(zip(recorded.members, recorded.payloads)):
            if sender == rank or not signers.known(sender):
                continue
            if sender in views and views[sender].sent[position] == data:
                continue  # what its sender committed
            signature = _signature(recorded, index)
            if not signed_by_a_holder(signers, number, sender, data, signature):
                return (
                    f"{exchange} {number} records a payload from rank {sender} that it did not sign"
                )
    for peer, view in sorted(views.items()):
        for position, number in enumerate(exchanges):
            recorded = view.rounds[position]
            if peer == rank or rank not in recorded.members:
                continue
            index = recorded.members.index(rank)
            data = recorded.payloads[index]
            if data != own.sent[position] and signed_by(
                signers, number, rank, data, _signature(recorded, index)
            ):
                return (
                    f"rank {rank} signed another payload in {exchange} {number} than it "
                    f"committed, and rank {peer} received it"
                )
    return None


def _signature(recorded: RecordedRound, index: int) -> bytes | None:
    return None if recorded.signatures is None else recorded.signatures[index]
