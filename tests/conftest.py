"""Fixtures every test folder shares: one real Anvil chain and one IPFS node per session."""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator

import pytest
from web3 import Web3

from marketplace.chain.anvil import Anvil
from marketplace.processes import terminate

# Every IPFS node the tests start, and every client (Storage reads it from the settings), share
# one RPC API token, as a devnet's processes do; the nodes inherit it from this environment.
os.environ.setdefault("ZOO_IPFS_API_TOKEN", secrets.token_urlsafe(32))


_CACHE = pytest.StashKey[str]()


def pytest_configure(config: pytest.Config) -> None:
    """One cache folder for the run (a provider's measured speed, node.engine.speed), not the
    user's: every process the tests start inherits it, pytest-xdist's workers included."""
    if not hasattr(config, "workerinput"):
        os.environ["XDG_CACHE_HOME"] = config.stash[_CACHE] = tempfile.mkdtemp(prefix="zoo-cache-")


def pytest_unconfigure(config: pytest.Config) -> None:
    if (folder := config.stash.get(_CACHE, None)) is not None:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Under pytest-xdist (`-n 2 --dist loadgroup`, as scripts/test.sh runs the suite) a file's
    tests stay on one worker, so its module fixtures are built once, and the end-to-end tests
    all go to one worker, since they share one devnet."""
    for item in items:
        group = "e2e" if item.path.parent.name == "e2e" else item.nodeid.split("::")[0]
        item.add_marker(pytest.mark.xdist_group(group))


@pytest.fixture(scope="session")
def anvil() -> Iterator[Anvil]:
    with Anvil() as chain:
        yield chain


@pytest.fixture(scope="session")
def w3(anvil) -> Web3:
    return Web3(Web3.HTTPProvider(anvil.rpc_url))


@pytest.fixture(scope="session")
def ipfs_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """An embedded IPFS node process on a free loopback port; its API multiaddr once it writes
    `<repo>/api`."""
    repo = tmp_path_factory.mktemp("ipfs") / "repo"
    log = repo.with_suffix(".log")
    argv = [sys.executable, "-m", "marketplace.ipfs", "--repo", str(repo)]
    with open(log, "ab") as out:
        process = subprocess.Popen(
            [*argv, "--host", "127.0.0.1", "--port", "0"], stdout=out, stderr=subprocess.STDOUT
        )
    try:
        deadline = time.monotonic() + 30
        while not (repo / "api").exists():
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the IPFS node did not start: {log.read_text()[-800:]}")
            time.sleep(0.05)
        yield (repo / "api").read_text().strip() + "/http"
    finally:
        terminate(process)
