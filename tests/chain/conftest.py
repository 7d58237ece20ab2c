"""A real Anvil chain with the ledger deployed from source, shared by the chain tests."""

from __future__ import annotations

import pytest

from marketplace.chain.deploy import ZEN, Parameters, deploy
from marketplace.chain.ledger import Ledger
from marketplace.devnet.accounts import devnet_account
from marketplace.devnet.scripted_job import Cast

PARAMETERS = Parameters(verification_fee=ZEN // 10)


@pytest.fixture(scope="session")
def governor():
    return devnet_account(0)


@pytest.fixture(scope="session")
def deployment(w3, governor, tmp_path_factory):
    return deploy(
        w3, governor, PARAMETERS, manifest=tmp_path_factory.mktemp("deploy") / "31337.json"
    )


@pytest.fixture
def ledger(w3, deployment):
    """The deployed ledger; every test starts from the freshly deployed state."""
    snapshot = w3.provider.make_request("evm_snapshot", [])["result"]
    yield Ledger(w3, deployment)
    w3.provider.make_request("evm_revert", [snapshot])


@pytest.fixture
def cast(governor) -> Cast:
    accounts = [devnet_account(i) for i in range(1, 7)]
    return Cast(
        governor=governor,
        user=accounts[0],
        providers=tuple(accounts[1:4]),
        verifiers=tuple(accounts[4:6]),
    )
