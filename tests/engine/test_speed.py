"""A provider's measured speed is remembered between starts, for this machine only: a file that is
torn, forged, of other hardware or code, or with figures no machine has is measured over."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from node.engine import speed as speed_module
from node.engine.speed import MachineSpeed, Speed, forget_speed

FAST = Speed(flops_per_s=2e11, seconds_per_op=4e-6, bytes_per_s=3e8)
remembered_speed = speed_module.machine_speed.__wrapped__  # a start: no speed in the process


@pytest.fixture
def measured(monkeypatch) -> list[list[int]]:
    """The thread counts of each measuring, which returns FAST at each (no process spawned)."""
    calls: list[list[int]] = []

    def measure(device: str, counts: list[int]) -> MachineSpeed:
        calls.append(counts)
        return MachineSpeed(dict.fromkeys(counts, FAST))

    monkeypatch.setattr(speed_module, "_measure_apart", measure)
    return calls


def _only_file(folder: Path) -> Path:
    (path,) = folder.glob("speed-*.json")
    return path


def test_the_second_start_reads_the_speed_the_first_measured(tmp_path, measured):
    first = remembered_speed("cpu", 4, tmp_path)
    again = remembered_speed("cpu", 4, tmp_path)
    assert measured == [[1, 2, 4]]
    assert again == first == MachineSpeed(dict.fromkeys([1, 2, 4], FAST))


def test_other_thread_counts_are_measured_apart(tmp_path, measured):
    remembered_speed("cpu", 4, tmp_path)
    remembered_speed("cpu", 2, tmp_path)
    assert measured == [[1, 2, 4], [1, 2]]
    assert len(list(tmp_path.glob("speed-*.json"))) == 2


def test_forgetting_measures_again(tmp_path, measured):
    remembered_speed("cpu", 2, tmp_path)
    forget_speed(tmp_path)
    remembered_speed("cpu", 2, tmp_path)
    assert len(measured) == 2


@pytest.mark.parametrize(
    "spoil",
    [
        pytest.param(lambda saved: "{not json", id="torn"),
        pytest.param(lambda saved: saved | {"extra": 1}, id="unknown-field"),
        pytest.param(
            lambda saved: saved | {"by_threads": {"1": saved["by_threads"]["1"]}},
            id="a-count-missing",
        ),
        pytest.param(
            lambda saved: saved | {"key": saved["key"] | {"torch": "0.0.1"}}, id="other-torch"
        ),
        pytest.param(
            lambda saved: saved | {"key": saved["key"] | {"engine_sha256": "0" * 64}},
            id="other-engine",
        ),
    ],
)
def test_a_file_not_of_this_machine_is_measured_over(tmp_path, measured, spoil):
    remembered_speed("cpu", 2, tmp_path)
    path = _only_file(tmp_path)
    spoiled = spoil(json.loads(path.read_text()))
    path.write_text(spoiled if isinstance(spoiled, str) else json.dumps(spoiled))
    assert remembered_speed("cpu", 2, tmp_path) == MachineSpeed(dict.fromkeys([1, 2], FAST))
    assert len(measured) == 2
    assert json.loads(path.read_text())["by_threads"]["1"] == FAST.__dict__  # written anew


@pytest.mark.parametrize("figure", ["0", "-1e9", "Infinity", "NaN", '"fast"'])
def test_figures_no_machine_has_are_measured_over(tmp_path, measured, figure):
    """A forged figure (an infinitely fast machine bids on any job) is not believed."""
    remembered_speed("cpu", 1, tmp_path)
    path = _only_file(tmp_path)
    path.write_text(path.read_text().replace(repr(FAST.flops_per_s), figure))
    assert figure in path.read_text()
    assert remembered_speed("cpu", 1, tmp_path).at(1) == FAST
    assert len(measured) == 2


def test_an_unwritable_folder_leaves_the_speed_measured(tmp_path, measured, caplog):
    blocked = tmp_path / "file"
    blocked.write_text("")
    with caplog.at_level(logging.WARNING):
        assert remembered_speed("cpu", 1, blocked / "zoo-compute").at(1) == FAST
    assert "not remembered" in caplog.text


def test_the_folder_follows_xdg(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert speed_module.speed_folder() == tmp_path / "zoo-compute"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert speed_module.speed_folder() == Path.home() / ".cache" / "zoo-compute"
