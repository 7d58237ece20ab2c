"""A group job's unit judged from its rank bundle: an honest rank passes, any other is named."""

from __future__ import annotations

import functools
from dataclasses import replace
from pathlib import Path

import pytest
import torch
import yaml

from marketplace.protocol.rank_bundle import (
    RankUnit,
    RecordedRound,
    load_rank_bundle,
    rank_bundle,
    update_sha256,
)
from marketplace.protocol.tagged import dump_tagged, load_tagged
from marketplace.protocol.units import RANK_BUNDLES
from node.distributed.ddp import train_ddp
from node.distributed.diloco import rerun_diloco_unit
from node.distributed.exchange import recorded_round, sent_in
from node.distributed.group import rank_trainer
from node.distributed.job import first_unit, group_config, run_rank_unit
from node.distributed.rank_unit import unit_path
from node.distributed.signing import local_signing
from node.engine import parse_spec
from node.engine.limits import parameter_count
from verifier import rank_casebook
from verifier.rank_recompute import judge_rank

SPECS = Path(__file__).resolve().parents[2] / "node" / "specs"
SPEC_TEXT = (SPECS / "tiny-diloco-3.yaml").read_text()
DDP_TEXT = (SPECS / "tiny-ddp-3.yaml").read_text()


@pytest.fixture(scope="module")
def spec():
    """The e2e spec with 2-step rounds, so a re-run takes a fraction of a second."""
    return parse_spec(SPEC_TEXT.replace("inner_steps: 20", "inner_steps: 2"))


@pytest.fixture(scope="module")
def honest(spec):
    """Rank 1's first round, its inputs as the rank saves them and the payload it sends."""
    trainer, _ = rank_trainer(spec, 1)
    unit = RankUnit(1, 0, trainer.state(), None)
    return unit, run_rank_unit(spec, group_config(spec), unit).payload


# the provider's IPFS node, standing in: the segment states rounds' records name
STORE: rank_casebook.Store = {}


def round_bundle(spec, unit: RankUnit) -> tuple[str, bytes]:
    """The commitment and bundle of a round from `unit`'s inputs, its exchange and segments
    recorded as a rank alone in its group records them, its segment states pinned."""
    segments = []

    def keep(segment, state):
        segments.append(segment | {"cid": rank_casebook.pin(STORE, state.to_bytes())})

    payload, _ = rerun_diloco_unit(spec, group_config(spec), unit, on_segment=keep)
    rounds = [RecordedRound([unit.rank], [payload])]
    return update_sha256(payload), rank_bundle(unit, payload, rounds=rounds, segments=segments)


def judged_round(spec, committed: str, bundle: bytes):
    """The verdict on rank 1's round 0, its segment states fetched from the store."""
    return judge_rank(
        spec,
        1,
        0,
        committed,
        bundle,
        states=rank_casebook.stored(STORE),
        signers=rank_casebook.local_signers(spec),
    )


def test_an_honest_round_reproduces_its_commitment(spec, honest):
    unit, payload = honest
    verdict = judged_round(spec, *round_bundle(spec, unit))
    assert verdict.passed is True
    assert verdict.recomputed_state_hash == update_sha256(payload)


def test_a_rank_that_sent_another_update_is_named(spec, honest):
    unit, _ = honest
    lazy = RankUnit(1, 0, unit.trainer, unit.residual)
    trainer, _ = rank_trainer(spec, 1)
    trainer.load(unit.trainer)
    # It skips a local step of the round and sends the update from there.
    trainer.apply(trainer.forward_backward()[0])
    committed, cheat = round_bundle(spec, RankUnit(1, 0, trainer.state(), None))
    claimed = load_rank_bundle(cheat)._replace(unit=lazy)
    verdict = judge_rank(
        spec, 1, 0, committed, rank_bundle(*claimed), signers=rank_casebook.local_signers(spec)
    )
    assert verdict.passed is False
    assert verdict.reason == "the re-run unit sends a different payload"


def test_a_first_round_that_does_not_start_from_the_seed_is_named(spec, honest):
    unit, _ = honest
    trainer, _ = rank_trainer(spec, 1)
    trainer.load(unit.trainer)
    trainer.apply(trainer.forward_backward()[0])  # a head start of one step
    ahead = RankUnit(1, 0, trainer.state(), None)
    verdict = judged_round(spec, *round_bundle(spec, ahead))
    assert verdict.passed is False
    assert verdict.reason == "the unit does not start from the job's seed"


