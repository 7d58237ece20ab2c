"""A ddp rank judged by a verifier of another execution class: an honest rank passes within the
calibrated slack, which the exact check would have slashed it for, and every cheat still fails;
in a unit longer than the stretch the table measures, the residuals its rank commits inside it
are judged and taken up. Other CPU classes (two threads, oneDNN off) stand in for other
hardware."""

from __future__ import annotations

import copy
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from marketplace.protocol.rank_bundle import (
    DDP_RESIDUAL_EVERY,
    load_rank_bundle,
    rank_bundle,
    update_sha256,
)
from node.distributed.exchange import rms
from node.distributed.job import group_config
from node.distributed.rank_unit import rank_class
from node.engine.environment import Host
from node.engine.limits import parameter_count
from verifier import rank_casebook
from verifier.rank_recompute import RANK_MEASURES, RANK_TOLERANCE_FILE, judge_rank, rank_tolerance
from verifier.recompute import Runner
from verifier.trajectory import Tolerance

RANK, INDEX = 2, 1


@pytest.fixture(scope="module")
def group(tmp_path_factory):
    """The shipped ddp spec's compression, 2 units of 6 steps, trained by its 3 ranks here."""
    spec = rank_casebook.group_spec("random-8bit", units=2, every=6)
    folder = tmp_path_factory.mktemp("group")
    rank_casebook.train_group(spec, folder)
    return spec, folder


def bundles(group, rank: int = RANK, index: int = INDEX) -> tuple[str, bytes]:
    spec, folder = group
    return rank_casebook.committed_bundle(spec, Path(folder), rank, index)


def this_verifier(spec):
    """Whether this verifier reproduces a class: its own rank class only."""
    own = rank_class(spec).class_id()
    return lambda class_id: class_id == own


def another_verifier(spec):
    """Whether a verifier of another class reproduces a class: any but this machine's."""
    own = rank_class(spec).class_id()
    return lambda class_id: class_id != own


def any_class(class_id: str | None) -> bool:
    """A verifier that reproduces every class bit for bit: judged by the hash."""
    return True


def judged(group, committed_bundle: tuple[str, bytes], **kwargs):
    """Judged by this verifier (or one that reproduces what `reproduces` says), against the slot's
    previous unit as the group committed it (or `previous`)."""
    spec, _ = group
    committed, bundle = committed_bundle
    previous = kwargs.pop("previous", None) or bundles(group, index=INDEX - 1)
    return judge_rank(
        spec,
        RANK,
        INDEX,
        committed,
        bundle,
        None,
        previous,
        reproduces=kwargs.pop("reproduces", this_verifier(spec)),
        **kwargs,
        signers=rank_casebook.local_signers(spec),
    )


@pytest.mark.slow
@pytest.mark.parametrize("host", ["t2", "t1-nodnn"])
@pytest.mark.parametrize("units", ["group", "long_group"])  # the latter's commit a residual
def test_an_honest_rank_of_another_class_passes_where_the_exact_check_fails_it(
    request, units, host
):
    group = request.getfixturevalue(units)
    spec, _ = group
    honest = rank_casebook.provide(spec, bundles(group)[1], host)
    verdict = judged(group, honest)
    assert verdict.passed is True, verdict.reason
    assert verdict.reason == "the re-run explains every committed payload within the slack"
    exact = judged(group, honest, reproduces=any_class)
    assert exact.passed is False  # its bits are not this class's


@pytest.mark.slow
def test_a_rank_recording_this_verifiers_class_is_judged_by_its_hash(group):
    """The group's own bundle names the class this verifier re-runs in; the same bundle with
    its class record taken out, or made up, is judged within the slack, and passes too."""
    committed, bundle = bundles(group)
    verdict = judged(group, (committed, bundle))
    assert verdict.passed is True and verdict.recomputed_state_hash == committed
    loaded = load_rank_bundle(bundle)
    for record in (None, {"device": "gpu-nobody-has"}):
        other = rank_bundle(*loaded._replace(execution=record))
        verdict = judged(group, (committed, other))
        assert verdict.passed is True
        assert verdict.reason == "the re-run explains every committed payload within the slack"


@pytest.mark.slow
@pytest.mark.parametrize("name", rank_casebook.CHEATS)
def test_every_cheat_of_a_rank_fails_a_verifier_of_another_class(group, name):
    """Each cheater trains in another class (two threads), so it is judged within the slack."""
    spec, _ = group
    _, bundle = bundles(group)
    _, other = bundles(group, rank=1)
    verdict = judged(group, rank_casebook.CHEATS[name](spec, bundle, other, "t2"))
    assert verdict.passed is False
    assert verdict.reason.startswith("the re-run does not explain the committed payload")


