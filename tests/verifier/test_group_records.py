"""The vote on a group's exchanges: who made each up and what each member sent. Honest ranks
record the same members, late ones included, so a rank that records a member nobody else saw,
or leaves out one the others saw, is outvoted; two ranks alone that disagree name nobody."""

from __future__ import annotations

from marketplace.protocol.rank_bundle import RecordedRound
from verifier.group_records import MemberView, contradiction

SENT = {rank: bytes([rank]) * 4 for rank in range(4)}  # what each rank committed for the round


def view(rank: int, members: list[int], **made_up: bytes) -> MemberView:
    """`rank`'s view of a one-round unit: its own payload, and the round as it recorded it, what
    a member sent replaced where `made_up` says (`rank_<n>`)."""
    payloads = [made_up.get(f"rank_{m}", SENT[m]) for m in members]
    return MemberView([SENT[rank]], [RecordedRound(members, payloads)])


def judged(rank: int, views: dict[int, MemberView]) -> str | None:
    return contradiction(rank, range(5, 6), views, "round")


def test_ranks_that_recorded_the_same_round_agree():
    views = {rank: view(rank, [0, 1, 2]) for rank in range(3)}
    assert all(judged(rank, views) is None for rank in range(3))


def test_a_member_nobody_else_recorded_is_outvoted():
    """A member outside the others' records, with a payload of the rank's choosing: its single
    vote no longer wins."""
    views = {rank: view(rank, [0, 1, 2]) for rank in (0, 2)}
    views[1] = view(1, [0, 1, 2, 3], rank_3=b"\xff" * 4)
    assert judged(1, views) == "round 5 records rank 3 as a member, which the group did not"
    assert judged(0, views) is None and judged(2, views) is None


def test_members_left_out_of_a_record_outvote_it():
    views = {rank: view(rank, [0, 1, 2]) for rank in (0, 2)}
    views[1] = view(1, [1, 2])
    assert judged(1, views) == "round 5 leaves out rank 0, a member the group saw"
    # and left out of every record but its own: it counts as a voter on itself
    views = {rank: view(rank, [0, 1, 2]) for rank in (0, 2)} | {1: view(1, [0, 1])}
    assert judged(1, views) == "round 5 leaves out rank 2, a member the group saw"


def test_a_late_rank_that_is_not_a_member_agrees_with_the_members():
    """A round closed at its deadline without rank 2: every rank reads the same members back,
    rank 2 too, which recorded the round it was not part of."""
    views = {rank: view(rank, [0, 1, 3]) for rank in range(4)}
    assert all(judged(rank, views) is None for rank in range(4))
    # a rank that adds the late rank's payload to its round is outvoted, rank 2's vote included
    views[1] = view(1, [0, 1, 2, 3])
    assert judged(1, views) == "round 5 records rank 2 as a member, which the group did not"


def test_two_ranks_alone_that_disagree_on_the_members_name_nobody():
    views = {0: view(0, [0, 1, 2]), 1: view(1, [0, 1])}
    assert judged(0, views) is None and judged(1, views) is None


def test_a_payload_the_group_did_not_see_is_still_outvoted():
    views = {rank: view(rank, [0, 1, 2]) for rank in (0, 2)}
    views[1] = view(1, [0, 1, 2], rank_0=b"\x07" * 4)
    assert (
        judged(1, views)
        == "round 5 records a payload from rank 0 that the group did not see it send"
    )