def test_a_bundle_for_another_rank_or_payload_fails(spec, honest):
    unit, payload = honest
    committed = update_sha256(payload)
    assert (
        judge_rank(
            spec,
            2,
            0,
            committed,
            rank_bundle(unit, payload),
            signers=rank_casebook.local_signers(spec),
        ).passed
        is False
    )
    other = judge_rank(
        spec,
        1,
        0,
        committed,
        rank_bundle(unit, payload + b"\x00"),
        signers=rank_casebook.local_signers(spec),
    )
    assert other.reason == "the pinned payload is not the committed one"
    assert (
        judge_rank(spec, 1, 0, committed, b"junk", signers=rank_casebook.local_signers(spec)).passed
        is False
    )


BYTE = torch.zeros(1, dtype=torch.uint8)


@pytest.mark.parametrize(
    "fields",
    [
        {"rounds": "x"},
        {"rounds": [{"members": 5, "payloads": []}]},
        {"rounds": [{"members": [1, 0], "payloads": [BYTE]}]},
        {"rounds": [{"members": [1, 1], "payloads": [BYTE, BYTE]}]},
        {"rounds": [{"members": [True], "payloads": [BYTE]}]},
        {"payload": "abc"},
        {"payload": torch.zeros(2, 2, dtype=torch.uint8)},
        {"rank": "1"},
        {"trainer": 3},
        {"residual": [0.0]},
        {"weights": {"w": "x"}},
        {"trainer": {}},
        {"trainer": {"model": 3}},
    ],
)
def test_a_bundle_of_malformed_fields_fails_rather_than_stopping_its_verifier(spec, honest, fields):
    """Fields of other types than a rank saves, as a hostile provider may commit them."""
    unit, _ = honest
    committed, bundle = round_bundle(spec, unit)
    made = dump_tagged(RANK_BUNDLES.tag, load_tagged(bundle, RANK_BUNDLES.tag) | fields)
    verdict = judge_rank(spec, 1, 0, committed, made, signers=rank_casebook.local_signers(spec))
    assert verdict.passed is False
    assert verdict.reason.startswith(
        ("committed rank bundle unreadable", "the bundle cannot be re-run")
    ), verdict.reason


def with_inputs(committed_bundle: tuple[str, bytes], **fields) -> tuple[str, bytes]:
    """The bundle with its unit's `fields` (RankUnit's) in place of its own, under its
    commitment."""
    committed, bundle = committed_bundle
    loaded = load_rank_bundle(bundle)
    return committed, rank_bundle(*loaded._replace(unit=replace(loaded.unit, **fields)))


def with_weights(committed_bundle: tuple[str, bytes], weights) -> tuple[str, bytes]:
    """The bundle holding `weights` as its trained model, under its commitment."""
    committed, bundle = committed_bundle
    return committed, rank_bundle(*load_rank_bundle(bundle)._replace(weights=weights))


def misshapen(spec, field: str) -> str:
    """The verdict's reason on a bundle whose `field` is not what a rank saves."""
    return (
        f"the unit's {field} is not a finite float32 vector of {parameter_count(spec)} parameters"
    )


# A residual of (M, 1) is broadcast by the re-run into an (M, N) vector: with a large M the
# verifier's worker runs out of memory and the unit is never judged (M is 4 here).
@pytest.mark.parametrize(
    ("field", "held"),
    [
        ("residual", lambda n: torch.zeros(4, 1)),
        ("residual", lambda n: torch.zeros(n + 1)),
        ("residual", lambda n: torch.zeros(n, dtype=torch.float64)),
        ("momentum", lambda n: torch.zeros(4, 1)),
        ("momentum", lambda n: torch.full((n,), float("nan"))),
    ],
    ids=["residual-column", "residual-long", "residual-float64", "momentum-column", "momentum-nan"],
)
def test_inputs_a_rank_never_saves_fail_before_anything_is_re_run(spec, honest, field, held):
    unit, _ = honest
    made = with_inputs(round_bundle(spec, unit), **{field: held(parameter_count(spec))})
    verdict = judged_round(spec, *made)
    assert verdict == (False, misshapen(spec, field), None, None)


