"""A job's unit format: chosen once from its spec, and each format reads its own units."""

from __future__ import annotations

import io
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import save

from marketplace.protocol.checkpoint import Checkpoint, CheckpointError, state_hash
from marketplace.protocol.rank_bundle import RankUnit, RecordedRound, load_rank_bundle, rank_bundle
from marketplace.protocol.spec import load_spec, parse_spec
from marketplace.protocol.tagged import MAX_HEADER_BYTES, dump_tagged, load_tagged
from marketplace.protocol.units import (
    CHECKPOINTS,
    RANK_BUNDLES,
    LastUnit,
    ResultError,
    UnitFormatError,
    read_unit,
    trained_model,
    unit_format,
)

ROOT = Path(__file__).resolve().parents[2]
SPECS = ROOT / "node" / "specs"
STATE = {
    "model": {
        "w": torch.arange(6, dtype=torch.float32).reshape(2, 3),
        "b": torch.zeros(3, dtype=torch.bfloat16),
    },
    "progress": {"step": 3, "loss_history": [2.5, 2.25]},
    "rng": [1, None, True, "seed"],
}
# The state hash of STATE, as committed on-chain: a change here breaks every committed hash.
STATE_HASH = "a9d370222884ec43dfb867831d4a190667e5a1338e61619d8b218fdd1fe9ccb5"
TRAINER = {"step": 40, "progress": {"loss_history": [3.0, 1.5]}}


def safetensors_file(tensors: dict, metadata: dict | None = None) -> bytes:
    return save(tensors, metadata=metadata)


def torch_file(value: Any) -> bytes:
    buffer = io.BytesIO()
    torch.save(value, buffer)
    return buffer.getvalue()


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("tiny.yaml", CHECKPOINTS),
        ("tiny-ddp-3.yaml", RANK_BUNDLES),
        ("tiny-diloco-3.yaml", RANK_BUNDLES),
    ],
)
def test_a_single_node_job_commits_checkpoints_and_a_group_job_rank_bundles(spec, expected):
    assert unit_format(load_spec(SPECS / spec)) is expected


def test_naming_a_format_and_counting_its_units_needs_no_torch():
    code = (
        "import sys; from marketplace.protocol.spec import load_spec; "
        "from marketplace.protocol.units import unit_format, units_per_node; "
        "spec = load_spec('node/specs/tiny-diloco-3.yaml'); "
        "print(unit_format(spec).tag, units_per_node(spec), 'torch' in sys.modules)"
    )
    shown = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    assert shown == [RANK_BUNDLES.tag, "3", "False"]


def test_each_format_cuts_a_slots_steps_into_its_units():
    raw = load_spec(SPECS / "tiny.yaml").model_dump(mode="json")
    raw["training"].update(max_steps=120, warmup_steps=10)
    single = parse_spec(raw)
    assert [CHECKPOINTS.steps(single, i) for i in range(CHECKPOINTS.units(single))] == [50, 50, 20]
    diloco = load_spec(SPECS / "tiny-diloco-3.yaml")  # 60 steps in rounds of 20
    assert [RANK_BUNDLES.steps(diloco, i) for i in range(RANK_BUNDLES.units(diloco))] == [
        20,
        20,
        20,
    ]
    for fmt, spec, past in ((CHECKPOINTS, single, 3), (RANK_BUNDLES, diloco, 3)):
        with pytest.raises(ValueError, match=f"unit {past} is outside the job's 3 units"):
            fmt.steps(spec, past)


def test_a_checkpoint_round_trips_through_its_bytes_and_keeps_its_state_hash():
    checkpoint = Checkpoint(STATE, {"metrics": {"loss": 2.25}})
    fmt, read = read_unit(checkpoint.to_bytes())
    assert fmt is CHECKPOINTS
    assert read.state_hash() == checkpoint.state_hash() == state_hash(STATE) == STATE_HASH
    assert torch.equal(read.state["model"]["w"], STATE["model"]["w"])
    assert read.metadata == {"metrics": {"loss": 2.25}}
    assert CHECKPOINTS.read(checkpoint.to_bytes()).state_hash() == STATE_HASH


