"""A DiLoCo rank's round judged by a verifier of another execution class: its local steps by the
segments it committed to (a disagreement narrowed to one segment re-run alone from the rank's own
state), its payload against the round's committed end. An honest round passes, which the exact
check would have slashed it for, and every cheat still fails. Other CPU classes (two threads,
oneDNN off) stand in for other hardware. In any class, a later round must start where the
slot's previous round leaves it, and a round's recorded exchange must hold what its members
signed."""

from __future__ import annotations

import copy
import json
from dataclasses import replace

import pytest
import torch

from marketplace.ipfs.importer import only_hash
from marketplace.protocol import trace
from marketplace.protocol.rank_bundle import (
    RecordedRound,
    load_rank_bundle,
    rank_bundle,
    update_sha256,
)
from node.distributed.job import first_unit
from node.distributed.rank_unit import rank_class
from node.distributed.signing import local_signing
from node.engine.limits import parameter_count
from verifier import rank_casebook
from verifier.errors import InputsUnavailable, Withheld
from verifier.rank_recompute import judge_rank
from verifier.recompute import Runner, UnitInputs, recompute

RANK, INDEX = 1, 1
EVERY = 8  # local steps per round: one-step segments


@pytest.fixture(scope="module")
def group(tmp_path_factory):
    """2 rounds of 8 local steps, top-k 10% at 2 bits, trained by its 3 ranks here; every
    rank's every round committed as its provider's node pins it, the last with the trained
    model."""
    spec = rank_casebook.group_spec("topk-2bit", units=2, every=EVERY, strategy="diloco")
    folder = tmp_path_factory.mktemp("diloco")
    rank_casebook.train_group(spec, folder)
    store: rank_casebook.Store = {}
    committed = {
        (rank, index): rank_casebook.committed_bundle(spec, folder, rank, index, store)
        for rank in range(3)
        for index in range(2)
    }
    return spec, store, committed


def judged(group, committed_bundle: tuple[str, bytes], **kwargs):
    """The verdict of a verifier that reproduces its own rank class only."""
    spec, store, _ = group
    own = rank_class(spec).class_id()
    kwargs.setdefault("reproduces", lambda class_id: class_id == own)
    kwargs.setdefault("states", rank_casebook.stored(store))
    return judge_rank(
        spec, RANK, INDEX, *committed_bundle, **kwargs, signers=rank_casebook.local_signers(spec)
    )


def honest_of(group, host: str) -> tuple[str, bytes]:
    spec, store, committed = group
    return rank_casebook.provide_round(spec, committed[RANK, INDEX][1], host, store)


def remade(committed_bundle: tuple[str, bytes], **fields) -> tuple[str, bytes]:
    """The bundle with `fields` (RankBundle's) in place of its own, under its commitment."""
    committed, bundle = committed_bundle
    loaded = load_rank_bundle(bundle)._replace(**fields)
    return committed, rank_bundle(*loaded)


def with_segments(committed_bundle: tuple[str, bytes], segments) -> tuple[str, bytes]:
    return remade(committed_bundle, segments=segments)


def test_a_rounds_bundle_names_the_state_of_every_segment_it_committed_to(group):
    _, store, committed = group
    loaded = load_rank_bundle(committed[RANK, INDEX][1])
    steps = [s["step"] for s in loaded.segments]
    assert steps == list(range(INDEX * EVERY + 1, (INDEX + 1) * EVERY + 1))  # one-step segments
    states = rank_casebook.stored(store)
    for segment in loaded.segments:
        assert states(segment).state_hash() == segment["state_hash"]
    end = states(loaded.segments[-1]).state
    # the round's trace binds its own segments only, each record in the next state's hash
    assert end["trace"] == [trace.leaf(s) for s in loaded.segments[:-1]]
    assert end["progress"]["step"] == (INDEX + 1) * EVERY