@pytest.mark.slow
def test_a_unit_that_does_not_start_where_the_previous_one_ends_fails_within_the_slack(group):
    """A rank that moved its weights between units by a thousandth of their RMS, and then
    trained the unit honestly from there."""
    spec, _ = group
    _, bundle = bundles(group)
    unit = load_rank_bundle(bundle).unit
    trainer = copy.deepcopy(unit.trainer)
    for name, weights in trainer["model"].items():
        if weights.is_floating_point():
            scale = weights.square().mean().sqrt()
            trainer["model"][name] = weights + 1e-3 * scale * torch.ones_like(weights)
    moved = replace(unit, trainer=trainer)
    committed, made = rank_casebook.provide(spec, bundle, "t2", unit=moved)
    loaded = load_rank_bundle(made)
    made = rank_bundle(*loaded._replace(unit=moved))
    verdict = judged(group, (committed, made))
    assert verdict.passed is False
    assert verdict.reason == "the unit does not start where the slot's previous unit ends"


def test_the_shipped_table_measured_ddp_re_runs_as_long_as_a_rank_goes_between_residuals():
    """Error feedback carries each step's rounding into the next, so a slack holds only over as
    many steps as it was measured on; a table that measured fewer than a rank goes between the
    residuals it commits is refused."""
    shipped = Tolerance.load(RANK_TOLERANCE_FILE, RANK_MEASURES)
    assert len(shipped.measured["payload"]) == DDP_RESIDUAL_EVERY
    assert 0 < rank_tolerance(shipped).payload < 1e-2
    measured = dict(shipped.measured)
    measured["payload"] = measured["payload"][: DDP_RESIDUAL_EVERY - 1]
    shorter = f"ddp re-runs of {DDP_RESIDUAL_EVERY - 1} steps"
    with pytest.raises(ValueError, match=f"{shorter}, and one goes {DDP_RESIDUAL_EVERY} steps"):
        rank_tolerance(replace(shipped, measured=measured))


def test_a_bundle_whose_payload_does_not_split_into_steps_fails(group):
    _, bundle = bundles(group)
    loaded = load_rank_bundle(bundle)
    payload = loaded.payload + b"\x00"
    made = rank_bundle(loaded.unit, payload, rounds=loaded.rounds, execution=None)
    verdict = judged(group, (update_sha256(payload), made))
    assert verdict.passed is False


def test_a_verifier_reproduces_the_rank_class_it_re_runs_in_and_those_it_declares(group):
    """Ranks are re-run on one CPU thread whatever the runner's device or host settings."""
    spec, _ = group
    own = rank_class(spec).class_id()
    other = rank_class(spec, threads=2).class_id()
    runner = Runner(host=Host(num_threads=4))
    assert runner.reproduces_rank(spec, own) and not runner.reproduces_rank(spec, other)
    assert not runner.reproduces_rank(spec, None)
    assert Runner(classes=frozenset({other})).reproduces_rank(spec, other)
    assert runner.rank_tolerance == rank_tolerance()


# --- a ddp unit longer than the stretch the table measures ------------------------------------

LONG = DDP_RESIDUAL_EVERY + 5  # steps per unit: one residual committed inside, then 5 more


@pytest.fixture(scope="module")
def long_group(tmp_path_factory):
    """The shipped ddp spec's compression, 2 units of 25 steps, trained by its 3 ranks here."""
    spec = rank_casebook.group_spec("random-8bit", units=2, every=LONG)
    folder = tmp_path_factory.mktemp("long-group")
    rank_casebook.train_group(spec, folder)
    return spec, folder


def with_residuals(committed_bundle: tuple[str, bytes], residuals) -> tuple[str, bytes]:
    committed, bundle = committed_bundle
    loaded = load_rank_bundle(bundle)
    return committed, rank_bundle(*loaded._replace(residuals=tuple(residuals)))


def nudged(residual: torch.Tensor, share: float) -> torch.Tensor:
    """`residual` moved by `share` of its RMS in every entry."""
    return residual + share * rms(residual)


def test_a_long_ddp_unit_commits_its_residual_after_each_measured_stretch(long_group):
    spec, _ = long_group
    assert list(group_config(spec).residual_steps(spec)) == [DDP_RESIDUAL_EVERY]
    for index in range(2):
        residuals = load_rank_bundle(bundles(long_group, index=index)[1]).residuals
        assert [r.shape for r in residuals] == [(parameter_count(spec),)]
    # the rank's own re-run commits to the very residual: what the rank trained with
    verdict = judged(long_group, bundles(long_group), reproduces=any_class)
    assert verdict.passed is True, verdict.reason
    assert verdict.reason == "the re-run unit sends the committed payload"


