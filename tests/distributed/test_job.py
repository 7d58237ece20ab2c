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
