"""Work units: learning, bit-identical reruns and resumes, shards, rollback, and guard rails."""

from __future__ import annotations

import pytest
import torch

from marketplace.protocol.checkpoint import Checkpoint, CheckpointError
from node.engine import (
    DataError,
    Shard,
    TrainingDiverged,
    load_spec,
    parse_spec,
    run_unit,
)
from node.engine.data import Sampler

from .conftest import SMALL, SPECS, merge


def test_loss_falls_on_the_stdlib_corpus_with_the_tiny_spec():
    spec = load_spec(SPECS / "tiny.yaml")
    shard = Shard.of(spec, 0, 0, spec.training.max_steps)
    H = spec.checkpoint.every
    first, _, early = run_unit(spec, None, shard, H)
    _, _, late = run_unit(spec, first, shard, H)
    losses = early["losses"] + late["losses"]
    assert losses[0] == pytest.approx(5.55, abs=0.3)  # ln(256): a uniform guess over bytes
    assert sum(losses[-10:]) / 10 < losses[0] - 2.0
    assert late["eval_loss"] < early["eval_loss"] < losses[0]
    assert len(set(losses)) == len(losses)


def test_rerunning_a_unit_gives_the_same_hash(small_spec):
    spec = small_spec()
    shard = Shard.of(spec, 0, 0, 40)
    start, _, _ = run_unit(spec, None, shard, 10)
    a = run_unit(spec, start, shard, 10)
    b = run_unit(spec, Checkpoint.load(start.to_bytes()), shard, 10)
    assert a.state_hash == b.state_hash
    assert a.metrics["losses"] == b.metrics["losses"]


def test_resume_is_bit_identical_to_an_uninterrupted_run(small_spec):
    spec = small_spec()
    shard = Shard.of(spec, 0, 0, 40)
    H = spec.checkpoint.every
    half, _, _ = run_unit(spec, None, shard, H)
    resumed = run_unit(spec, Checkpoint.load(half.to_bytes()), shard, H)
    whole = run_unit(spec, None, shard, 2 * H)
    assert resumed.state_hash == whole.state_hash
    for name, tensor in whole.checkpoint.state["model"].items():
        assert torch.equal(tensor, resumed.checkpoint.state["model"][name])


def test_kept_segment_states_are_the_states_their_records_name(small_spec):
    """A sink gets a copy of each segment's state; without one the live state is hashed in
    place. Either way the unit's bits are the same, and a kept state is not moved by training."""
    spec = small_spec()
    shard = Shard.of(spec, 0, 0, 40)
    kept: list[tuple[dict, Checkpoint]] = []
    with_sink = run_unit(spec, None, shard, 10, on_segment=lambda s, c: kept.append((s, c)))
    without = run_unit(spec, None, shard, 10)
    assert with_sink.state_hash == without.state_hash
    assert [s for s, _ in kept] == with_sink.checkpoint.metadata["trace"]["segments"]
    assert len(kept) > 1
    for segment, state in kept:
        assert state.state_hash() == segment["state_hash"]
        assert state.step == segment["step"]


def test_a_different_shard_gives_a_different_hash(small_spec):
    spec = small_spec()
    a = run_unit(spec, None, Shard.of(spec, 0, 0, 40), 5)
    b = run_unit(spec, None, Shard.of(spec, 1, 0, 40), 5)
    assert a.state_hash != b.state_hash
    assert b.checkpoint.state["progress"]["stream"] == 1


MLP = {"architecture": "mlp", "context": 4, "n_embd": 8, "hidden": 64, "n_layer": 1}


@pytest.mark.parametrize(
    "raw",
    [
        {**SMALL, "model": MLP},
        merge(SMALL, {"training": {"precision": "bf16", "grad_accum_steps": 2}}),
        merge(SMALL, {"model": {"dropout": 0.1}}),
    ],
    ids=["mlp", "bf16-accum", "dropout"],
)
def test_variants_learn_and_stay_deterministic(raw):
    spec = parse_spec(raw)
    shard = Shard.of(spec, 0, 0, 40)
    half, _, _ = run_unit(spec, None, shard, 10)
    resumed = run_unit(spec, half, shard, 10)
    whole = run_unit(spec, None, shard, 20)
    assert resumed.state_hash == whole.state_hash
    losses = whole.metrics["losses"]
    assert losses[-1] < losses[0] - 0.5


