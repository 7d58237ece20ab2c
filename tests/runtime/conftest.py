"""The ledger deployed on the session's Anvil for the runtime's tests, each test on a fresh
snapshot."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from marketplace.chain.deploy import Deployment, deploy
from marketplace.chain.ledger import Ledger
from marketplace.devnet.accounts import devnet_account


@pytest.fixture(scope="session")
def deployment(w3, tmp_path_factory) -> Deployment:
    return deploy(w3, devnet_account(0), manifest=tmp_path_factory.mktemp("deploy") / "31337.json")


@pytest.fixture
def ledger(w3, deployment) -> Iterator[Ledger]:
    """The deployed ledger; every test starts from the freshly deployed state."""
    snapshot = w3.provider.make_request("evm_snapshot", [])["result"]
    yield Ledger(w3, deployment)
    w3.provider.make_request("evm_revert", [snapshot])
