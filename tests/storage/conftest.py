"""Fixtures that run real embedded IPFS nodes as separate processes on free loopback ports."""

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from .support import CHUNK, MAX_LINKS, Node, random_bytes, start_nodes


class NodeFactory:
    """Starts nodes on demand (fresh repos, or a given one to test restarts) and stops them
    all, by process id, at teardown."""

    def __init__(self, tmp_path_factory: pytest.TempPathFactory) -> None:
        self._tmp = tmp_path_factory
        self.started: list[Node] = []

    def start(self, repo: Path | None = None, env: dict[str, str] | None = None) -> Node:
        """A node on `repo` (else a fresh one), with `env` added to its environment."""
        return self.start_many(1, [repo] if repo else None, env)[0]

    def start_many(
        self, count: int, repos: list[Path] | None = None, env: dict[str, str] | None = None
    ) -> list[Node]:
        repos = repos or [self._tmp.mktemp("ipfs") / "repo" for _ in range(count)]
        nodes = start_nodes(repos, env)
        self.started += nodes
        return nodes

    def stop_all(self) -> None:
        """Signal every node first, then wait: they shut down side by side."""
        for node in self.started:
            if node.process.poll() is None:
                node.process.send_signal(signal.SIGTERM)
        for node in self.started:
            node.stop()


@pytest.fixture
def node_factory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeFactory]:
    factory = NodeFactory(tmp_path_factory)
    yield factory
    factory.stop_all()


@pytest.fixture(scope="session")
def shared_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    """One node for tests that only add and read (no GC, no restarts)."""
    [node] = start_nodes([tmp_path_factory.mktemp("shared") / "repo"])
    yield node
    node.stop()


@pytest.fixture
def node(node_factory: NodeFactory) -> Node:
    """A node of the test's own, for tests that collect garbage, corrupt or restart."""
    return node_factory.start()


@pytest.fixture(scope="session")
def two_level_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One chunk more than a single node of 174 links can hold: the smallest file whose
    balanced DAG needs a second level."""
    path = tmp_path_factory.mktemp("data") / "two-level.bin"
    path.write_bytes(random_bytes(MAX_LINKS * CHUNK + 1, seed=174))
    return path
