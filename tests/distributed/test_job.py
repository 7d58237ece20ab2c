"""A spec's distributed section becomes the group's settings."""

from __future__ import annotations

import pytest

from node.distributed.aggregation import Aggregator
from node.distributed.compression import Compressor
from node.distributed.diloco import DilocoConfig
from node.distributed.group import DistributedConfigError, GroupConfig
from node.distributed.job import group_config
from node.engine import load_spec, parse_spec


def test_the_example_diloco_spec_maps_to_its_group() -> None:
    spec = load_spec("node/specs/tiny-diloco.yaml")
    assert group_config(spec, updates_dir="updates") == DilocoConfig(
        ranks=4,
        compressor=Compressor(bits=2, seed=1337),
        aggregator=Aggregator("centered_clip", clip_multiplier=1.0, clip_iterations=3),
        quorum=3,
        deadline_s=60.0,
        updates_dir="updates",
        inner_steps=100,
        outer_lr=1.0,
        outer_momentum=0.5,
    )


def test_a_ddp_spec_without_settings_gets_the_plain_all_reduce() -> None:
    raw = load_spec("node/specs/tiny.yaml").model_dump(mode="json")
    raw["distributed"] = {"nodes": 3, "strategy": "ddp"}
    raw["checkpoint"]["every"] = 20
    assert group_config(parse_spec(raw)) == GroupConfig(ranks=3, compressor=Compressor(seed=1337))


def test_a_single_node_spec_has_no_group() -> None:
    with pytest.raises(DistributedConfigError, match="single"):
        group_config(load_spec("node/specs/tiny.yaml"))


@pytest.mark.parametrize(
    ("strategy", "every", "error_feedback", "steps"),
    [
        ("ddp", 20, True, []),
        ("ddp", 25, True, [20]),
        ("ddp", 60, True, [20, 40]),
        ("ddp", 60, False, []),  # nothing carries from one step into the next
        ("diloco", 60, True, []),  # a round commits segments instead
    ],
)
def test_a_ddp_rank_commits_its_residual_every_20_steps_inside_its_unit(
    strategy, every, error_feedback, steps
) -> None:
    raw = load_spec("node/specs/tiny.yaml").model_dump(mode="json")
    raw["distributed"] = {
        "nodes": 3,
        "strategy": strategy,
        "compression": {"ratio": 0.1, "bits": 8, "error_feedback": error_feedback},
    }
    if strategy == "diloco":
        raw["distributed"]["diloco"] = {"inner_steps": every}
    raw["checkpoint"]["every"] = every
    raw["training"]["max_steps"] = 2 * every
    spec = parse_spec(raw)
    assert list(group_config(spec).residual_steps(spec)) == steps
