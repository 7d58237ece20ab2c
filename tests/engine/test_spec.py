"""Job spec validation: the shipped examples load, bad specs fail with one clear error each."""

from __future__ import annotations

import pytest

from node.engine import SpecError, load_spec, parse_spec

from .conftest import SPECS, merge


@pytest.mark.parametrize("path", sorted(SPECS.glob("*.yaml")), ids=lambda p: p.name)
def test_example_specs_load(path):
    spec = load_spec(path)
    assert spec.training.max_steps >= spec.checkpoint.every


@pytest.mark.parametrize(
    ("change", "field", "words"),
    [
        ({"model": {"architecture": "resnet"}}, "model.architecture", ["'resnet'", "gpt", "mlp"]),
        ({"training": {"lr": -0.1}}, "training.lr", ["greater than 0"]),
        ({"model": {"n_head": 5}}, "model.n_head", ["must divide n_embd (64)"]),
        ({"data": None}, "data", ["dict"]),
        ({"training": {"precision": "fp8"}}, "training.precision", ["'fp32'", "'bf16'"]),
        ({"data": {"sources": []}}, "data.sources", ["at least 1"]),
        ({"data": {"sources": [{"kind": "s3"}]}}, "data.sources[0]", ["'stdlib'", "'ipfs'"]),
        ({"training": {"warmup_steps": 10_000}}, "training", ["warmup_steps (10000)"]),
        ({"distributed": {"nodes": 2}}, "distributed", ["'ddp' or 'diloco'"]),
        ({"training": {"learning_rate": 1}}, "training.learning_rate", ["not permitted"]),
        (
            {"distributed": {"quorum": 1}},
            "distributed.quorum",
            ["quorum is for nodes > 1"],
        ),
        (
            {"distributed": {"nodes": 3, "strategy": "ddp", "quorum": 2}},
            "distributed.quorum",
            ["quorum needs unit_deadline_s"],
        ),
        (
            {"distributed": {"nodes": 3, "strategy": "ddp", "quorum": 4, "unit_deadline_s": 9}},
            "distributed.quorum",
            ["quorum (4) must not exceed nodes (3)"],
        ),
        (
            {"distributed": {"nodes": 3, "strategy": "ddp", "diloco": {"outer_lr": 0.5}}},
            "distributed.diloco",
            ["need strategy diloco"],
        ),
        (
            {"distributed": {"nodes": 3, "strategy": "diloco", "diloco": {"outer_momentum": 1}}},
            "distributed.diloco.outer_momentum",
            ["less than 1"],
        ),
        (
            {"distributed": {"nodes": 3, "strategy": "diloco", "compression": {"bits": 3}}},
            "distributed.compression.bits",
            ["32", "8", "4", "2"],
        ),
        (
            {"distributed": {"nodes": 2, "strategy": "ddp", "compression": {"ratio": 0}}},
            "distributed.compression.ratio",
            ["greater than 0"],
        ),
        (
            {"distributed": {"nodes": 2, "strategy": "ddp", "aggregation": {"method": "vote"}}},
            "distributed.aggregation.method",
            ["'median'"],
        ),
        (
            {
                "distributed": {
                    "nodes": 5,
                    "strategy": "diloco",
                    "quorum": 4,
                    "unit_deadline_s": 30,
                    "aggregation": {"method": "trimmed_mean", "trim": 2},
                }
            },
            "distributed.aggregation",
            ["trim (2)", "round of 4"],
        ),
        (
            {"distributed": {"nodes": 2, "strategy": "diloco", "diloco": {"inner_steps": 40}}},
            "spec",
            ["distributed.diloco.inner_steps (40) must divide checkpoint.every (50)"],
        ),
        (
            {"distributed": {"nodes": 2, "strategy": "ddp", "unit_deadline_s": 0}},
            "distributed.unit_deadline_s",
            ["greater than 0"],
        ),
    ],
)
def test_bad_spec_names_the_field(tiny_raw, change, field, words):
    with pytest.raises(SpecError) as caught:
        parse_spec(merge(tiny_raw, change))
    assert len(caught.value.errors) == 1
    got_field, message = caught.value.errors[0]
    assert got_field == field
    for word in words:
        assert word in message
    assert str(caught.value).startswith(field + ": ")


@pytest.mark.parametrize("strategy", ["ddp", "diloco"])
def test_a_group_unit_may_be_longer_than_the_stretch_its_bounds_were_measured_on(
    tiny_raw, strategy
):
    """A ddp rank commits its residual every 20 steps inside its unit, and a DiLoCo round its
    segments, so either unit runs longer than the steps a verifier's bounds cover."""
    group = {"distributed": {"nodes": 2, "strategy": strategy}, "training": {"max_steps": 400}}
    assert parse_spec(merge(tiny_raw, group | {"checkpoint": {"every": 20}}))
    longer = merge(tiny_raw, group | {"checkpoint": {"every": 200}})
    assert parse_spec(longer).checkpoint.every == 200


def test_missing_data_section(tiny_raw):
    del tiny_raw["data"]
    with pytest.raises(SpecError) as caught:
        parse_spec(tiny_raw)
    assert caught.value.errors == [("data", "Field required")]


def test_yaml_syntax_error_is_a_spec_error():
    with pytest.raises(SpecError, match=r"^line 1, column 17: expected ',' or ']'"):
        parse_spec("model: [unclosed")


def test_unreadable_spec_file(tmp_path):
    with pytest.raises(SpecError, match="cannot read"):
        load_spec(tmp_path / "absent.yaml")


def test_spec_hash_ignores_key_order_and_defaults(tiny_raw):
    reordered = dict(reversed(list(tiny_raw.items())))
    explicit = merge(tiny_raw, {"training": {"betas": [0.9, 0.95]}})
    assert parse_spec(tiny_raw).sha256() == parse_spec(reordered).sha256()
    assert parse_spec(tiny_raw).sha256() == parse_spec(explicit).sha256()
    assert (
        parse_spec(tiny_raw).sha256()
        != parse_spec(merge(tiny_raw, {"training": {"lr": 1e-3}})).sha256()
    )


def test_round_trip_through_dump(tiny_raw):
    spec = parse_spec(tiny_raw)
    assert parse_spec(spec.model_dump(mode="json")) == spec


def test_single_node_specs_keep_their_canonical_form(tiny_raw):
    """Distributed settings a single node cannot use stay out of its hash."""
    assert parse_spec(tiny_raw).model_dump(mode="json")["distributed"] == {
        "nodes": 1,
        "strategy": "single",
    }


def test_distributed_settings_round_trip(tiny_raw):
    raw = merge(
        tiny_raw,
        {
            "distributed": {
                "nodes": 4,
                "strategy": "diloco",
                "quorum": 3,
                "unit_deadline_s": 30,
                "diloco": {"inner_steps": 25},
                "compression": {"ratio": 0.05, "selection": "random", "bits": 2},
                "aggregation": {"method": "centered_clip"},
            }
        },
    )
    spec = parse_spec(raw)
    assert spec.distributed.diloco.outer_lr == 0.7
    assert spec.distributed.compression.error_feedback is True
    assert parse_spec(spec.model_dump(mode="json")) == spec
    assert spec.sha256() != parse_spec(merge(raw, {"distributed": {"quorum": 4}})).sha256()
