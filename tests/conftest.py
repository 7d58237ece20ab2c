"""Fixtures every test folder shares: one real Anvil chain per session."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from web3 import Web3

from marketplace.chain.anvil import Anvil


@pytest.fixture(scope="session")
def anvil() -> Iterator[Anvil]:
    with Anvil() as chain:
        yield chain


@pytest.fixture(scope="session")
def w3(anvil) -> Web3:
    return Web3(Web3.HTTPProvider(anvil.rpc_url))