@pytest.mark.slow
@pytest.mark.parametrize("host", ["t2", "t1-nodnn"])
def test_an_honest_round_of_another_class_passes_where_the_exact_check_fails_it(group, host):
    honest = honest_of(group, host)
    verdict = judged(group, honest)
    assert verdict.passed is True, verdict.reason
    assert verdict.judgement["mode"] == "tolerant"
    assert verdict.judgement["decisive_share_of_bound"] <= 1.0
    exact = judged(group, honest, reproduces=lambda _: True)
    assert exact.passed is False  # its bits are not this class's


def test_a_round_recording_this_verifiers_class_is_judged_by_its_hash(group):
    _, _, committed = group
    verdict = judged(group, committed[RANK, INDEX])
    assert verdict.passed is True
    assert verdict.recomputed_state_hash == committed[RANK, INDEX][0]


@pytest.mark.slow
@pytest.mark.parametrize("cheat", sorted(rank_casebook.ROUND_CHEATS))
def test_each_cheat_in_a_round_fails_a_verifier_of_another_class(group, cheat):
    spec, store, committed = group
    other = committed[(RANK + 1) % 3, INDEX][1]
    made = rank_casebook.ROUND_CHEATS[cheat](spec, committed[RANK, INDEX][1], other, "t2", store)
    verdict = judged(group, made)
    assert verdict.passed is False, f"{cheat} passed: {verdict.reason}"


@pytest.mark.slow
def test_a_round_whose_states_cannot_be_had_fails(group):
    honest = honest_of(group, "t2")
    nothing = judged(group, honest, states=lambda _: None)
    assert nothing.passed is False
    assert "end state is not available" in nothing.reason
    # the end alone: the last segment is re-run alone from the state before it, which is missing
    end = load_rank_bundle(honest[1]).segments[-1]["cid"]
    _, store, _ = group
    only_end = judged(group, honest, states=rank_casebook.stored({end: store[end]}))
    assert only_end.passed is False
    assert "not available or not what it committed" in only_end.reason


def test_segment_records_that_are_not_the_rounds_fail(group):
    honest = honest_of(group, "t2")
    segments = load_rank_bundle(honest[1]).segments
    moved = copy.deepcopy(segments)
    moved[2]["loss"] += 1e-3  # a record the round's states do not bind
    assert (
        "not the ones the committed state hash binds"
        in judged(group, with_segments(honest, moved)).reason
    )
    assert (
        "not at the unit's segment boundaries"
        in judged(group, with_segments(honest, segments[1:])).reason
    )
    for malformed in ("segments", [["step", 9]], [{"step": 9}] * EVERY):
        verdict = judged(group, with_segments(honest, malformed))
        assert verdict.passed is False
        assert "no well-formed segment records" in verdict.reason


def test_a_round_that_records_no_segments_or_no_exchange_fails_in_any_class(group):
    """Without them the slot's next round's start could not be checked."""
    _, _, committed = group
    for honest in (committed[RANK, INDEX], honest_of(group, "t2")):
        for stripped in (with_segments(honest, None), remade(honest, rounds=None)):
            verdict = judged(group, stripped)
            assert verdict.passed is False
            assert (
                verdict.reason == "the round's bundle does not record its exchange and its segments"
            )


def test_a_round_whose_segments_are_not_what_its_re_run_commits_to_fails_the_exact_check(group):
    _, _, committed = group
    honest = committed[RANK, INDEX]
    segments = copy.deepcopy(load_rank_bundle(honest[1]).segments)
    segments[-1]["loss"] += 1e-3
    verdict = judged(group, with_segments(honest, segments))
    assert verdict.passed is False
    assert verdict.reason == "the re-run round commits to other segments"


def test_a_round_that_does_not_start_at_its_step_fails(group):
    committed, bundle = honest_of(group, "t2")
    loaded = load_rank_bundle(bundle)
    trainer = copy.deepcopy(loaded.unit.trainer)
    trainer["progress"]["step"] -= 1
    verdict = judged(group, remade((committed, bundle), unit=replace(loaded.unit, trainer=trainer)))
    assert verdict.passed is False
    assert verdict.reason == f"the round does not start at step {INDEX * EVERY}"


