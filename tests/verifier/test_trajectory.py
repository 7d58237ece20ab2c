"""Verification across execution classes: a unit records the class it ran in and commits to its
trajectory; a verifier of another class passes honest work and fails each cheat. Thread counts,
oneDNN and the matmul precision stand in on the CPU for the hardware classes they model."""

from __future__ import annotations

import dataclasses
import json
from contextlib import nullcontext
from unittest import mock

import pytest
import torch

from marketplace.ipfs.importer import only_hash
from marketplace.protocol import trace
from marketplace.protocol.checkpoint import Checkpoint
from marketplace.protocol.execution import ExecutionClass, ExecutionClassError
from node.engine import Shard, parse_spec, run_unit
from node.engine.train import Trainer
from verifier import casebook
from verifier.errors import Withheld
from verifier.recompute import (
    CLASSES_ENV,
    DEVICE_ENV,
    Runner,
    UnitInputs,
    recompute,
    runner_from_env,
)
from verifier.trajectory import Tolerance, judge, trace_problem

PROVIDER, VERIFIER = casebook.HOSTS["t2"], casebook.HOSTS["t1-nodnn"]
GPU = casebook.CUDA_HOSTS["cuda"]
needs_cuda = pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA device (none here)"
)


def _unit(name: str, seed: int):
    """A casebook spec, the checkpoint its unit 1 starts from, the shard, and H."""
    spec = casebook.spec(name, seed=seed)
    shard = Shard.of(spec, 0, 0, spec.training.max_steps)
    every = spec.checkpoint.every
    start = run_unit(spec, None, shard, every, device="cpu", host=PROVIDER).checkpoint
    return spec, start, shard, every


@pytest.fixture(scope="module")
def unit():
    return _unit("gpt-1x32", seed=11)


@pytest.fixture(scope="module")
def honest_unit(unit):
    """`unit` as an honest provider in PROVIDER's class commits it: its checkpoint and the states
    its records name (by state hash), for tests that forge from it (clone before changing)."""
    spec, start, shard, every = unit
    return casebook.honest(spec, start, shard, every, PROVIDER)


@pytest.fixture(scope="module")
def long_unit():
    """A unit three times as long as the calibration measures, as every shipped spec's is (a seed
    whose last update, left out, a whole re-run alone does not see)."""
    return _unit("gpt-1x32-h48", seed=19)


@pytest.fixture(scope="module")
def tolerance() -> Tolerance:
    return Tolerance.load()


def _judge(unit, tolerance, committed, **verifier):
    """The verdict of a verifier in VERIFIER's class on the CPU (or `verifier`'s device, host)."""
    spec, start, shard, every = unit
    checkpoint, states = committed
    return judge(
        spec, start, checkpoint, shard, every, lambda s: states.get(s["state_hash"]), tolerance,
        **({"host": VERIFIER} | verifier),
    )  # fmt: skip


def test_a_unit_records_its_execution_class_and_trajectory(unit):
    spec, start, shard, every = unit
    result = run_unit(spec, start, shard, every, device="cpu", host=PROVIDER)
    recorded = result.checkpoint.metadata["execution"]
    cls = ExecutionClass.from_dict(recorded["class"])
    assert (cls.device, cls.num_threads, cls.mkldnn, cls.dtype) == ("cpu", 2, True, "fp32")
    assert cls.matmul_precision == "highest" and cls.deterministic
    assert recorded["class_id"] == cls.class_id()
    assert dataclasses.replace(cls, num_threads=1).class_id() != cls.class_id()
    with pytest.raises(ExecutionClassError):
        ExecutionClass.from_dict(recorded["class"] | {"num_threads": "2"})

    segments = result.checkpoint.metadata["trace"]["segments"]
    assert [s["step"] for s in segments] == trace.boundaries(spec, every, every)
    assert result.checkpoint.state["trace"] == [trace.leaf(s) for s in segments]
    assert result.checkpoint.metadata["trace"]["root"] == trace.merkle_root(
        result.checkpoint.state["trace"]
    )
    bounds = trace.boundaries(spec, every, every)
    assert trace_problem(result.checkpoint, bounds) is None
    assert "not at the unit's segment boundaries" in trace_problem(result.checkpoint, bounds[1:])
    segments[0]["loss"] += 1e-3  # a record the state hash does not bind
    assert "not the ones the committed state hash binds" in trace_problem(result.checkpoint, bounds)
    result.checkpoint.metadata["trace"] = ["no records"]
    assert "no well-formed segment records" in trace_problem(result.checkpoint, bounds)