def test_a_rank_bundle_round_trips_through_its_bytes():
    unit = RankUnit(1, 2, TRAINER, torch.ones(3), torch.full((3,), 0.5))
    rounds = [RecordedRound([0, 1], [b"a", b"bc"]), RecordedRound([1], [b"d"])]
    weights = {"w": torch.arange(3.0)}
    residuals = [torch.full((3,), 0.25), torch.full((3,), -1.0)]
    data = rank_bundle(unit, b"\x00\x01payload", weights, rounds, residuals=residuals)
    fmt, bundle = read_unit(data)
    assert fmt is RANK_BUNDLES
    assert (bundle.unit.rank, bundle.unit.round_) == (1, 2)
    assert bundle.unit.state_hash() == unit.state_hash()
    assert bundle.payload == b"\x00\x01payload" and bundle.rounds == rounds
    assert torch.equal(bundle.weights["w"], weights["w"])
    assert list(map(torch.equal, bundle.residuals, residuals)) == [True, True]
    assert RANK_BUNDLES.read(data).unit.state_hash() == unit.state_hash()


def test_a_rank_bundle_whose_residuals_are_not_tensors_is_no_rank_bundle():
    fields = load_tagged(rank_bundle(RankUnit(0, 1, TRAINER, None), b"p"), RANK_BUNDLES.tag)
    for residuals in (["not a tensor"], "none", {"0": torch.zeros(3)}):
        data = dump_tagged(RANK_BUNDLES.tag, fields | {"residuals": residuals})
        with pytest.raises(UnitFormatError):
            load_rank_bundle(data)


def test_each_format_reads_the_loss_its_units_report():
    assert CHECKPOINTS.loss(Checkpoint(STATE, {"metrics": {"loss": 2.25}})) == 2.25
    assert CHECKPOINTS.loss(Checkpoint(STATE)) is None
    fmt, bundle = read_unit(rank_bundle(RankUnit(0, 1, TRAINER, None), b"p"))
    assert fmt.loss(bundle) == 1.5  # the last loss the rank had seen when its unit began
    fresh = {"step": 0, "progress": {"loss_history": []}}
    assert (
        RANK_BUNDLES.loss(RANK_BUNDLES.read(rank_bundle(RankUnit(0, 0, fresh, None), b"p"))) is None
    )


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (b"not a unit at all", "not a unit file"),
        (safetensors_file({"w": torch.ones(2)}), "no format tag"),
        (safetensors_file({}, {"zoo": '{"list": [1, 2]}'}), "no format tag"),
        (
            safetensors_file({}, {"zoo": '{"dict": [["format", "zoo-checkpoint/0"]]}'}),
            "not a work unit: format 'zoo-checkpoint/0'",
        ),
        (
            safetensors_file({"x": torch.ones(1)}, {"zoo": '{"dict": [["format", "t"]]}'}),
            "tensor 'x' is not part of the unit",
        ),
        (
            safetensors_file({}, {"zoo": '{"dict": [["format", {"tensor": "x"}]]}'}),
            "tensor 'x' is missing or used twice",
        ),
        (
            safetensors_file({}, {"zoo": "[" * 100_000 + "]" * 100_000}),
            "its structure is not JSON",
        ),
        (
            safetensors_file({}, {"zoo": '{"list": [' * 100 + "1" + "]}" * 100}),
            "nested deeper than 64",
        ),
        (
            safetensors_file(
                {"c": torch.ones(2, dtype=torch.complex64)},
                {"zoo": '{"dict": [["format", "t"], ["c", {"tensor": "c"}]]}'},
            ),
            "tensor 'c' has dtype 'C64'",
        ),
        (torch_file({"format": CHECKPOINTS.tag, "state": {}}), "not a unit file"),
    ],
)
def test_bytes_that_are_no_work_unit_are_refused(data, why):
    with pytest.raises(UnitFormatError, match=why):
        read_unit(data)


def test_a_header_past_its_bound_or_the_data_is_refused_before_it_is_parsed():
    huge = (MAX_HEADER_BYTES + 1).to_bytes(8, "little") + b"{}"
    with pytest.raises(UnitFormatError, match=f"a header of {MAX_HEADER_BYTES + 1} bytes"):
        read_unit(huge)
    with pytest.raises(UnitFormatError, match="a header of 100 bytes"):
        read_unit((100).to_bytes(8, "little") + b"{}")