@pytest.mark.slow
def test_a_round_whose_residual_or_payload_does_not_fit_its_model_fails(group):
    committed, bundle = honest_of(group, "t2")
    loaded = load_rank_bundle(bundle)
    short = remade((committed, bundle), unit=replace(loaded.unit, residual=torch.zeros(7)))
    verdict = judged(group, short)
    assert verdict.passed is False
    assert verdict.reason == misshapen(group, "residual")
    cut = loaded.payload[:-1]
    _, made = remade((committed, bundle), payload=cut, rounds=rank_casebook.as_sent(loaded, cut))
    verdict = judged(group, (update_sha256(cut), made))
    assert verdict.passed is False
    assert verdict.reason.startswith("the payload cannot be checked")


@pytest.mark.slow
def test_recompute_fetches_a_rounds_segment_states_by_the_cids_its_records_carry(group, storage):
    """Through storage, as a verifier worker runs it: the bundle and the states its records
    name pinned to an IPFS node, the round judged by its segments."""
    spec, store, _ = group
    committed, bundle = honest_of(group, "t2")
    loaded = load_rank_bundle(bundle)
    segments = [s | {"cid": storage.add_bytes(store[s["cid"]])} for s in loaded.segments]
    pinned = with_segments((committed, bundle), segments)[1]
    spec_cid = storage.add_bytes(json.dumps(spec.model_dump(mode="json")).encode())
    inputs = UnitInputs(
        1, RANK, INDEX, "0x" + "11" * 20, spec_cid, storage.add_bytes(pinned), committed
    )
    verdict = recompute(inputs, storage, Runner())
    assert verdict.passed is True, verdict.reason
    assert verdict.judgement["mode"] == "tolerant"
    assert verdict.environment == {"class": rank_class(spec).to_dict()}
    # records naming no content: the round fails, rather than its verifier stopping
    nothing = [s | {"cid": "not-a-cid"} for s in segments]
    inputs = replace(inputs, cid=storage.add_bytes(with_segments((committed, bundle), nothing)[1]))
    verdict = recompute(inputs, storage, Runner())
    assert verdict.passed is False
    assert verdict.reason == "the round's end state is not available or not what it names"
    # records naming states that no node serves: its provider pins them on the replicas with
    # the bundle, so they are withheld, and the round fails once the patience is over
    unserved = [s | {"cid": str(only_hash(b"unserved %d" % i))} for i, s in enumerate(segments)]
    inputs = replace(inputs, cid=storage.add_bytes(with_segments((committed, bundle), unserved)[1]))
    with pytest.raises(Withheld, match="segment state"):
        recompute(inputs, storage, Runner())


def previous_round(group) -> tuple[str, bytes]:
    """The slot's committed round before the one judged here."""
    _, _, committed = group
    return committed[RANK, INDEX - 1]


@pytest.mark.slow
def test_a_previous_rounds_unserved_end_is_withheld_only_by_its_own_provider(group, storage):
    """The round's start is rebuilt from its previous round's end: a provider that committed
    both answers for serving it, and a slot's new provider does not (the round waits)."""
    spec, store, _ = group
    committed, bundle = honest_of(group, "t2")  # judged in another class, from its states
    served = [s | {"cid": storage.add_bytes(store[s["cid"]])} for s in segments_of(bundle)]
    before_hash, before = previous_round(group)
    gone = [s | {"cid": str(only_hash(b"gone %d" % i))} for i, s in enumerate(segments_of(before))]
    provider = "0x" + "11" * 20
    inputs = UnitInputs(
        1,
        RANK,
        INDEX,
        provider,
        storage.add_bytes(json.dumps(spec.model_dump(mode="json")).encode()),
        storage.add_bytes(with_segments((committed, bundle), served)[1]),
        committed,
        previous_cid=storage.add_bytes(with_segments((before_hash, before), gone)[1]),
        previous_state_hash=before_hash,
        previous_provider=provider,
    )
    with pytest.raises(Withheld, match="segment state"):
        recompute(inputs, storage, Runner())
    with pytest.raises(InputsUnavailable) as raised:
        recompute(replace(inputs, previous_provider="0x" + "22" * 20), storage, Runner())
    assert not isinstance(raised.value, Withheld)