def test_classes_differ_in_bits_and_an_honest_unit_passes_a_verifier_of_another(unit, tolerance):
    spec, start, shard, every = unit
    committed = casebook.honest(spec, start, shard, every, PROVIDER)
    rerun = run_unit(spec, start, shard, every, device="cpu", host=VERIFIER)
    assert rerun.state_hash != committed[0].state_hash()  # not the same bits: a real test
    verdict = _judge(unit, tolerance, committed)
    assert verdict.passed, verdict.reason
    assert verdict.steps_run <= 2 * every


@pytest.mark.parametrize("cheat", sorted(casebook.CHEATS))
def test_each_cheat_fails_a_verifier_of_another_class(unit, tolerance, cheat):
    spec, start, shard, every = unit
    verdict = _judge(unit, tolerance, casebook.CHEATS[cheat](spec, start, shard, every, PROVIDER))
    assert verdict.passed is False, verdict.reason


def test_a_disagreement_is_narrowed_to_the_segment_of_the_skipped_step(unit, tolerance):
    spec, start, shard, every = unit
    verdict = _judge(
        unit, tolerance, casebook.CHEATS["skip_one_step"](spec, start, shard, every, PROVIDER)
    )
    skipped = start.step + every // 2  # the step whose work it skipped, made as step skipped + 1
    bounds = trace.boundaries(spec, start.step, every)
    assert verdict.segment == next(i for i, b in enumerate(bounds) if b > skipped)
    assert "re-run alone from the provider's own state" in verdict.reason


def test_past_the_calibrated_steps_an_honest_unit_passes_and_a_skipped_step_still_fails(
    long_unit, tolerance
):
    """The bound is not stretched for steps the calibration never measured: a re-run that drifts
    further is narrowed to one segment, which is never longer than the calibration. (Grown past
    the table, it passed every cheat in the second half of a 48-step unit; and weighed only
    against the whole unit's movement, the unit's last update could be left out.)"""
    spec, start, shard, every = long_unit
    assert every > len(tolerance.measured["weights"]) >= trace.segment_steps(spec)
    honest = _judge(long_unit, tolerance, casebook.honest(spec, start, shard, every, PROVIDER))
    assert honest.passed, honest.reason
    assert honest.steps_run <= 2 * every
    skipped = casebook.CHEATS["skip_one_step"](spec, start, shard, every, PROVIDER)
    verdict = _judge(long_unit, tolerance, skipped)
    bounds = trace.boundaries(spec, start.step, every)
    assert verdict.passed is False and verdict.segment == next(
        i for i, b in enumerate(bounds) if b > start.step + every // 2
    ), verdict.reason
    for cheat in ("skip_last_update", "noise", "fewer_tokens"):
        verdict = _judge(
            long_unit, tolerance, casebook.CHEATS[cheat](spec, start, shard, every, PROVIDER)
        )
        assert verdict.passed is False, f"{cheat}: {verdict.reason}"


def test_a_provider_serving_another_state_than_its_record_names_fails(unit, tolerance):
    """The states a judge fetches from the provider are checked against the records' state
    hashes: one with its weights nudged, served for every record, fails an honest unit."""
    spec, start, shard, every = unit
    checkpoint, states = casebook.honest(spec, start, shard, every, PROVIDER)
    forged = {h: state.clone() for h, state in states.items()}
    for state in forged.values():
        next(iter(state.state["model"].values())).add_(1e-6)
    verdict = _judge(unit, tolerance, (checkpoint, forged))
    assert verdict.passed is False and "not what it committed" in verdict.reason


def test_an_update_left_out_is_caught_where_its_drift_crosses_the_bound_segments_later():
    """In a 240-step unit an update left out at step 204 stays inside the bound in its own
    segment of the whole re-run and crosses it two segments later, where that segment alone is
    honest: each segment before the crossing is re-run alone as well, and the one it was left
    out of fails. (Re-running only the segment where the bound was crossed passed the unit.)"""
    raw = casebook._merge(casebook._BASE, casebook.SPECS["gpt-1x32"])
    raw["checkpoint"]["every"], raw["training"]["max_steps"] = 240, 720
    raw["reproducibility"]["seed"] = 23
    spec = parse_spec(raw)
    shard = Shard.of(spec, 0, 0, spec.training.max_steps)
    start = run_unit(spec, None, shard, 240, device="cpu", host=PROVIDER).checkpoint
    with casebook._skipped_update(start.step + 204):
        cheat = casebook.honest(spec, start, shard, 240, PROVIDER)
    verdict = _judge((spec, start, shard, 240), Tolerance.load(), cheat)
    left_out = start.step + 205  # the step whose update is missing
    bounds = trace.boundaries(spec, start.step, 240)
    assert verdict.passed is False, verdict.reason
    assert verdict.segment == next(i for i, b in enumerate(bounds) if b >= left_out)


