"""Checkpoint serialisation and the canonical state hash."""

from __future__ import annotations

import json

import blake3
import pytest
import torch

from marketplace.protocol.checkpoint import Checkpoint, CheckpointError, state_hash
from marketplace.protocol.tagged import dump_tagged
from marketplace.protocol.units import CHECKPOINTS
from node.engine import Shard, parse_spec, run_unit

from .conftest import SMALL, merge


@pytest.fixture(scope="module")
def unit():
    spec = parse_spec(merge(SMALL, {"training": {"eval_batches": 0}}))
    return run_unit(spec, None, Shard.of(spec, 0, 0, 40), 10)


def flip_bit(tensor: torch.Tensor, byte: int = 0, bit: int = 0) -> None:
    tensor.view(-1).view(torch.uint8)[byte] ^= 1 << bit


def test_hash_matches_returned_hash_and_survives_bytes_and_files(unit, tmp_path):
    ckpt, digest, _ = unit
    assert ckpt.state_hash() == digest == ckpt.metadata["state_hash"]
    assert Checkpoint.load(ckpt.to_bytes()).state_hash() == digest
    ckpt.save(tmp_path / "unit.ckpt")
    assert Checkpoint.load(tmp_path / "unit.ckpt").state_hash() == digest
    assert Checkpoint.load(str(tmp_path / "unit.ckpt")).step == 10


@pytest.mark.parametrize(
    "where",
    [
        lambda s: s["model"]["transformer.h.0.attn.c_attn.weight"],
        lambda s: s["model"]["transformer.ln_f.bias"],
        lambda s: s["optimizer"]["state"][0]["exp_avg_sq"],
        lambda s: s["rng"]["torch"],
    ],
    ids=["weight", "bias", "adam-moment", "rng"],
)
def test_one_bit_changes_the_hash(unit, where):
    ckpt, digest, _ = unit
    copy = ckpt.clone()
    flip_bit(where(copy.state), byte=5, bit=3)
    assert copy.state_hash() != digest
    assert ckpt.state_hash() == digest  # the original is untouched


def test_progress_and_schedule_are_hashed(unit):
    ckpt, digest, _ = unit
    for path, value in [(("progress", "cursor"), 11), (("scheduler", "last_epoch"), 9)]:
        copy = ckpt.clone()
        copy.state[path[0]][path[1]] = value
        assert copy.state_hash() != digest


def test_hash_covers_dtype_and_shape_not_just_bytes():
    base = {"t": torch.zeros(4, dtype=torch.float32)}
    assert state_hash(base) != state_hash({"t": torch.zeros(2, 2, dtype=torch.float32)})
    assert state_hash(base) != state_hash({"t": torch.zeros(4, dtype=torch.int32)})
    assert state_hash({"a": 1, "b": 2.0}) == state_hash({"b": 2.0, "a": 1})
    assert state_hash({"a": 1}) != state_hash({"a": 1.0})


def test_the_hash_is_blake3_over_the_documented_stream():
    """The format in marketplace.protocol.checkpoint's docstring, written out by hand: a verifier
    in another language computes the same hash. The state mixes tensors above and below the size
    the hash joins into one update, a non-contiguous one, nested lists and every kind of value."""
    big = torch.arange(5000, dtype=torch.float32)
    state = {
        "model": {"w": big, "t": torch.arange(6, dtype=torch.int64).reshape(2, 3).t()},
        "rng": [torch.zeros(0, dtype=torch.uint8), [1, None, True]],
        "progress": {"loss": 0.1, "name": "x"},
    }

    def line(*header) -> bytes:
        return json.dumps(list(header)).encode() + b"\n"

    t = state["model"]["t"].contiguous()
    stream = b"".join(
        [
            b"zoo-state/2\n",
            line("/model/t", "tensor", "int64", [3, 2], 48) + t.numpy().tobytes(),
            line("/model/w", "tensor", "float32", [5000], 20000) + big.numpy().tobytes(),
            line("/progress/loss", "value", 0.1),
            line("/progress/name", "value", "x"),
            line("/rng/0", "tensor", "uint8", [0], 0),
            line("/rng/1/0", "value", 1),
            line("/rng/1/1", "value", None),
            line("/rng/1/2", "value", True),
        ]
    )
    assert state_hash(state) == blake3.blake3(stream).hexdigest()


def test_kept_header_lines_tell_equal_values_of_other_types_apart():
    """The hash keeps the header lines it has seen; a value equal to a kept one but of another
    type, or a float of another sign, still hashes as itself, however often it is hashed."""
    for _ in range(2):
        hashes = {state_hash({"a": v}) for v in (1, True, 1.0, 0.0, -0.0, "1", None, 0, False)}
        assert len(hashes) == 9


def test_a_hostile_state_cannot_fill_the_kept_header_lines():
    """A checkpoint may come from anyone: long values are hashed but never kept, and however many
    distinct short ones arrive, the kept lines stay bounded."""
    from marketplace.protocol import checkpoint

    long_value = "x" * 100_000
    assert state_hash({"a": long_value}) != state_hash({"a": long_value + "y"})
    assert all(len(line) <= checkpoint._KEPT_LINE_BYTES for line in checkpoint._kept.values())
    state_hash({f"k{i}": i for i in range(3 * checkpoint._KEPT_LINES)})
    assert len(checkpoint._kept) <= checkpoint._KEPT_LINES


def test_metadata_records_the_environment(unit):
    meta = unit.checkpoint.metadata
    env = meta["environment"]
    assert env["torch"]["version"] == torch.__version__
    assert env["num_threads"] == 2 and env["seed"] == 7 and env["deterministic"] is True
    assert len(env["code"]["engine_sha256"]) == 64
    assert env["packages"]["torch"] and env["hardware"]["cpu_count"]
    assert meta["unit"]["shard"]["index"] == 0 and meta["unit"]["steps"] == 10
    assert all(len(d) == 64 for d in meta["unit"]["data_sha256"].values())


def test_garbage_is_not_a_checkpoint(tmp_path):
    with pytest.raises(CheckpointError):
        Checkpoint.load(b"not a checkpoint")
    with pytest.raises(CheckpointError):
        Checkpoint.load(tmp_path / "missing.ckpt")


@pytest.mark.parametrize(
    "fields", [{"metadata": {}}, {"state": {}}, {"state": [1, 2], "metadata": {}}, {}]
)
def test_a_well_tagged_file_without_state_and_metadata_mappings_is_not_a_checkpoint(fields):
    """Whoever committed a checkpoint wrote it: a missing key is a refusal, not a KeyError."""
    with pytest.raises(CheckpointError, match="needs a 'state' and a 'metadata' mapping"):
        Checkpoint.load(dump_tagged(CHECKPOINTS.tag, fields))
