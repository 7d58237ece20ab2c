"""A group's records of its exchanges are judged by the signatures they carry, never by a vote:
a rank that records a payload its member did not sign fails, a rank that signed a payload it
did not commit fails, and the ranks a relay showed different members to all pass."""

from __future__ import annotations

from marketplace.chain.ledger import CommittedUnit
from marketplace.protocol.rank_bundle import RecordedRound
from marketplace.protocol.round_signatures import (
    RoundSigners,
    SlotEvent,
    Tenure,
    sign_round,
    slot_tenures,
)
from node.distributed.signing import local_signing
from verifier.group_records import MemberView, record_problem
from verifier.journal import Journal

ROUND = 5
SIGNING = local_signing(4, job_id=7)
SENT = {rank: bytes([rank]) * 4 for rank in range(4)}  # what each rank committed for the round


def signed(rank: int, payload: bytes) -> bytes:
    return SIGNING.sign(rank, ROUND, payload)


def view(rank: int, members: list[int], **received: bytes) -> MemberView:
    """`rank`'s view of a one-round unit: its own payload, and the round as it recorded it,
    every payload signed by its sender; what a member sent replaced where `received` says
    (`rank_<n>`), signed by that member too."""
    payloads = [received.get(f"rank_{m}", SENT[m]) for m in members]
    signatures = [signed(m, p) for m, p in zip(members, payloads)]
    return MemberView([SENT[rank]], [RecordedRound(members, payloads, signatures)])


def judged(rank: int, views: dict[int, MemberView]) -> str | None:
    return record_problem(rank, range(ROUND, ROUND + 1), views, SIGNING.signers, "round")


def test_ranks_that_recorded_the_same_round_pass():
    views = {rank: view(rank, [0, 1, 2]) for rank in range(3)}
    assert all(judged(rank, views) is None for rank in range(3))


def test_ranks_a_relay_showed_different_members_all_pass():
    """The board's host let rank 1 see rank 2's payload and hid it from rank 0 (the attack a
    vote on membership loses: the host's vote and rank 0's outvoted honest rank 1)."""
    views = {0: view(0, [0, 1]), 1: view(1, [0, 1, 2]), 2: view(2, [0, 1, 2])}
    assert all(judged(rank, views) is None for rank in range(3))


def test_a_payload_its_member_did_not_sign_fails_the_recorder():
    forged = view(1, [0, 1, 2])
    forged.rounds[0].payloads[0] = b"\x07" * 4  # another payload under rank 0's signature
    views = {0: view(0, [0, 1, 2]), 1: forged, 2: view(2, [0, 1, 2])}
    assert judged(1, views) == "round 5 records a payload from rank 0 that it did not sign"
    assert judged(0, views) is None and judged(2, views) is None
    # signed by the recorder itself, or by nobody, it is still not rank 0's
    forged.rounds[0].signatures[0] = SIGNING.sign(1, ROUND, b"\x07" * 4)  # type: ignore[index]
    assert judged(1, views) is not None
    unsigned = MemberView(forged.sent, [forged.rounds[0]._replace(signatures=None)])
    assert judged(1, views | {1: unsigned}) is not None


def test_a_payload_its_member_committed_needs_no_signature():
    """A slot's new holder re-sends its predecessor's payload: records keep the predecessor's
    signature, and the committed bytes vouch for it."""
    record = view(1, [0, 1, 2])
    record.rounds[0].signatures[0] = b"\x00" * 65  # type: ignore[index]
    views = {0: view(0, [0, 1, 2]), 1: record}
    assert judged(1, views) is None


def test_a_member_whose_signer_is_unknown_is_not_checked():
    forged = view(1, [0, 1, 3], rank_3=b"\x09" * 4)
    forged.rounds[0].signatures[2] = b"\x00" * 65  # type: ignore[index]
    unknown = SIGNING.signers._replace(
        addresses={r: a for r, a in SIGNING.signers.addresses.items() if r != 3}
    )
    assert record_problem(1, range(ROUND, ROUND + 1), {1: forged}, unknown, "round") is None
    assert judged(1, {1: forged}) == "round 5 records a payload from rank 3 that it did not sign"


HANDED_OVER = local_signing(5, job_id=7)  # its key 4 is slot 2's successor's
SUCCESSOR = HANDED_OVER.signers.addresses[4]


def handed_over(signers: RoundSigners) -> RoundSigners:
    """Slot 2 handed over: its unit committed by the successor, its first holder a former one."""
    former = signers.addresses[2]
    return RoundSigners(
        signers.job_id,
        {r: a for r, a in signers.addresses.items() if r != 2} | {2: SUCCESSOR},
        {2: {former: Tenure(0), SUCCESSOR: Tenure(ROUND)}},
    )