def segments_of(bundle: bytes) -> list[dict]:
    return load_rank_bundle(bundle).segments


def test_a_later_round_passes_where_the_slots_previous_round_leaves_it(group):
    """Its start rebuilt from the previous round's committed end and recorded exchange: to the
    bit in the rank's class, within the bound in another."""
    _, _, committed = group
    exact = judged(group, committed[RANK, INDEX], previous=previous_round(group))
    assert exact.passed is True, exact.reason
    assert exact.recomputed_state_hash == committed[RANK, INDEX][0]
    within = judged(group, honest_of(group, "t2"), previous=previous_round(group))
    assert within.passed is True, within.reason
    assert within.judgement["mode"] == "tolerant"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("cheat", "host"),
    [("own_weights", "t1"), *((cheat, "t2") for cheat in sorted(rank_casebook.START_CHEATS))],
)
def test_a_later_round_that_starts_elsewhere_fails(group, cheat, host):
    """Each round trained honestly, and consistently, from a start that is not where the slot's
    previous round leaves it; judged exactly (t1, the rank's class) or within bounds (t2). The
    start is checked last, so the reason shows every other check passed."""
    spec, store, committed = group
    move = rank_casebook.START_CHEATS[cheat]
    made = rank_casebook.started_elsewhere(
        spec, committed[RANK, INDEX][1], previous_round(group)[1], host, store, move
    )
    assert made is not None, "each moves the rank's inputs in this group"
    verdict = judged(group, made, previous=previous_round(group))
    assert verdict.passed is False
    assert verdict.reason == "the unit does not start where the slot's previous unit ends"


def test_a_round_recording_a_payload_its_member_did_not_sign_fails(group):
    """Made-up payloads of the other members would make up the next round's start: their
    signatures give them the lie, with or without the other slots' bundles."""
    spec, store, committed = group
    peers = {rank: committed[rank, 0] for rank in range(3) if rank != RANK}
    honest = committed[RANK, 0]
    states = rank_casebook.stored(store)
    assert (
        judge_rank(
            spec, RANK, 0, *honest, peers, states=states, signers=rank_casebook.local_signers(spec)
        ).passed
        is True
    )
    loaded = load_rank_bundle(honest[1])
    members, payloads, signatures = loaded.rounds[0]
    other = members.index((RANK + 1) % 3)
    payloads = [p[:-1] + bytes([p[-1] ^ 1]) if i == other else p for i, p in enumerate(payloads)]
    made = remade(honest, rounds=[RecordedRound(members, payloads, signatures)])
    for voters in (peers, None):
        verdict = judge_rank(
            spec, RANK, 0, *made, voters, signers=rank_casebook.local_signers(spec)
        )
        assert verdict.passed is False
        assert verdict.reason == (
            f"round 0 records a payload from rank {(RANK + 1) % 3} that it did not sign"
        )
    # and its own payload recorded as other than it committed
    own = members.index(RANK)
    payloads = [p + b"\x00" if i == own else p for i, p in enumerate(loaded.rounds[0].payloads)]
    verdict = judge_rank(
        spec,
        RANK,
        0,
        *remade(honest, rounds=[RecordedRound(members, payloads, signatures)]),
        signers=rank_casebook.local_signers(spec),
    )
    assert verdict.reason == "the round records another payload from the rank than it sent"