def corrupt_batch_at(monkeypatch, cursor: int) -> None:
    """Make the batch at `cursor` a byte the Markov source never emits: a sure loss spike."""
    original = Sampler.batch

    def batch(self, stream, at, micro):
        x, y = original(self, stream, at, micro)
        if at == cursor:
            return torch.full_like(x, 255), torch.full_like(y, 255)
        return x, y

    monkeypatch.setattr(Sampler, "batch", batch)


MARKOV = {"sources": [{"kind": "synthetic", "generator": "markov", "num_bytes": 65536}]}
SPIKY = {"lr": 3e-3, "loss_spike": {"window": 5, "factor": 1.5, "skip_batches": 2}}


def test_loss_spike_rolls_back_and_skips_the_window(small_spec, monkeypatch):
    spec = small_spec(data=MARKOV, training=SPIKY)
    corrupt_batch_at(monkeypatch, 25)
    ckpt, digest, metrics = run_unit(spec, None, Shard.of(spec, 0, 0, 40), 40)
    assert metrics["rollbacks"] == 1
    # back to the step-20 snapshot; batches 20..25 and 2 more are skipped
    assert metrics["skipped_batches"] == 8
    assert ckpt.state["progress"] == {**ckpt.state["progress"], "step": 40, "cursor": 48}
    assert len(metrics["losses"]) == 40 and max(metrics["losses"][20:]) < 4.0
    again = run_unit(spec, None, Shard.of(spec, 0, 0, 40), 40)
    assert again.state_hash == digest


def test_resume_matches_an_uninterrupted_run_through_a_rollback(small_spec, monkeypatch):
    spec = small_spec(data=MARKOV, training=SPIKY)
    corrupt_batch_at(monkeypatch, 25)
    shard = Shard.of(spec, 0, 0, 40)
    whole = run_unit(spec, None, shard, 40)
    half, _, _ = run_unit(spec, None, shard, 20)
    resumed = run_unit(spec, Checkpoint.load(half.to_bytes()), shard, 20)
    assert resumed.metrics["rollbacks"] == whole.metrics["rollbacks"] == 1
    assert resumed.state_hash == whole.state_hash


def test_endless_spikes_stop_the_unit(small_spec, monkeypatch):
    spec = small_spec(data=MARKOV, training=merge(SPIKY, {"loss_spike": {"max_rollbacks": 0}}))
    corrupt_batch_at(monkeypatch, 25)
    with pytest.raises(TrainingDiverged, match="step 25"):
        run_unit(spec, None, Shard.of(spec, 0, 0, 40), 40)


def test_checkpoint_of_another_job_is_refused(small_spec):
    spec = small_spec()
    ckpt, _, _ = run_unit(spec, None, Shard.of(spec, 0, 0, 40), 2)
    other = small_spec(training={"lr": 1e-3})
    with pytest.raises(CheckpointError, match="different job spec"):
        run_unit(other, ckpt, Shard.of(other, 0, 0, 40), 2)


def test_shard_must_match_the_job_and_cover_the_steps(small_spec):
    spec = small_spec()
    with pytest.raises(DataError, match="not the job's data sources"):
        run_unit(spec, None, Shard(("file:other.txt",), 0, 0, 40), 2)
    with pytest.raises(DataError, match=r"steps \[0, 50\) fall outside"):
        run_unit(spec, None, Shard.of(spec, 0, 0, 40), 50)


def test_unit_restores_the_process_settings(small_spec):
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(False)
    spec = small_spec()
    result = run_unit(spec, None, Shard.of(spec, 0, 0, 40), 1)
    assert torch.get_num_threads() == 1
    assert not torch.are_deterministic_algorithms_enabled()
    assert result.checkpoint.metadata["environment"]["num_threads"] == 2