def test_a_payload_a_slots_former_holder_signed_stands_in_a_record():
    """Slot 2's first holder sent the round and dropped out before committing; its successor
    re-ran the unit and committed the same payload. With the successor's bundle out of reach,
    rank 1's record of the first holder's payload stands on its signature."""
    signers = handed_over(SIGNING.signers)
    record = view(1, [0, 1, 2])
    assert record_problem(1, range(ROUND, ROUND + 1), {1: record}, signers, "round") is None
    # a payload neither of the slot's holders signed still fails the recorder
    record.rounds[0].payloads[2] = b"\x0d" * 4
    assert record_problem(1, range(ROUND, ROUND + 1), {1: record}, signers, "round") == (
        "round 5 records a payload from rank 2 that it did not sign"
    )


def test_a_payload_a_former_holder_signed_does_not_fail_the_successor():
    """The first holder sent the group another payload than the successor, re-running the unit
    from its inputs, committed: the successor signed nothing of it and passes."""
    signers = handed_over(SIGNING.signers)
    sent = b"\x0e" * 4
    views = {0: view(0, [0, 1, 2], rank_2=sent), 2: view(2, [0, 1, 2])}
    assert record_problem(2, range(ROUND, ROUND + 1), views, signers, "round") is None
    assert record_problem(0, range(ROUND, ROUND + 1), views, signers, "round") is None


def test_a_slots_holder_that_dropped_before_committing_anything_is_known_by_its_assignment(
    tmp_path,
):
    """Slot 2's first holder won it, sent the round and dropped out before committing anything;
    its successor, of another class, re-ran the round and committed another payload. Rank 1's
    honest record of the first holder's payload stands on its signature: the verifier's journal
    keeps every provider a slot was assigned to (SlotAssigned), not only those that committed,
    which failed the honest recorder. A payload no holder signed still fails it."""
    first = SIGNING.signers.addresses[2]
    journal = Journal(tmp_path / "journal.sqlite3")
    journal.hold_slot(7, 2, first, block=10)
    journal.hold_slot(7, 2, SUCCESSOR, block=20)
    journal.hold_slot(7, 2, first, block=30)  # assigned again: its first tenure stands
    journal.hold_slot(7, 2, HANDED_OVER.signers.addresses[3], block=40)  # after the unit
    assert journal.slot_tenures(7, 2, at_block=25) == {
        first.lower(): Tenure(0),
        SUCCESSOR.lower(): Tenure(0),
    }
    signers = RoundSigners(
        7,
        {r: a for r, a in SIGNING.signers.addresses.items() if r != 2} | {2: SUCCESSOR},
        {2: journal.slot_tenures(7, 2, at_block=25)},
    )
    journal.close()
    record = view(1, [0, 1, 2])
    resent = b"\x0f" * 4
    successor = MemberView(
        [resent],
        [
            RecordedRound(
                [0, 1, 2],
                [SENT[0], SENT[1], resent],
                [signed(0, SENT[0]), signed(1, SENT[1]), b"\x00" * 65],
            )
        ],
    )
    views = {1: record, 2: successor}
    assert record_problem(1, range(ROUND, ROUND + 1), views, signers, "round") is None
    assert record_problem(2, range(ROUND, ROUND + 1), views, signers, "round") is None
    committers_only = signers._replace(former={})
    assert record_problem(1, range(ROUND, ROUND + 1), views, committers_only, "round") == (
        "round 5 records a payload from rank 2 that it did not sign"
    )
    record.rounds[0].payloads[2] = b"\x0d" * 4
    assert record_problem(1, range(ROUND, ROUND + 1), views, signers, "round") == (
        "round 5 records a payload from rank 2 that it did not sign"
    )


def test_a_member_that_never_committed_is_checked_against_its_slots_holders():
    """Rank 3 committed earlier units and not this one: a payload recorded as its that it did
    not sign fails the recorder."""
    uncommitted = SIGNING.signers._replace(
        addresses={r: a for r, a in SIGNING.signers.addresses.items() if r != 3},
        former={3: {SIGNING.signers.addresses[3]: Tenure(0)}},
    )
    honest = view(1, [0, 1, 3])
    assert record_problem(1, range(ROUND, ROUND + 1), {1: honest}, uncommitted, "round") is None
    forged = view(1, [0, 1, 3])
    forged.rounds[0].payloads[2] = b"\x09" * 4
    assert record_problem(1, range(ROUND, ROUND + 1), {1: forged}, uncommitted, "round") == (
        "round 5 records a payload from rank 3 that it did not sign"
    )