def outside_the_group(committed_bundle: tuple[str, bytes]) -> tuple[str, bytes]:
    """The round with a member 99 added to its exchange, sending what member 0 sent."""
    members, payloads, _ = load_rank_bundle(committed_bundle[1]).rounds[0]
    added = RecordedRound([*members, 99], [*payloads, payloads[0]])
    return remade(committed_bundle, rounds=[added])


def withheld(committed_bundle: tuple[str, bytes]) -> tuple[str, bytes]:
    """The round with its segment records naming states nobody serves."""
    segments = load_rank_bundle(committed_bundle[1]).segments
    return with_segments(committed_bundle, [s | {"cid": "0" * 64} for s in segments])


def test_a_round_recording_members_outside_the_group_fails(group):
    """A member the group does not have, with a payload of the rank's choosing, or the members
    left out for made-up ones: either would make the slot's next round start from an aggregate
    of the rank's choosing."""
    spec, _, committed = group
    peers = {rank: committed[rank, 0] for rank in range(3) if rank != RANK}
    honest = committed[RANK, 0]
    members, payloads, _ = load_rank_bundle(honest[1]).rounds[0]
    own, made_up = payloads[members.index(RANK)], payloads[(members.index(RANK) + 1) % 3]
    made_up_only = remade(honest, rounds=[RecordedRound([RANK, 97, 98, 99], [own, *[made_up] * 3])])
    for made in (outside_the_group(honest), made_up_only):
        for voters in (peers, None):
            verdict = judge_rank(
                spec,
                RANK,
                0,
                *made,
                voters,
                states=rank_casebook.stored({}),
                signers=rank_casebook.local_signers(spec),
            )
            assert verdict.passed is False
            assert verdict.reason.startswith("an exchange records [")
            assert verdict.reason.endswith("as its members, not ranks of the group")


def test_a_round_leaving_members_out_is_judged_on_its_own_work(group):
    """Its own update alone as the round's aggregate. The board's host can hide members from
    an honest rank, so who made up a round is not judged: the rank's next round must start
    from the aggregate it recorded, and its work is re-run from there."""
    spec, store, committed = group
    peers = {rank: committed[rank, 0] for rank in range(3) if rank != RANK}
    honest = committed[RANK, 0]
    members, payloads, signatures = load_rank_bundle(honest[1]).rounds[0]
    own = members.index(RANK)
    alone = remade(honest, rounds=[RecordedRound([RANK], [payloads[own]], [signatures[own]])])
    states = rank_casebook.stored(store)
    for voters in (None, peers):
        verdict = judge_rank(
            spec, RANK, 0, *alone, voters, states=states, signers=rank_casebook.local_signers(spec)
        )
        assert verdict.passed is True


def test_a_round_whose_end_cannot_be_had_fails_in_another_class(group):
    """The slot's next round is rebuilt from the round's committed end. A verifier of the
    round's class re-runs the round to that very state (it commits to the very same segments);
    one of another class must be served it, as the state its last record names."""
    _, _, committed = group
    assert judged(group, withheld(committed[RANK, INDEX])).passed is True
    other = honest_of(group, "t2")
    segments = load_rank_bundle(other[1]).segments
    other_end = [*segments[:-1], segments[-1] | {"cid": segments[-2]["cid"]}]
    for made in (withheld(other), with_segments(other, other_end)):
        verdict = judged(group, made)
        assert verdict.passed is False and "end state is not available" in verdict.reason


@pytest.mark.slow
def test_a_round_whose_exchange_does_not_aggregate_fails_in_any_class(group):
    """Another member's payload recorded a byte short: nothing the next round's start can be
    rebuilt from, though the round's own steps and payload are honest."""
    for honest in (group[2][RANK, INDEX], honest_of(group, "t2")):
        members, payloads, signatures = load_rank_bundle(honest[1]).rounds[0]
        other = members.index((RANK + 1) % 3)
        cut = [p[:-1] if i == other else p for i, p in enumerate(payloads)]
        # signed by its member, so that it is the rebuilding that fails
        signatures[other] = local_signing(3).sign(members[other], INDEX, cut[other])
        made = remade(honest, rounds=[RecordedRound(members, cut, signatures)])
        verdict = judged(group, made)
        assert verdict.passed is False
        assert verdict.reason.startswith("the slot's next round cannot be rebuilt from the round")


