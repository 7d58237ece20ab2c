"""Fixtures that run real embedded IPFS nodes as separate processes on free loopback ports."""

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from .support import CHUNK, MAX_LINKS, Node, random_bytes, start_node


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "filterwarnings", "ignore:The 'strict' parameter is no longer needed:FutureWarning")


@pytest.fixture
def node_factory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., Node]]:
    """Start nodes on demand (a fresh repo, or a given one to test restarts); all are
    stopped, by process id, at teardown."""
    started: list[Node] = []

    def start(repo: Path | None = None) -> Node:
        node = start_node(repo or tmp_path_factory.mktemp("ipfs") / "repo")
        started.append(node)
        return node

    yield start
    for node in started:
        node.stop()


@pytest.fixture(scope="session")
def shared_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    """One node for tests that only add and read (no GC, no restarts)."""
    node = start_node(tmp_path_factory.mktemp("shared") / "repo")
    yield node
    node.stop()


@pytest.fixture
def node(node_factory: Callable[..., Node]) -> Node:
    """A node of the test's own, for tests that collect garbage, corrupt or restart."""
    return node_factory()


@pytest.fixture(scope="session")
def two_level_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One chunk more than a single node of 174 links can hold: the smallest file whose
    balanced DAG needs a second level."""
    path = tmp_path_factory.mktemp("data") / "two-level.bin"
    path.write_bytes(random_bytes(MAX_LINKS * CHUNK + 1, seed=174))
    return path