def test_withheld_intermediate_states_fail_a_disputed_unit(unit, tolerance):
    spec, start, shard, every = unit
    checkpoint, _ = casebook.CHEATS["other_shard"](spec, start, shard, every, PROVIDER)
    verdict = _judge(unit, tolerance, (checkpoint, {}))
    assert verdict.passed is False and "not available" in verdict.reason


@pytest.fixture
def commit(spec, storage):
    """Unit 0 of a spec (the verifier tests' own by default) as a provider in a class commits it:
    the spec, its segment states and checkpoint pinned, and the unit's inputs a verifier reads."""
    default = spec

    def run(host, device="cpu", spec=default, record=None, serve=True):
        spec_cid = storage.add_bytes(json.dumps(spec.model_dump(mode="json")).encode())
        shard = Shard.of(spec, 0, 0, spec.training.max_steps)

        def keep(segment, state):  # `serve` off: the state's CID, which nobody serves
            data = state.to_bytes()
            segment["cid"] = storage.add_bytes(data) if serve else str(only_hash(data))

        steps = spec.checkpoint.every
        result = run_unit(spec, None, shard, steps, device=device, host=host, on_segment=keep)
        result.checkpoint.metadata["execution"]["class"] |= record or {}
        cid = storage.add_bytes(result.checkpoint.to_bytes())
        return UnitInputs(1, 0, 0, "0x" + "11" * 20, spec_cid, cid, result.state_hash)

    return run


def test_recompute_is_exact_in_its_own_class_and_tolerant_in_another(commit, storage):
    """Through storage, as a verifier worker runs it: a unit of the verifier's own class is
    checked by its hash, one of another class by its trajectory, with the provider's segment
    states fetched by the CIDs its records carry."""
    runner = Runner(host=VERIFIER)
    same = recompute(commit(VERIFIER), storage, runner)
    assert same.passed and same.judgement["mode"] == "exact"
    other = recompute(commit(PROVIDER), storage, runner)
    assert other.passed and other.judgement["mode"] == "tolerant", other.reason
    # a class it declares is judged by hash: declaring one it does not run in fails honest work
    provider = commit(PROVIDER)
    declared = Runner(host=VERIFIER, classes=frozenset({_class_id(storage, provider)}))
    assert recompute(provider, storage, declared).judgement["mode"] == "exact"


def test_records_naming_no_cid_fail_the_unit_rather_than_stop_its_verifier(commit, storage):
    """The attack: segment records whose "cid" is no CID at all, so that fetching the state a
    dispute needs raised out of the verifier's judgement and left the unit unjudged. The unit
    fails instead; and a committed CID that is no CID is as unavailable as withheld content."""
    inputs = commit(PROVIDER)
    committed = Checkpoint.load(storage.cat(inputs.cid))
    for segment in committed.metadata["trace"]["segments"]:
        segment["cid"] = "not-a-cid"
    forged = dataclasses.replace(inputs, cid=storage.add_bytes(committed.to_bytes()))
    verdict = recompute(forged, storage, Runner(host=VERIFIER))
    assert verdict.passed is False
    assert "not available or not what it committed" in verdict.reason
    with pytest.raises(Withheld, match="not a CID|invalid CID"):
        recompute(dataclasses.replace(inputs, cid="notacid"), storage, Runner(host=VERIFIER))


def test_segment_states_nobody_serves_are_withheld_so_the_unit_fails(commit, storage, spec):
    """The attack: records naming the CIDs of states no node serves. Fetching one for the
    judgement raised a plain "unavailable", which the verifier retried and then left unjudged.
    The provider committed them, so they are withheld, and the unit fails once its patience is
    over (verifier.tasks)."""
    seed = spec.reproducibility.model_copy(update={"seed": 4242})  # states no test pinned
    unserved = commit(PROVIDER, spec=spec.model_copy(update={"reproducibility": seed}), serve=False)
    with pytest.raises(Withheld, match="segment state"):
        recompute(unserved, storage, Runner(host=VERIFIER))