@pytest.mark.slow
@pytest.mark.parametrize("host", ["t1", "t2"])
def test_a_round_after_its_providers_round_that_cannot_be_rebuilt_fails(group, host):
    """Its previous round withholds its end, or records a member outside the group: the round
    then started from weights of its own (no outer step) and passed, not held to any start. Its
    provider answers for both rounds; a slot's new provider (own_previous False) does not."""
    spec, store, committed = group
    previous = previous_round(group)
    made = rank_casebook.started_elsewhere(
        spec, committed[RANK, INDEX][1], previous[1], host, store, rank_casebook.own_weights
    )
    assert made is not None
    for unbuildable in (withheld(previous), outside_the_group(previous)):
        verdict = judged(group, made, previous=unbuildable, own_previous=True)
        assert verdict.passed is False
        assert verdict.reason.startswith(
            "the slot's previous unit, the provider's own, cannot be rebuilt: "
        )
        assert judged(group, made, previous=unbuildable).passed is True
    honest = committed[RANK, INDEX] if host == "t1" else honest_of(group, host)
    assert judged(group, honest, previous=previous, own_previous=True).passed is True


STRAY = "the unit does not start at its rank's step, shard and data position"


def moved_start(spec, how: str):
    """A start move (rank_casebook.StartMove): the slot's first round's start with its step
    moved on to this round's (a copy of a state whose segments are pinned already, which trains
    nothing new), or this round's start on the next rank's data."""

    def move(unit, end):
        if how == "earlier":
            first = first_unit(spec, unit.rank).trainer
            progress = first["progress"] | {"step": unit.trainer["progress"]["step"]}
            return replace(unit, trainer=first | {"progress": progress})
        progress = unit.trainer["progress"] | {"stream": (unit.rank + 1) % 3}
        return replace(unit, trainer=unit.trainer | {"progress": progress})

    return move


@pytest.mark.slow
@pytest.mark.parametrize("how", ["earlier", "shard"])
def test_a_round_after_another_providers_round_that_cannot_be_rebuilt_starts_at_its_place(
    group, how
):
    """A slot's new provider is not held to where a previous round it did not commit leaves
    the rank when that round cannot be rebuilt, but its round still starts at the rank's step,
    shard and data position: from a copy of an earlier state, or on another rank's data, it
    fails."""
    spec, store, committed = group
    previous = previous_round(group)
    made = rank_casebook.started_elsewhere(
        spec, committed[RANK, INDEX][1], previous[1], "t2", store, moved_start(spec, how)
    )
    assert made is not None
    for unbuildable in (withheld(previous), outside_the_group(previous)):
        verdict = judged(group, made, previous=unbuildable)
        assert verdict.passed is False
        assert verdict.reason == STRAY


def inf_step(committed_bundle: tuple[str, bytes], where: str) -> tuple[str, bytes]:
    """The bundle with `where`'s step infinite: its first segment record's, or its trainer's."""
    loaded = load_rank_bundle(committed_bundle[1])
    if where == "segment":
        segments = copy.deepcopy(loaded.segments)
        segments[0]["step"] = float("inf")
        return with_segments(committed_bundle, segments)
    trainer = copy.deepcopy(loaded.unit.trainer)
    trainer["progress"]["step"] = float("inf")
    return remade(committed_bundle, unit=replace(loaded.unit, trainer=trainer))


