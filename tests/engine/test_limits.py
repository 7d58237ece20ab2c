"""A stranger's spec is bounded before anything is built: the spec's own caps refuse absurd
shapes as it is parsed, and a machine's limits refuse a model, a unit or a data source larger
than it allows, in moments, whatever size the spec claims."""

from __future__ import annotations

import time

import pytest
import torch

from node.engine import (
    JobSpec,
    SpecError,
    SpecOverLimits,
    UnitLimits,
    parse_spec,
    run_unit,
    unit_shard,
)
from node.engine.limits import parameter_count

from .conftest import SMALL
from .test_data import FakeStore


def with_model(model: dict) -> JobSpec:
    """The small spec with its model replaced whole."""
    return parse_spec(SMALL | {"model": model})


@pytest.mark.parametrize(
    "model",
    [
        {"architecture": "gpt", "n_layer": 2, "n_embd": 64, "n_head": 4},
        {"architecture": "mlp", "context": 4, "n_embd": 8, "hidden": 32, "n_layer": 2},
    ],
)
def test_the_parameter_count_is_the_built_models(model):
    spec = with_model(model)
    built = spec.build_model()
    assert parameter_count(spec) == sum(p.numel() for p in built.parameters())


def test_a_model_too_large_for_the_machine_is_refused_without_allocating_it(small_spec):
    """About 50 trillion parameters: counted on the meta device in moments, never allocated."""
    huge = with_model({"architecture": "gpt", "n_layer": 1024, "n_embd": 65536, "n_head": 4})
    began = time.monotonic()
    with pytest.raises(SpecOverLimits, match=r"a model of [\d,]+ parameters"):
        UnitLimits().check(huge)
    assert time.monotonic() - began < 30


@pytest.mark.parametrize(
    ("overrides", "refused"),
    [
        ({"reproducibility": {"num_threads": 64}}, "64 threads"),
        ({"training": {"batch_size": 1 << 20}, "data": {"seq_len": 1 << 20}}, "tokens per unit"),
        (
            {
                "data": {
                    "sources": [{"kind": "synthetic", "generator": "markov", "num_bytes": 1 << 40}]
                }
            },
            "1,099,511,627,776-byte source",
        ),
    ],
)
def test_a_unit_asking_more_than_the_limits_is_refused(small_spec, overrides, refused):
    limits = UnitLimits(max_threads=8)
    with pytest.raises(SpecOverLimits, match=refused):
        limits.check(small_spec(**overrides))


def test_run_unit_refuses_a_spec_over_its_limits_before_training(small_spec):
    spec = small_spec()
    with pytest.raises(SpecOverLimits, match="parameters"):
        run_unit(spec, None, unit_shard(spec, 0), 1, limits=UnitLimits(max_parameters=1_000))


def test_an_ipfs_source_is_read_only_up_to_the_limit(small_spec):
    cid = "bafkreiexampleexampleexampleexampleexampleexampleexamplex"
    spec = small_spec(data={"sources": [{"kind": "ipfs", "cid": cid}]})
    store = FakeStore({cid: b"0123456789" * 100_000})
    with pytest.raises(ValueError, match="ipfs source"):
        run_unit(
            spec,
            None,
            unit_shard(spec, 0),
            1,
            storage=store,
            limits=UnitLimits(max_source_bytes=10_000),
        )
    assert store.asked == [(cid, 10_000)]


@pytest.mark.parametrize(
    "model",
    [
        {"architecture": "gpt", "n_layer": 1025, "n_embd": 32, "n_head": 2},
        {"architecture": "gpt", "n_embd": 1 << 17, "n_head": 1},
        {"architecture": "mlp", "context": 5000},
    ],
)
def test_absurd_shapes_are_refused_as_the_spec_is_parsed(model):
    with pytest.raises(SpecError, match="model"):
        with_model(model)


def test_the_limits_leave_the_shipped_specs_alone(small_spec):
    UnitLimits().check(small_spec())
    assert torch.get_default_device().type == "cpu"  # the meta device was only borrowed


def test_a_model_is_counted_once_however_often_it_is_asked_for(monkeypatch):
    spec = parse_spec(SMALL)
    parameter_count(spec)
    monkeypatch.setattr(JobSpec, "build_model", lambda self: pytest.fail("built again"))
    assert parameter_count(spec) == parameter_count(spec.model_copy())