def _committing(checkpoint: Checkpoint, segments: list[dict]) -> Checkpoint:
    """`checkpoint` with `segments` as its records and its trace binding them, as a provider who
    writes both commits it."""
    forged = checkpoint.clone()
    forged.metadata["trace"]["segments"] = segments
    forged.state["trace"] = [trace.leaf(s) for s in segments]
    return forged


@pytest.mark.parametrize(
    "field, value",
    [
        ("loss", "0.5"),
        ("loss", [0.5]),
        ("loss", 10**400),
        ("loss", float("nan")),
        ("sketch", ["0.5"] * trace.SKETCH_DIM),
        ("sketch", [None] * trace.SKETCH_DIM),
        ("step", 6.0),
    ],
)
def test_records_of_malformed_fields_fail_the_unit_rather_than_stop_its_verifier(
    unit, honest_unit, tolerance, field, value
):
    """The attack: a record whose loss or sketch is no number (a string, a list, an int past
    float's range) raised TypeError or OverflowError in the comparison, out of the judgement."""
    checkpoint, states = honest_unit
    segments = [dict(s) for s in checkpoint.metadata["trace"]["segments"]]
    segments[0][field] = value
    verdict = _judge(unit, tolerance, (_committing(checkpoint, segments), states))
    assert verdict.passed is False and "segment record" in verdict.reason, verdict.reason


def _other_shapes(state: dict) -> None:
    state["model"] = {name: torch.zeros(3) for name in state["model"]}


def _no_model(state: dict) -> None:
    del state["model"]


def _moments_of_other_shapes(state: dict) -> None:
    for moments in state["optimizer"]["state"].values():
        moments["exp_avg"] = torch.zeros(2)


def _count_past_range(state: dict) -> None:
    state["progress"]["cursor"] = 2**70


@pytest.mark.parametrize(
    "malform", [_other_shapes, _no_model, _moments_of_other_shapes, _count_past_range]
)
def test_a_provider_state_of_no_training_state_fails_the_unit_rather_than_stop_its_verifier(
    unit, honest_unit, tolerance, malform
):
    """The attack: a record naming a state, served and of the record's hash, that is no state
    of the spec's trainer: the comparison or the re-run from it raised out of the judgement."""
    checkpoint, states = honest_unit
    segments = [dict(s) for s in checkpoint.metadata["trace"]["segments"]]
    state = states[segments[-2]["state_hash"]].clone()
    malform(state.state)
    segments[-2]["state_hash"] = state.state_hash()
    served = states | {state.state_hash(): state}
    verdict = _judge(unit, tolerance, (_committing(checkpoint, segments), served))
    assert verdict.passed is False
    assert "not available or not what it committed" in verdict.reason


def test_a_committed_generator_state_other_than_the_units_fails(unit, honest_unit, tolerance):
    """Training draws nothing from the generator, so its state is the unit's in every class;
    another one (which broke every later unit's re-run) fails the unit that commits it."""
    checkpoint, states = honest_unit[0].clone(), honest_unit[1]
    checkpoint.state["rng"]["torch"] = torch.Generator().manual_seed(99).get_state()
    verdict = _judge(unit, tolerance, (checkpoint, states))
    assert verdict.passed is False and "generator state" in verdict.reason


def test_a_made_up_loss_history_fails_the_unit_that_commits_it(unit, honest_unit, tolerance):
    """The attack: honest weights with a loss history of tiny losses, which made every loss of
    the slot's next unit a spike, so that its honest provider diverged. The history's last
    entries must average to the records' losses, as the trainer computes both."""
    checkpoint, states = honest_unit[0].clone(), honest_unit[1]
    history = checkpoint.state["progress"]["loss_history"]
    history[:] = [1e-3] * len(history)
    verdict = _judge(unit, tolerance, (checkpoint, states))
    assert verdict.passed is False and "loss history" in verdict.reason


def test_optimizer_settings_a_provider_state_names_do_not_steer_a_re_run(unit, tolerance):
    """The attack: train the unit's second half ascending the loss (AdamW's maximize) and name
    states that say so, so that each segment re-run alone from them ascended too, and passed. A
    trainer takes the optimizer's settings and the schedule from the spec, never from a state."""
    spec, start, shard, every = unit
    apply = Trainer.apply

    def ascending(self, loss):
        if self.step >= start.step + every // 2:
            for group in self.optimizer.param_groups:
                group["maximize"] = True
        apply(self, loss)

    with mock.patch.object(Trainer, "apply", ascending):
        committed = casebook.honest(spec, start, shard, every, PROVIDER)
    verdict = _judge(unit, tolerance, committed)
    assert verdict.passed is False and "re-run alone" in verdict.reason, verdict.reason