def test_a_unit_round_trips_every_kind_of_value_it_holds():
    """Optimizer state keyed by parameter number, tuples, non-finite floats, big ints, empty and
    tied tensors: each comes back as it went in, and the state hash with it."""
    tied = torch.randn(4, 3)
    flat = torch.arange(10.0)
    state = {
        "model": {"wte": tied, "lm_head": tied, "views": [flat[:5], flat[5:]]},
        "optimizer": {
            "state": {0: {"step": torch.tensor(3.0), "exp_avg": torch.zeros(4, 3)}},
            "param_groups": [{"betas": (0.9, 0.95), "params": [0], "lr": float("inf")}],
        },
        "rng": {"torch": torch.get_rng_state(), "cuda": [], "empty": torch.zeros(0)},
        "values": [None, True, -0.0, float("nan"), 2**70, "text", ("a", 1)],
    }
    read = Checkpoint.load(Checkpoint(state, {"metrics": {"loss": 2.0}}).to_bytes())
    assert read.state_hash() == state_hash(state)
    assert list(read.state["optimizer"]["state"]) == [0]
    assert read.state["optimizer"]["param_groups"][0]["betas"] == (0.9, 0.95)
    assert read.state["values"][6] == ("a", 1) and math.isnan(read.state["values"][3])
    assert torch.equal(read.state["rng"]["torch"], state["rng"]["torch"])


def test_a_unit_read_as_the_other_format_is_refused():
    checkpoint = Checkpoint(STATE).to_bytes()
    bundle = rank_bundle(RankUnit(0, 0, TRAINER, None), b"p")
    with pytest.raises(UnitFormatError, match="not a rank bundle: format 'zoo-checkpoint/1'"):
        RANK_BUNDLES.read(checkpoint)
    with pytest.raises(
        CheckpointError, match="cannot read checkpoint: format 'zoo-compute/rank-unit-v2'"
    ):
        CHECKPOINTS.read(bundle)


def test_a_single_node_jobs_model_is_slot_0s_checkpoint_holding_its_committed_state():
    blobs = {"slot-0": Checkpoint(STATE).to_bytes()}
    model = trained_model(7, [LastUnit(0, 5, "slot-0", "0x" + STATE_HASH)], 1, 6, blobs.__getitem__)
    assert (model.cid, model.state_hash) == ("slot-0", STATE_HASH)
    assert torch.equal(model.weights["w"], STATE["model"]["w"])
    with pytest.raises(ResultError, match="checkpoint slot-0 does not hold the committed state"):
        trained_model(7, [LastUnit(0, 5, "slot-0", "00" * 32)], 1, 6, blobs.__getitem__)


def test_a_group_jobs_model_is_what_every_ranks_last_bundle_holds():
    weights = {"w": torch.arange(3.0)}
    blobs = {
        f"rank-{r}": rank_bundle(RankUnit(r, 2, TRAINER, None), b"p", weights) for r in range(2)
    }
    last = [LastUnit(r, 2, f"rank-{r}", "0x" + "00" * 32) for r in range(2)]
    model = trained_model(7, last, 2, 3, blobs.__getitem__)
    assert (model.cid, model.state_hash) == ("rank-0", state_hash(weights))
    with pytest.raises(ResultError, match="has not delivered every rank's last round"):
        trained_model(7, last[:1], 2, 3, blobs.__getitem__)
    blobs["rank-1"] = rank_bundle(RankUnit(1, 2, TRAINER, None), b"p", {"w": torch.zeros(3)})
    with pytest.raises(ResultError, match="the ranks' final weights disagree"):
        trained_model(7, last, 2, 3, blobs.__getitem__)
    blobs["rank-1"] = Checkpoint(STATE).to_bytes()
    with pytest.raises(ResultError, match="unit rank-1: not a rank bundle"):
        trained_model(7, last, 2, 3, blobs.__getitem__)


def test_a_job_without_units_or_with_no_unit_at_slot_0_has_no_model():
    with pytest.raises(ResultError, match="has no committed checkpoint"):
        trained_model(7, [], 1, 6, {}.__getitem__)
    with pytest.raises(ResultError, match="unit slot-0: not a unit file"):
        trained_model(
            7, [LastUnit(0, 5, "slot-0", STATE_HASH)], 1, 6, {"slot-0": b"junk"}.__getitem__
        )
