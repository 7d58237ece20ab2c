"""A ddp unit longer than the stretch the rank table measures: its rank commits its residual
inside it, a verifier of another class takes it up there after judging it, and a verifier of
the rank's own class demands it to the bit. Other CPU classes stand in for other hardware."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from marketplace.protocol.rank_bundle import DDP_RESIDUAL_EVERY, load_rank_bundle, rank_bundle
from node.distributed.exchange import rms
from node.distributed.job import group_config
from node.distributed.rank_unit import rank_class
from node.engine.limits import parameter_count
from verifier import rank_casebook
from verifier.rank_recompute import judge_rank

RANK, INDEX = 2, 1
EVERY = DDP_RESIDUAL_EVERY + 5  # one residual committed inside each unit, then 5 steps more


@pytest.fixture(scope="module")
def group(tmp_path_factory):
    """The shipped ddp spec's compression, 2 units of 25 steps, trained by its 3 ranks here."""
    spec = rank_casebook.group_spec("random-8bit", units=2, every=EVERY)
    folder = tmp_path_factory.mktemp("long-group")
    rank_casebook.train_group(spec, folder)
    return spec, folder


def bundle_of(group, rank: int = RANK, index: int = INDEX) -> tuple[str, bytes]:
    spec, folder = group
    return rank_casebook.committed_bundle(spec, Path(folder), rank, index)


def judged(group, committed_bundle: tuple[str, bytes], *, exact: bool = False):
    """Judged by a verifier of this machine's rank class (or one that reproduces any class),
    against the slot's previous unit as the group committed it."""
    spec, _ = group
    own = rank_class(spec).class_id()
    committed, bundle = committed_bundle
    return judge_rank(
        spec,
        RANK,
        INDEX,
        committed,
        bundle,
        None,
        bundle_of(group, index=INDEX - 1),
        reproduces=(lambda _: True) if exact else (lambda class_id: class_id == own),
        signers=rank_casebook.local_signers(spec),
    )


def with_residuals(committed_bundle: tuple[str, bytes], residuals) -> tuple[str, bytes]:
    committed, bundle = committed_bundle
    loaded = load_rank_bundle(bundle)
    return committed, rank_bundle(*loaded._replace(residuals=tuple(residuals)))


def nudged(residual: torch.Tensor, share: float) -> torch.Tensor:
    """`residual` moved by `share` of its RMS in every entry."""
    return residual + share * rms(residual)


def test_a_long_ddp_unit_commits_its_residual_after_each_measured_stretch(group):
    spec, _ = group
    assert list(group_config(spec).residual_steps(spec)) == [DDP_RESIDUAL_EVERY]
    for index in range(2):
        residuals = load_rank_bundle(bundle_of(group, index=index)[1]).residuals
        assert [r.shape for r in residuals] == [(parameter_count(spec),)]
    # the rank's own re-run commits to the very residual: what the rank trained with
    verdict = judged(group, bundle_of(group), exact=True)
    assert verdict.passed is True, verdict.reason
    assert verdict.reason == "the re-run unit sends the committed payload"


@pytest.mark.slow
@pytest.mark.parametrize("host", ["t2", "t1-nodnn"])
def test_an_honest_long_unit_of_another_class_passes_within_the_bounds(group, host):
    spec, _ = group
    honest = rank_casebook.provide(spec, bundle_of(group)[1], host)
    verdict = judged(group, honest)
    assert verdict.passed is True, verdict.reason
    assert verdict.reason == "the re-run explains every committed payload within the slack"
    assert judged(group, honest, exact=True).passed is False  # its bits are not this class's


def test_a_residual_off_by_one_bit_fails_a_verifier_of_the_ranks_own_class(group):
    committed, bundle = bundle_of(group)
    (residual,) = load_rank_bundle(bundle).residuals
    off = residual.clone()
    off[0] = torch.nextafter(off[0], torch.tensor(float("inf")))
    verdict = judged(group, with_residuals((committed, bundle), [off]), exact=True)
    assert verdict.passed is False
    assert verdict.reason == "the re-run unit commits to other residuals"


@pytest.mark.slow
def test_a_residual_of_its_choosing_fails_a_verifier_of_another_class(group):
    """An honest unit of another class, whose committed residual is moved by 2% of its RMS: a
    residual steers every payload after it, so it is judged before the re-run takes it up."""
    spec, _ = group
    honest = rank_casebook.provide(spec, bundle_of(group)[1], "t2")
    (residual,) = load_rank_bundle(honest[1]).residuals
    verdict = judged(group, with_residuals(honest, [nudged(residual, 0.02)]))
    assert verdict.passed is False
    step = INDEX * EVERY + DDP_RESIDUAL_EVERY - 1
    assert verdict.reason.startswith(
        f"the re-run does not explain the committed payload: round {step}: the residual "
        "committed after it is"
    )


@pytest.mark.slow
def test_a_cheat_after_the_committed_residual_still_fails(group):
    """Honest up to the residual it commits, then noise of 5% of the update's RMS: the
    stretch after it is judged from the committed residual as the first is from the start."""
    spec, _ = group
    calls = iter(range(EVERY))

    def late_noise(update: torch.Tensor) -> torch.Tensor:
        if next(calls) < DDP_RESIDUAL_EVERY:
            return update
        return update + rank_casebook.NOISE_RATIO * rms(update) * torch.ones_like(update)

    cheat = rank_casebook.provide(spec, bundle_of(group)[1], "t2", tamper=late_noise)
    verdict = judged(group, cheat)
    assert verdict.passed is False
    late = INDEX * EVERY + DDP_RESIDUAL_EVERY
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
    group, residuals, words, exact
):
    committed, bundle = bundle_of(group)
    (residual,) = load_rank_bundle(bundle).residuals
    made = residuals(residual) if callable(residuals) else residuals
    verdict = judged(group, with_residuals((committed, bundle), made), exact=exact)
    assert verdict.passed is False
    assert words in verdict.reason


@pytest.mark.parametrize("exact", [True, False])
def test_a_next_unit_fails_when_its_providers_previous_unit_commits_no_residual(group, exact):
    """The previous unit fails its own verification, and its provider answers for where it
    leaves the slot: the next unit's start cannot be checked against it."""
    spec, _ = group
    committed, bundle = bundle_of(group)
    previous = with_residuals(bundle_of(group, index=INDEX - 1), [])
    own = rank_class(spec).class_id()
    verdict = judge_rank(
        spec,
        RANK,
        INDEX,
        committed,
        bundle,
        None,
        previous,
        reproduces=(lambda _: True) if exact else (lambda class_id: class_id != own),
        signers=rank_casebook.local_signers(spec),
        own_previous=True,
    )
    assert verdict.passed is False
    assert verdict.reason == (
        "the slot's previous unit, the provider's own, cannot be rebuilt: "
        "the bundle commits 0 residuals inside its unit, not 1"
    )