def test_a_single_node_spec_cannot_be_judged_as_a_rank(honest):
    single = parse_spec(SPEC_TEXT.split("distributed:")[0] + "reproducibility: {seed: 1}\n")
    unit, payload = honest
    verdict = judge_rank(
        single,
        1,
        0,
        update_sha256(payload),
        rank_bundle(unit, payload),
        signers=rank_casebook.local_signers(single),
    )
    assert verdict.passed is None


def doubled(rank: int, gradient):
    """What rank 1 sends instead of its gradient in the ddp group below."""
    return gradient * 2 if rank == 1 else gradient


@pytest.fixture(scope="module")
def ddp_run(tmp_path_factory):
    """The ddp e2e spec cut to 2 units of 2 steps, trained by its 3 ranks, rank 1 cheating: the
    spec and the folder of every rank's inputs and every round's payloads."""
    raw = yaml.safe_load(DDP_TEXT)
    raw["training"] |= {"max_steps": 4, "warmup_steps": 1}
    raw["checkpoint"]["every"] = 2
    spec = parse_spec(raw)
    folder = tmp_path_factory.mktemp("ddp")
    train_ddp(spec, replace(group_config(spec), updates_dir=str(folder)), tamper=doubled)
    return spec, folder


def ddp_bundle(spec, folder: Path, rank: int, index: int = 1) -> tuple[str, bytes]:
    """The commitment and bundle of `rank`'s unit `index` (by default the job's last), as its
    provider pins them."""
    return rank_casebook.committed_bundle(spec, folder, rank, index)


def provided(spec, unit: RankUnit, rounds: list[RecordedRound]) -> tuple[str, bytes]:
    """The commitment and bundle of the job's last unit as a rank makes them from `unit` and
    the steps `rounds` records: what it sends, and the weights it is left at."""
    rerun = run_rank_unit(spec, group_config(spec), unit, rounds)
    weights = rerun.following.trainer["model"]
    return rerun.sha256, rank_bundle(unit, rerun.payload, weights, rounds)


def peers_of(spec, folder: Path, rank: int, **bundles: tuple[str, bytes]):
    """The other ranks' commitments and bundles of unit 1, some of them replaced (`rank_<n>`)."""
    return {
        peer: bundles.get(f"rank_{peer}") or ddp_bundle(spec, folder, peer)
        for peer in range(3)
        if peer != rank
    }


def recording(
    committed_bundle: tuple[str, bytes], step: int, sender: int, data: bytes, signed: bool = False
):
    """The bundle with its record of what `sender` sent at the unit's `step` replaced by `data`,
    under `sender`'s signature on it if `signed`."""
    committed, bundle = committed_bundle
    loaded = load_rank_bundle(bundle)
    members, payloads, signatures = loaded.rounds[step]
    payloads[members.index(sender)] = data
    if signed:
        exchange = 2 * loaded.unit.round_ + step
        signatures[members.index(sender)] = local_signing(3).sign(sender, exchange, data)
    return committed, rank_bundle(*loaded)


@pytest.mark.slow
def test_an_honest_ddp_unit_reproduces_from_its_recorded_rounds(ddp_run):
    spec, folder = ddp_run
    committed, bundle = ddp_bundle(spec, folder, rank=2)
    previous = ddp_bundle(spec, folder, rank=2, index=0)
    for peers in (None, peers_of(spec, folder, 2)):
        verdict = judge_rank(
            spec,
            2,
            1,
            committed,
            bundle,
            peers,
            previous,
            signers=rank_casebook.local_signers(spec),
        )
        assert verdict.passed is True
        assert verdict.recomputed_state_hash == committed


