"""Fixtures every test folder shares: one real Anvil chain per session."""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator

import pytest
from web3 import Web3

from marketplace.chain.anvil import Anvil

# Every IPFS node the tests start, and every client (Storage reads it from the settings), share
# one RPC API token, as a devnet's processes do; the nodes inherit it from this environment.
os.environ.setdefault("ZOO_IPFS_API_TOKEN", secrets.token_urlsafe(32))


@pytest.fixture(scope="session")
def anvil() -> Iterator[Anvil]:
    with Anvil() as chain:
        yield chain


@pytest.fixture(scope="session")
def w3(anvil) -> Web3:
    return Web3(Web3.HTTPProvider(anvil.rpc_url))