def test_a_residual_off_by_one_bit_fails_a_verifier_of_the_ranks_own_class(long_group):
    committed, bundle = bundles(long_group)
    (residual,) = load_rank_bundle(bundle).residuals
    off = residual.clone()
    off[0] = torch.nextafter(off[0], torch.tensor(float("inf")))
    verdict = judged(long_group, with_residuals((committed, bundle), [off]), reproduces=any_class)
    assert verdict.passed is False
    assert verdict.reason == "the re-run unit commits to other residuals"


@pytest.mark.slow
def test_a_residual_of_its_choosing_fails_a_verifier_of_another_class(long_group):
    """An honest unit of another class, whose committed residual is moved by 2% of its RMS: a
    residual steers every payload after it, so it is judged before the re-run takes it up."""
    spec, _ = long_group
    honest = rank_casebook.provide(spec, bundles(long_group)[1], "t2")
    (residual,) = load_rank_bundle(honest[1]).residuals
    verdict = judged(long_group, with_residuals(honest, [nudged(residual, 0.02)]))
    assert verdict.passed is False
    step = INDEX * LONG + DDP_RESIDUAL_EVERY - 1
    assert verdict.reason.startswith(
        f"the re-run does not explain the committed payload: round {step}: the residual "
        "committed after it is"
    )


@pytest.mark.slow
def test_a_cheat_after_the_committed_residual_still_fails(long_group):
    """Honest up to the residual it commits, then noise of 5% of the update's RMS: the
    stretch after it is judged from the committed residual as the first is from the start."""
    spec, _ = long_group
    calls = iter(range(LONG))

    def late_noise(update: torch.Tensor) -> torch.Tensor:
        if next(calls) < DDP_RESIDUAL_EVERY:
            return update
        return update + rank_casebook.NOISE_RATIO * rms(update) * torch.ones_like(update)

    cheat = rank_casebook.provide(spec, bundles(long_group)[1], "t2", tamper=late_noise)
    verdict = judged(long_group, cheat)
    assert verdict.passed is False
    late = INDEX * LONG + DDP_RESIDUAL_EVERY
    assert verdict.reason.startswith("the re-run does not explain the committed payload: round")
    assert int(verdict.reason.split("round ")[1].split(":")[0]) >= late


@pytest.mark.parametrize(
    ("residuals", "words"),
    [
        ([], "commits 0 residuals inside its unit, not 1"),
        (lambda r: [r, r], "commits 2 residuals inside its unit, not 1"),
        (lambda r: [r[:-1]], "residual 1 of the unit is not a finite float32 vector"),
        (lambda r: [r.view(-1, 1)], "residual 1 of the unit is not a finite float32 vector"),
        (lambda r: [r.double()], "residual 1 of the unit is not a finite float32 vector"),
        (lambda r: [r * float("nan")], "residual 1 of the unit is not a finite float32 vector"),
    ],
)
@pytest.mark.parametrize("exact", [True, False])
def test_residuals_not_of_a_ranks_form_fail_the_unit_before_anything_runs(
    long_group, residuals, words, exact
):
    spec, _ = long_group
    committed, bundle = bundles(long_group)
    (residual,) = load_rank_bundle(bundle).residuals
    made = residuals(residual) if callable(residuals) else residuals
    reproduces = any_class if exact else another_verifier(spec)
    verdict = judged(long_group, with_residuals((committed, bundle), made), reproduces=reproduces)
    assert verdict.passed is False
    assert words in verdict.reason


@pytest.mark.parametrize("exact", [True, False])
def test_a_next_unit_fails_when_its_providers_previous_unit_commits_no_residual(long_group, exact):
    """The previous unit fails its own verification, and its provider answers for where it
    leaves the slot: the next unit's start cannot be checked against it."""
    spec, _ = long_group
    previous = with_residuals(bundles(long_group, index=INDEX - 1), [])
    reproduces = any_class if exact else another_verifier(spec)
    verdict = judged(
        long_group, bundles(long_group), previous=previous, own_previous=True, reproduces=reproduces
    )
    assert verdict.passed is False
    assert verdict.reason == (
        "the slot's previous unit, the provider's own, cannot be rebuilt: "
        "the bundle commits 0 residuals inside its unit, not 1"
    )