@pytest.mark.slow
def test_a_ddp_unit_that_does_not_start_where_the_previous_one_ends_is_named(ddp_run):
    spec, folder = ddp_run
    # Rank 2 skips its first unit: it runs its second from the seed, with records that leave
    # itself out, so the bundle re-runs to its commitment. From the seed's step and data
    # position it fails alone; moved on to the unit's, only where the previous unit ends tells.
    seed = first_unit(spec, 2)
    recorded = [recorded_round(folder, step) for step in (2, 3)]
    rounds = [RecordedRound(r.members[:2], r.payloads[:2], r.signatures[:2]) for r in recorded]
    committed, bundle = provided(spec, replace(seed, round_=1), rounds)
    verdict = judge_rank(spec, 2, 1, committed, bundle, signers=rank_casebook.local_signers(spec))
    assert verdict.reason == "the unit does not start at its rank's step, shard and data position"
    moved = seed.trainer["progress"] | {"step": 2, "cursor": 2}
    unit = replace(seed, round_=1, trainer=seed.trainer | {"progress": moved})
    committed, bundle = provided(spec, unit, rounds)
    assert (
        judge_rank(spec, 2, 1, committed, bundle, signers=rank_casebook.local_signers(spec)).passed
        is True
    )  # alone, it passes
    previous = ddp_bundle(spec, folder, rank=2, index=0)
    verdict = judge_rank(
        spec, 2, 1, committed, bundle, previous=previous, signers=rank_casebook.local_signers(spec)
    )
    assert verdict.passed is False
    assert verdict.reason == "the unit does not start where the slot's previous unit ends"


@pytest.mark.slow
def test_a_ddp_rank_recording_what_another_did_not_sign_fails(ddp_run):
    spec, folder = ddp_run
    # Rank 2 records a made-up payload from rank 0 at the unit's last step: it changes only the
    # weights after the unit, so the re-run still sends what rank 2 committed. Rank 0 signed
    # no such payload, which fails rank 2 with or without the others' bundles.
    made_up = sent_in(folder, range(2, 3), 0)
    committed, bundle = recording(ddp_bundle(spec, folder, rank=2), 1, 0, made_up)
    for peers in (None, peers_of(spec, folder, 2)):
        verdict = judge_rank(
            spec, 2, 1, committed, bundle, peers, signers=rank_casebook.local_signers(spec)
        )
        assert verdict.passed is False
        assert verdict.reason == "step 3 records a payload from rank 0 that it did not sign"


@pytest.mark.slow
def test_a_ddp_rank_that_sent_the_group_another_payload_than_it_committed_is_named(ddp_run):
    spec, folder = ddp_run
    # Rank 0 commits its honest payloads but sent ranks 1 and 2 something else at step 3,
    # which it signed.
    sent = sent_in(folder, range(2, 3), 0)
    received = {
        f"rank_{rank}": recording(ddp_bundle(spec, folder, rank), 1, 0, sent, signed=True)
        for rank in (1, 2)
    }
    committed, bundle = ddp_bundle(spec, folder, rank=0)
    verdict = judge_rank(
        spec,
        0,
        1,
        committed,
        bundle,
        peers_of(spec, folder, 0, **received),
        signers=rank_casebook.local_signers(spec),
    )
    assert verdict.passed is False
    assert verdict.reason == (
        "rank 0 signed another payload in step 3 than it committed, and rank 1 received it"
    )
    # one record of it names rank 0; the ranks that recorded what rank 0 signed are not named
    alone = judge_rank(
        spec,
        0,
        1,
        committed,
        bundle,
        {1: received["rank_1"]},
        signers=rank_casebook.local_signers(spec),
    )
    assert alone.passed is False
    # rank 2 trained on from what it received
    recorded = load_rank_bundle(received.pop("rank_2")[1])
    committed, bundle = provided(spec, recorded.unit, recorded.rounds)
    peers = peers_of(spec, folder, 2, **received)
    assert (
        judge_rank(
            spec, 2, 1, committed, bundle, peers, signers=rank_casebook.local_signers(spec)
        ).passed
        is True
    )
    assert (
        judge_rank(
            spec, 2, 1, committed, bundle, {0: peers[0]}, signers=rank_casebook.local_signers(spec)
        ).passed
        is True
    )


@pytest.mark.slow
def test_a_ddp_rank_that_sent_another_gradient_is_named(ddp_run):
    spec, folder = ddp_run
    committed, bundle = ddp_bundle(spec, folder, rank=1)
    verdict = judge_rank(spec, 1, 1, committed, bundle, signers=rank_casebook.local_signers(spec))
    assert verdict.passed is False
    assert "round 2 records another payload from rank 1" in verdict.reason