def test_a_rank_that_signed_another_payload_than_it_committed_fails():
    """Rank 1 sent the group one payload and committed another: one honest record of the sent
    one, under rank 1's signature, fails it, whatever the others recorded."""
    sent = b"\x0b" * 4
    views = {1: view(1, [0, 1, 2]), 0: view(0, [0, 1, 2], rank_1=sent), 2: view(2, [0, 2])}
    assert judged(1, views) == (
        "rank 1 signed another payload in round 5 than it committed, and rank 0 received it"
    )
    assert judged(0, views) is None and judged(2, views) is None


def test_a_signature_from_another_job_or_round_signs_nothing_here():
    """Rank 0's signature on the same bytes in another job or round is no signature on them in
    this one: replayed, it fails whoever recorded it."""
    payload = b"\x0c" * 4
    for signing, round_ in ((local_signing(4, job_id=8), ROUND), (SIGNING, ROUND + 1)):
        replayed = view(1, [0, 1])
        replayed.rounds[0].payloads[0] = payload
        replayed.rounds[0].signatures[0] = signing.sign(0, round_, payload)  # type: ignore[index]
        assert judged(1, {1: replayed}) is not None


def test_a_holder_could_have_signed_from_the_unit_before_the_slots_next_one():
    """A slot's successor starts from the slot's last committed unit and may go through that
    unit's rounds live; a rejection later sends the slot back to the unit before the rejected
    one. A committer without a known assignment could have signed from the start."""
    first, successor, third = (a.lower() for a in HANDED_OVER.addresses[:3])
    events = [
        SlotEvent("assigned", first),
        *(SlotEvent("committed", first, unit) for unit in range(3)),
        SlotEvent("assigned", successor),  # the slot's next unit is 3
        SlotEvent("committed", successor, 3),
        SlotEvent("committed", successor, 4),
    ]
    assert slot_tenures(events, {}) == {first: Tenure(0), successor: Tenure(2)}
    rejected = [*events, SlotEvent("rejected", "", 2)]  # units 2.. go again, from unit 1's end
    assert slot_tenures(rejected, {}) == {first: Tenure(0), successor: Tenure(1)}
    assert slot_tenures([*rejected, SlotEvent("assigned", third)], {}) == {
        first: Tenure(0),
        successor: Tenure(1),
        third: Tenure(1),
    }
    assert slot_tenures([SlotEvent("committed", third, 6)], {}) == {third: Tenure(0)}


def test_a_holder_that_left_could_have_signed_until_two_units_past_the_groups_commitments():
    """A rank takes part in unit u only once its daemon read the slots' holders after its slot
    committed unit u - 2: a provider that left a slot signed for it through two units past the
    last unit any slot of the job had first committed before it left, and no further."""
    first, successor = (a.lower() for a in HANDED_OVER.addresses[:2])
    events = [
        SlotEvent("assigned", first, 0, 1),
        *(SlotEvent("committed", first, unit, 2 + unit) for unit in range(3)),
        SlotEvent("left", first, 0, 6),  # removed: the group had first committed units 0..3
        SlotEvent("assigned", successor, 0, 8),
    ]
    commits = {0: 2, 1: 3, 2: 4, 3: 5, 4: 6, 5: 9}  # the earliest by any slot, per unit
    assert slot_tenures(events, commits) == {first: Tenure(0, 5), successor: Tenure(2)}
    # the group's commitment of unit 4 in the block it left: its daemon read that block
    assert slot_tenures(events, commits)[first].covers(5)
    assert not slot_tenures(events, commits)[first].covers(6)
    # it left before any unit was committed: units 0 and 1 run before any commitment
    assert slot_tenures(events[:1] + events[4:5], {0: 7}) == {first: Tenure(0, 1)}
    # assigned the slot again: to the end, from its first tenure
    again = [*events, SlotEvent("assigned", first, 0, 10)]
    assert slot_tenures(again, commits)[first] == Tenure(0)


def test_a_former_holders_signature_past_its_tenure_fails_the_recorder():
    """Slot 2's first holder left the slot and colludes with rank 1: rank 1 records a made-up
    payload as slot 2's in round 5, signed by the former holder. Where its tenure ended before
    round 5 the recorder fails; before, a former holder's signature stood to the job's end."""
    first, later = SIGNING.signers.addresses[2], SUCCESSOR
    record = view(1, [0, 1, 2], rank_2=b"\x12" * 4)  # signed with the first holder's key
    own = {r: a for r, a in SIGNING.signers.addresses.items() if r != 2} | {2: later}
    for last, problem in (
        (ROUND - 1, "round 5 records a payload from rank 2 that it did not sign"),
        (ROUND, None),
        (None, None),
    ):
        signers = RoundSigners(7, own, {2: {first: Tenure(0, last), later: Tenure(ROUND)}})
        assert record_problem(1, range(ROUND, ROUND + 1), {1: record}, signers, "round") == problem