@pytest.mark.parametrize("provider, verdict", [("0x" + "11" * 20, False), ("0x" + "22" * 20, None)])
def test_a_previous_checkpoint_of_no_training_state_fails_only_its_own_provider(
    commit, storage, provider, verdict
):
    """The attack: a provider's own previous unit committed as no training state of the job (no
    progress, say), which raised out of the re-run that starts from it. It fails the next unit
    of the same provider, and leaves another provider's unjudged, as a bad input it did not
    make."""
    inputs = commit(VERIFIER)
    bad = Checkpoint.load(storage.cat(inputs.cid))
    del bad.state["progress"]
    following = dataclasses.replace(
        inputs,
        index=1,
        previous_cid=storage.add_bytes(bad.to_bytes()),
        previous_state_hash=bad.state_hash(),
        previous_provider=provider,
    )
    judged = recompute(following, storage, Runner(host=VERIFIER))
    assert judged.passed is verdict
    assert "previous checkpoint is no training state of the job" in judged.reason


SPIKY = """
name: spiky
model: {architecture: mlp, context: 4, n_embd: 8, hidden: 32, n_layer: 1}
data: {seq_len: 16, sources: [{kind: synthetic, generator: markov, num_bytes: 4096, seed: 1}]}
training:
  lr: 0.3
  batch_size: 8
  max_steps: 18
  warmup_steps: 1
  eval_batches: 0
  loss_spike: {window: 1, factor: 1.05, max_rollbacks: 50}
checkpoint: {every: 6}
reproducibility: {seed: 0, num_threads: 1}
"""


def test_an_honest_unit_with_loss_spike_rollbacks_passes_a_verifier_of_another_class(
    commit, storage
):
    """A loss spike rolls the unit back to its start and its segments come again: the verifier's
    re-run keeps the last of each, as the trainer does, rather than comparing the provider's
    records with segments rolled back (which failed an honest unit)."""
    spec = parse_spec(SPIKY)
    shard = Shard.of(spec, 0, 0, spec.training.max_steps)
    rerun = run_unit(spec, None, shard, spec.checkpoint.every, device="cpu", host=PROVIDER)
    assert rerun.metrics["rollbacks"] > 0
    verdict = recompute(commit(PROVIDER, spec=spec), storage, Runner(host=VERIFIER))
    assert verdict.passed and verdict.judgement["mode"] == "tolerant", verdict.reason


@pytest.fixture(scope="module")
def spiky_unit():
    spec = parse_spec(SPIKY)
    return spec, None, Shard.of(spec, 0, 0, spec.training.max_steps), spec.checkpoint.every


def test_a_segment_re_run_alone_after_a_rollback_skips_the_batches_the_rollback_skipped(
    spiky_unit, tolerance
):
    """A rollback to the unit's start retrains its first segments past the batches it skipped,
    which the start does not record. With the bound a hundredth of the table's, an honest unit's
    whole re-run in another class crosses it, and its segments are re-run alone, the first from
    the unit's start: past those batches too (on the start's own batches, it failed the unit)."""
    spec, start, shard, every = spiky_unit
    committed = casebook.honest(spec, start, shard, every, PROVIDER)
    assert committed[0].state["progress"]["cursor"] > every  # it skipped batches
    tight = dataclasses.replace(
        tolerance, margin=tolerance.margin / 100, floor=tolerance.floor / 100
    )
    verdict = _judge(spiky_unit, tight, committed)
    assert verdict.passed, verdict.reason
    assert verdict.steps_run > every  # segments were re-run alone, the first among them


def test_batches_skipped_without_a_rollback_fail_the_unit(unit, tolerance):
    """The skip a rolled-back segment is re-run with is no way to choose one's own batches: a
    provider that skips some with no spike ends the unit past where the verifier's re-run does."""
    spec, start, shard, every = unit
    states: dict[str, Checkpoint] = {}
    skipped = run_unit(
        spec, start, shard, every, device="cpu", host=PROVIDER, skip=3,
        on_segment=lambda segment, state: states.__setitem__(segment["state_hash"], state),
    )  # fmt: skip
    assert skipped.metrics["rollbacks"] == 0
    verdict = _judge(unit, tolerance, (skipped.checkpoint, states))
    assert verdict.passed is False
    assert "batch cursor" in verdict.reason