@pytest.mark.slow
@pytest.mark.parametrize("where", ["segment", "trainer"])
def test_hostile_numbers_fail_their_round_rather_than_stopping_its_verifier(group, where):
    """Numbers no rank records (OverflowError where an int is made of them) escaped the
    verifier, which then posted no verdict on the round."""
    for honest in (group[2][RANK, INDEX], honest_of(group, "t2")):
        assert judged(group, inf_step(honest, where)).passed is False


def test_a_previous_round_with_hostile_numbers_fails_only_its_own_providers_next_round(group):
    """Its segments are read to rebuild the next round's start: not held to it, unless the
    next round is its provider's too."""
    hostile = inf_step(previous_round(group), "segment")
    honest = group[2][RANK, INDEX]
    assert judged(group, honest, previous=hostile).passed is True
    assert judged(group, honest, previous=hostile, own_previous=True).passed is False


def test_a_failure_to_fetch_is_raised_and_anything_else_fails_the_round(group, caplog):
    """What fetching a state raises says nothing of the round (recompute retries it or judges
    it withheld); anything else its inputs make the verifier raise fails the round, logged."""

    def unserved(_segment):
        raise InputsUnavailable("no node serves it")

    def unexpected(_segment):
        raise ZeroDivisionError("a state its provider made")

    other = honest_of(group, "t2")  # judged from its states
    with pytest.raises(InputsUnavailable):
        judged(group, other, states=unserved)
    verdict = judged(group, other, states=unexpected)
    assert verdict.passed is False
    assert verdict.reason.endswith("a state its provider made")
    assert "a rank bundle's inputs raised ZeroDivisionError" in caplog.text


def misshapen(group, field: str) -> str:
    """The verdict's reason on a bundle whose `field` is not what a rank saves."""
    spec, _, _ = group
    return (
        f"the unit's {field} is not a finite float32 vector of {parameter_count(spec)} parameters"
    )


def test_a_previous_round_whose_residual_its_rebuild_would_broadcast_fails_its_providers_next(
    group,
):
    """A residual of (M, 1) is broadcast by the rebuild into an (M, N) vector: with a large M
    the verifier's worker runs out of memory and the round is never judged (M is 4 here). Not
    held to the round unless the round before is its provider's too."""
    previous = previous_round(group)
    loaded = load_rank_bundle(previous[1])
    column = remade(previous, unit=replace(loaded.unit, residual=torch.zeros(4, 1)))
    for honest in (group[2][RANK, INDEX], honest_of(group, "t2")):
        verdict = judged(group, honest, previous=column, own_previous=True)
        assert verdict.passed is False
        assert verdict.reason == (
            "the slot's previous unit, the provider's own, cannot be rebuilt: "
            + misshapen(group, "residual")
        )
        assert judged(group, honest, previous=column).passed is True


def test_a_last_rounds_trained_model_must_be_where_the_round_leaves_the_rank(group):
    """The user's model is read from the ranks' last bundles: a rank that trains its round
    honestly but commits other weights there fails, in its class or another (zeros, or its
    round's own end, the outer step skipped); a round before the last holds none."""
    spec, store, committed = group
    honest = committed[RANK, INDEX]
    loaded = load_rank_bundle(honest[1])
    own_end = rank_casebook.stored(store)(loaded.segments[-1]).state["model"]
    zeros = {name: torch.zeros_like(t) for name, t in loaded.weights.items()}
    for bundle in (honest, honest_of(group, "t2")):
        assert judged(group, bundle, previous=previous_round(group)).passed is True
        for weights in (zeros, own_end):
            verdict = judged(group, remade(bundle, weights=weights), previous=previous_round(group))
            assert verdict.passed is False
            assert (
                verdict.reason == "the bundle's trained model is not where the unit leaves the rank"
            )
    early = remade(previous_round(group), weights=loaded.weights)
    verdict = judge_rank(
        spec,
        RANK,
        0,
        *early,
        states=rank_casebook.stored(store),
        signers=rank_casebook.local_signers(spec),
    )
    assert verdict.passed is False
    assert verdict.reason == "the bundle holds a trained model, but its unit is not the job's last"