def test_a_later_holders_signature_for_a_round_before_it_held_the_slot_fails_the_recorder():
    """Rank 1 records a made-up payload as slot 2's in round 5, signed by a provider that took
    slot 2 over only from round 6 on and colludes with the recorder: the recorder fails.
    Before, a signature of any provider the slot was ever assigned to stood for every round of
    the job."""
    first, later = SIGNING.signers.addresses[2], SUCCESSOR
    made_up = b"\x11" * 4
    record = view(1, [0, 1, 2], rank_2=made_up)
    by_later = sign_round(HANDED_OVER.keys[4], 7, ROUND, 2, made_up)
    record.rounds[0].signatures[2] = by_later  # type: ignore[index]
    own = {r: a for r, a in SIGNING.signers.addresses.items() if r != 2}
    for starts, problem in (
        (ROUND + 1, "round 5 records a payload from rank 2 that it did not sign"),
        (ROUND, None),
    ):
        signers = RoundSigners(7, own, {2: {first: Tenure(0), later: Tenure(starts)}})
        assert record_problem(1, range(ROUND, ROUND + 1), {1: record}, signers, "round") == problem


def test_the_journal_reads_each_holders_first_unit_from_the_chains_events(tmp_path):
    """Assignments, commitments and rejections, as the verifier's journal keeps them, give the
    tenures `slot_tenures` does, within a block assignments first."""
    first, later = (a.lower() for a in (SIGNING.signers.addresses[2], SUCCESSOR))
    journal = Journal(tmp_path / "journal.sqlite3")
    journal.hold_slot(7, 2, first, block=10)
    for unit, block in ((0, 11), (1, 12), (2, 20)):
        journal.add_unit(committed(first, unit, block), log_index=1)
    journal.hold_slot(7, 2, later, block=20)  # the same block as unit 2's commitment
    journal.add_unit(committed(later, 3, 22), log_index=1)
    assert journal.slot_tenures(7, 2, at_block=22) == {first: Tenure(0), later: Tenure(1)}
    journal.reject_unit(7, 2, 1, block=23, log_index=0)
    assert journal.slot_tenures(7, 2, at_block=22) == {first: Tenure(0), later: Tenure(1)}
    assert journal.slot_tenures(7, 2, at_block=23) == {first: Tenure(0), later: Tenure(0)}
    journal.close()


def test_the_journal_ends_a_tenure_where_its_holder_left_the_slot(tmp_path):
    """A removal (or release) ends the holder's tenure two units past the last unit any slot
    of the job first committed before it, and an assignment of the slot to it again reopens
    it; a verifier's journal keeps when each holder left and every assignment."""
    first, later = (a.lower() for a in (SIGNING.signers.addresses[2], SUCCESSOR))
    journal = Journal(tmp_path / "journal.sqlite3")
    journal.hold_slot(7, 2, first, block=10)
    for unit, block in ((0, 11), (1, 12), (2, 13)):
        journal.add_unit(committed(first, unit, block), log_index=1)
    journal.add_unit(committed(SIGNING.signers.addresses[1], 3, 14, slot=1), log_index=1)
    journal.leave_slot(7, 2, first, block=15, log_index=0)
    journal.hold_slot(7, 2, later, block=17)
    journal.add_unit(committed(later, 3, 18), log_index=1)
    assert journal.slot_tenures(7, 2, at_block=14) == {first: Tenure(0)}
    assert journal.slot_tenures(7, 2, at_block=18) == {first: Tenure(0, 5), later: Tenure(2)}
    journal.leave_slot(7, 2, later, block=19, log_index=0)
    journal.hold_slot(7, 2, first, block=19)  # assigned the slot again: to the end
    assert journal.slot_tenures(7, 2, at_block=19) == {first: Tenure(0), later: Tenure(2, 5)}
    journal.close()


def committed(provider: str, index: int, block: int, slot: int = 2) -> CommittedUnit:
    return CommittedUnit(
        job_id=7,
        slot=slot,
        index=index,
        provider=provider,
        cid="bafy",
        state_hash=b"\x00" * 32,
        gpu_seconds=1,
        amount=1,
        remaining_before=1,
        committed_at=0,
        block_number=block,
    )