@pytest.mark.parametrize("cheat", sorted(casebook.CHEATS))
def test_each_cheat_fails_a_unit_with_rollbacks(spiky_unit, tolerance, cheat):
    spec, start, shard, every = spiky_unit
    cheated = casebook.CHEATS[cheat](spec, start, shard, every, PROVIDER)
    verdict = _judge(spiky_unit, tolerance, cheated)
    assert verdict.passed is False, verdict.reason


def test_a_dropout_unit_is_judged_whatever_device_it_names_and_other_masks_fail(
    commit, spec, storage, monkeypatch
):
    """Dropout masks are hashed from where they fall, not drawn from the device's generator
    (node.engine.dropout; drawn ones put every honest H200 unit with dropout 29x to 95x past a
    CPU verifier's bound), so a CPU verifier judges a dropout unit whatever device its record
    names, and a provider whose masks are not the hashed ones fails."""
    dropout = spec.model_copy(update={"model": spec.model.model_copy(update={"dropout": 0.1})})
    runner = Runner(host=VERIFIER)
    gpu = {"device": "cuda", "device_model": "NVIDIA H200", "capability": "9.0"}
    for record in (None, gpu):
        verdict = recompute(commit(PROVIDER, spec=dropout, record=record), storage, runner)
        assert verdict.passed and verdict.judgement["mode"] == "tolerant", verdict.reason
    # torch's own dropout, drawing its masks from the generator
    monkeypatch.setattr(Trainer, "dropout", lambda self, micro: nullcontext())
    drawn = commit(PROVIDER, spec=dropout, record=gpu)
    monkeypatch.undo()
    verdict = recompute(drawn, storage, runner)
    assert verdict.passed is False, verdict.reason


def test_a_worker_declares_its_device_and_classes_through_its_environment():
    runner = runner_from_env({CLASSES_ENV: "0123456789abcdef, fedcba9876543210"})
    assert runner.device == "cpu"
    assert runner.classes == {"0123456789abcdef", "fedcba9876543210"}
    with pytest.raises(ValueError, match="not a class id"):
        runner_from_env({CLASSES_ENV: "an-h100"})
    with pytest.raises(ValueError, match="cpu or cuda"):
        runner_from_env({DEVICE_ENV: "tpu"})


def _class_id(storage, inputs):
    return Checkpoint.load(storage.cat(inputs.cid)).metadata["execution"]["class_id"]


@needs_cuda
def test_on_a_gpu_the_same_class_reruns_bit_for_bit(unit):
    spec, start, shard, every = unit
    a = run_unit(spec, start, shard, every, device="cuda")
    b = run_unit(spec, start, shard, every, device="cuda")
    assert a.state_hash == b.state_hash
    assert a.checkpoint.metadata["execution"]["class"]["device"] == "cuda"


@needs_cuda
def test_on_a_gpu_an_honest_unit_passes_a_cpu_verifier_and_each_cheat_fails(unit, tolerance):
    spec, start, shard, every = unit
    honest = casebook.honest(spec, start, shard, every, GPU, "cuda")
    verdict = _judge(unit, tolerance, honest)
    assert verdict.passed, verdict.reason
    for name, cheat in casebook.CHEATS.items():
        verdict = _judge(unit, tolerance, cheat(spec, start, shard, every, GPU, "cuda"))
        assert verdict.passed is False, f"{name}: {verdict.reason}"


@needs_cuda
def test_a_gpu_verifier_passes_an_honest_cpu_unit_and_fails_a_skipped_step(unit, tolerance):
    spec, start, shard, every = unit
    honest = casebook.honest(spec, start, shard, every, PROVIDER)
    verdict = _judge(unit, tolerance, honest, device="cuda", host=GPU)
    assert verdict.passed, verdict.reason
    skipped = casebook.CHEATS["skip_one_step"](spec, start, shard, every, PROVIDER)
    verdict = _judge(unit, tolerance, skipped, device="cuda", host=GPU)
    assert verdict.passed is False, verdict.reason


@needs_cuda
def test_a_gpu_unit_is_checked_by_hash_on_a_gpu_and_by_trajectory_on_a_cpu(commit, storage):
    inputs = commit(GPU, "cuda")
    exact = recompute(inputs, storage, Runner(device="cuda"))
    assert exact.passed and exact.judgement["mode"] == "exact", exact.reason
    tolerant = recompute(inputs, storage, Runner(host=VERIFIER))
    assert tolerant.passed and tolerant.judgement["mode"] == "tolerant", tolerant.reason
