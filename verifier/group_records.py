"""Settle what each member of a ddp step sent, from every member's record and commitment.

A ddp rank's bundle records, for each step of its unit, what every member sent, and its
re-run aggregates those records. A rank could record payloads nobody sent and still commit a
consistent unit, or send the group one payload while committing another. So each payload of a
step is put to a vote: its sender's committed bytes for that step, and every other member's
record of it, one vote each. A rank is contradicted where a strict majority of the votes
holds other bytes than its own vote: another record, or another commitment. Without such a
majority (two ranks disagreeing alone) nobody is named; colluding ranks that outnumber the
honest ones can outvote them, as they can outvote robust aggregation.
"""

from __future__ import annotations

from collections import Counter
from typing import NamedTuple

from marketplace.protocol.rank_bundle import RecordedRound


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


def contradiction(
    rank: int, exchanges: range, views: dict[int, MemberView], exchange: str
) -> str | None:
    """Why the majority contradicts `rank`'s view of its unit (`exchanges`, the unit's global
    step or round numbers, `exchange` what one is called), or None when it does not. `views`
    holds `rank`'s and every peer's that could be read, all of the same unit and its
    exchanges."""
    for position, number in enumerate(exchanges):
        for sender, votes in _votes(position, views).items():
            mine = votes.get(rank)
            if mine is None:
                continue
            winner, count = Counter(votes.values()).most_common(1)[0]
            if 2 * count <= len(votes) or winner == mine:
                continue
            if sender == rank:
                return (
                    f"the group received another payload from rank {rank} in {exchange} {number} "
                    "than it committed"
                )
            return (
                f"{exchange} {number} records a payload from rank {sender} "
                "that the group did not see it send"
            )
    return None


def _votes(position: int, views: dict[int, MemberView]) -> dict[int, dict[int, bytes]]:
    """sender -> {voter: bytes}: each sender's commitment for the step, and every record of it."""
    votes: dict[int, dict[int, bytes]] = {}
    for voter, view in views.items():
        votes.setdefault(voter, {})[voter] = view.sent[position]
        members, payloads = view.rounds[position]
        for sender, data in zip(members, payloads, strict=True):
            if sender != voter:
                votes.setdefault(sender, {})[voter] = data
    return votes