@pytest.mark.slow
def test_a_ddp_bundle_must_record_every_round_of_its_unit(ddp_run):
    spec, folder = ddp_run
    committed, bundle = ddp_bundle(spec, folder, rank=2)
    unit, payload, _, rounds, *_ = load_rank_bundle(bundle)
    short = judge_rank(
        spec,
        2,
        1,
        committed,
        rank_bundle(unit, payload, rounds=rounds[:1]),
        signers=rank_casebook.local_signers(spec),
    )
    assert short.reason == "the bundle records 1 rounds, not 2"
    bare = judge_rank(
        spec, 2, 1, committed, rank_bundle(unit, payload), signers=rank_casebook.local_signers(spec)
    )
    assert bare.passed is False and "rounds it took part in" in bare.reason


def with_member_99(committed_bundle: tuple[str, bytes]) -> tuple[str, bytes]:
    """The bundle with a member 99 added to every step, sending what member 0 sent."""
    committed, bundle = committed_bundle
    loaded = load_rank_bundle(bundle)
    rounds = [RecordedRound([*m, 99], [*p, p[0]]) for m, p, _ in loaded.rounds]
    return committed, rank_bundle(*loaded._replace(rounds=rounds))


@pytest.mark.slow
def test_a_ddp_rank_recording_members_outside_the_group_fails(ddp_run):
    """A made-up member's payload is part of every step's aggregate; no signer names it."""
    spec, folder = ddp_run
    made = with_member_99(ddp_bundle(spec, folder, rank=2))
    for peers in (None, peers_of(spec, folder, 2)):
        verdict = judge_rank(spec, 2, 1, *made, peers, signers=rank_casebook.local_signers(spec))
        assert verdict.passed is False
        assert verdict.reason == (
            "an exchange records [0, 1, 2, 99] as its members, not ranks of the group"
        )


@pytest.mark.slow
def test_a_ddp_rank_leaving_members_out_of_its_steps_is_judged_on_its_own_steps(ddp_run):
    """Its steps' aggregates made of the others' payloads alone, re-run to its commitment: the
    board's host can hide members from an honest rank, so who made up a step is not judged;
    what the rank did with what it recorded is."""
    spec, folder = ddp_run
    unit = RankUnit.load(unit_path(folder, 1, 2))
    kept = [recorded_round(folder, step) for step in (2, 3)]
    rounds = [RecordedRound(r.members[:2], r.payloads[:2], r.signatures[:2]) for r in kept]
    made = provided(spec, unit, rounds)
    verdict = judge_rank(spec, 2, 1, *made, signers=rank_casebook.local_signers(spec))
    assert verdict.passed is True


@pytest.mark.slow
def test_a_ddp_unit_after_its_providers_unit_that_cannot_be_rebuilt_fails(ddp_run):
    """Its provider answers for its previous unit too; a slot's new provider does not."""
    spec, folder = ddp_run
    committed, bundle = ddp_bundle(spec, folder, rank=2)
    unbuildable = with_member_99(ddp_bundle(spec, folder, rank=2, index=0))
    own = judge_rank(
        spec,
        2,
        1,
        committed,
        bundle,
        previous=unbuildable,
        own_previous=True,
        signers=rank_casebook.local_signers(spec),
    )
    assert own.passed is False
    assert own.reason.startswith("the slot's previous unit, the provider's own, cannot be rebuilt")
    assert (
        judge_rank(
            spec,
            2,
            1,
            committed,
            bundle,
            previous=unbuildable,
            signers=rank_casebook.local_signers(spec),
        ).passed
        is True
    )
    previous = ddp_bundle(spec, folder, rank=2, index=0)
    verdict = judge_rank(
        spec,
        2,
        1,
        committed,
        bundle,
        previous=previous,
        own_previous=True,
        signers=rank_casebook.local_signers(spec),
    )
    assert verdict.passed is True


