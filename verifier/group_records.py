"""Settle who made up each exchange of a group's unit and what each member sent, from every
member's record and commitment.

A rank's bundle records, for each exchange of its unit (a ddp step, a DiLoCo round), who made
it up and what every member sent, and its re-run aggregates those records. A rank could record
payloads nobody sent, members that were not in the exchange, or leave out members that were,
and still commit a consistent unit; or send the group one payload while committing another.
So each exchange is put to a vote, one vote per member bundle that could be read:

- its membership: for every rank any voter records as a member (or that voted), whether each
  voter's record holds it. All honest ranks record the same members, late ones included: the
  group all-gathers, or a round closes once on its board with the members every rank reads back
  (node.distributed.quorum), and every rank refuses the same unsound payloads;
- each payload: its sender's committed bytes, and every other voter's record of it.

A rank is contradicted where a strict majority of the votes differs from its own: another
membership, another record, or another commitment. Without such a majority (two ranks
disagreeing alone) nobody is named; colluding ranks that outnumber the honest ones can outvote
them, as they can outvote robust aggregation.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Mapping
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
        for sender, members in _member_votes(position, views).items():
            if not _outvoted(rank, members):
                continue
            if members[rank]:
                return (
                    f"{exchange} {number} records rank {sender} as a member, which the group "
                    "did not"
                )
            return f"{exchange} {number} leaves out rank {sender}, a member the group saw"
        for sender, votes in _payload_votes(position, views).items():
            if not _outvoted(rank, votes):
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


def _outvoted(rank: int, votes: Mapping[int, Hashable]) -> bool:
    """Whether a strict majority of `votes` (voter -> vote) differs from `rank`'s own vote;
    False where it cast none."""
    if rank not in votes:
        return False
    winner, count = Counter(votes.values()).most_common(1)[0]
    return 2 * count > len(votes) and winner != votes[rank]


def _member_votes(position: int, views: dict[int, MemberView]) -> dict[int, dict[int, bool]]:
    """rank -> {voter: whether its record of the exchange holds that rank}, for every rank a
    record names and every voter."""
    members = {voter: set(view.rounds[position].members) for voter, view in views.items()}
    ranks = set(members).union(*members.values())
    return {r: {voter: r in held for voter, held in members.items()} for r in sorted(ranks)}


def _payload_votes(position: int, views: dict[int, MemberView]) -> dict[int, dict[int, bytes]]:
    """sender -> {voter: bytes}: each sender's commitment for the step, and every record of it."""
    votes: dict[int, dict[int, bytes]] = {}
    for voter, view in views.items():
        votes.setdefault(voter, {})[voter] = view.sent[position]
        members, payloads = view.rounds[position]
        for sender, data in zip(members, payloads, strict=True):
            if sender != voter:
                votes.setdefault(sender, {})[voter] = data
    return votes