@pytest.mark.slow
def test_a_record_made_up_in_a_providers_previous_unit_fails_its_next_one(ddp_run):
    """Rank 2 records a made-up payload from rank 0 at its unit 0's last step (a unit the
    sample passed over) and trains unit 1 from where that leaves it. Unit 1, judged, starts
    where unit 0 as committed leaves the rank, and passed; now the records it is rebuilt from
    must hold too, so its provider fails. A slot's new provider does not answer for them."""
    spec, folder = ddp_run
    signers = rank_casebook.local_signers(spec)
    made_up = sent_in(folder, range(2, 3), 0)
    previous = recording(ddp_bundle(spec, folder, rank=2, index=0), 1, 0, made_up)
    before = load_rank_bundle(previous[1])
    following = run_rank_unit(spec, group_config(spec), before.unit, before.rounds).following
    assert following is not None
    recorded = [recorded_round(folder, step) for step in (2, 3)]
    rounds = [RecordedRound(r.members[:2], r.payloads[:2], r.signatures[:2]) for r in recorded]
    committed, bundle = provided(spec, following, rounds)
    own = judge_rank(
        spec, 2, 1, committed, bundle, previous=previous, own_previous=True, signers=signers
    )
    assert own.passed is False
    assert own.reason == (
        "the slot's previous unit, the provider's own, cannot be rebuilt: its records fail it: "
        "step 1 records a payload from rank 0 that it did not sign"
    )
    assert judge_rank(spec, 2, 1, committed, bundle, previous=previous, signers=signers).passed


@pytest.mark.slow
def test_a_ddp_residual_its_re_run_would_broadcast_fails_before_it_runs(ddp_run):
    """In the unit judged, or in its provider's previous unit its start is rebuilt from, whether
    that is re-run exactly or within bounds."""
    spec, folder = ddp_run
    honest = ddp_bundle(spec, folder, rank=2)
    column = torch.zeros(4, 1)
    verdict = judge_rank(
        spec, 2, 1, *with_inputs(honest, residual=column), signers=rank_casebook.local_signers(spec)
    )
    assert verdict == (False, misshapen(spec, "residual"), None, None)
    previous = with_inputs(ddp_bundle(spec, folder, rank=2, index=0), residual=column)
    for reproduces in (lambda _: True, lambda _: False):
        verdict = judge_rank(
            spec,
            2,
            1,
            *honest,
            previous=previous,
            own_previous=True,
            reproduces=reproduces,
            signers=rank_casebook.local_signers(spec),
        )
        assert verdict.passed is False
        assert verdict.reason == (
            "the slot's previous unit, the provider's own, cannot be rebuilt: "
            + misshapen(spec, "residual")
        )


def judges_of_the_last_unit(spec, folder: Path):
    """Judges of rank 2's last unit after its previous one: exactly, and within bounds."""
    for reproduces in (lambda _: True, lambda _: False):
        yield functools.partial(
            judge_rank,
            spec,
            2,
            1,
            previous=ddp_bundle(spec, folder, rank=2, index=0),
            reproduces=reproduces,
            signers=rank_casebook.local_signers(spec),
        )


@pytest.mark.slow
def test_a_ddp_last_units_trained_model_must_be_where_its_re_run_leaves_the_rank(ddp_run):
    """The user's model is read from the ranks' last bundles: a rank that trains honestly but
    commits other weights there fails, judged exactly or within bounds; a unit before the last
    holds none."""
    spec, folder = ddp_run
    honest = ddp_bundle(spec, folder, rank=2)
    loaded = load_rank_bundle(honest[1])
    zeros = {name: torch.zeros_like(t) for name, t in loaded.weights.items()}
    made_up = [
        with_weights(honest, zeros),
        with_weights(honest, loaded.unit.trainer["model"]),  # the unit's start
    ]
    for judge in judges_of_the_last_unit(spec, folder):
        assert judge(*honest).passed is True
        for made in made_up:
            verdict = judge(*made)
            assert verdict.passed is False
            assert (
                verdict.reason == "the bundle's trained model is not where the unit leaves the rank"
            )
    first = with_weights(ddp_bundle(spec, folder, rank=2, index=0), loaded.weights)
    early = judge_rank(spec, 2, 0, *first, signers=rank_casebook.local_signers(spec))
    assert early.passed is False
    assert early.reason == "the bundle holds a trained model, but its unit is not the job's last"


@pytest.mark.slow
def test_a_ddp_last_unit_without_its_trained_model_fails(ddp_run):
    """The user's model is read from the ranks' last bundles: a rank that trains honestly but
    leaves it out fails, judged exactly or within bounds."""
    spec, folder = ddp_run
    bare = with_weights(ddp_bundle(spec, folder, rank=2), None)
    for judge in judges_of_the_last_unit(spec, folder):
        verdict = judge(*bare)
        assert verdict.passed is False
        assert verdict.reason == "the job's last unit holds no trained model"
