"""One devnet for the end-to-end tests: real Anvil, IPFS nodes, Redis, Celery, daemons and torch."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from dotenv import dotenv_values
from web3 import Web3

from marketplace.chain.deploy import Deployment
from marketplace.chain.ledger import Ledger
from marketplace.config import Settings
from marketplace.devnet.accounts import devnet_account
from marketplace.devnet.network import Devnet, State
from marketplace.storage import Storage

SPEC = Path(__file__).resolve().parents[2] / "node" / "specs" / "tiny.yaml"


@dataclass
class Network:
    """The running devnet as a test sees it."""

    root: Path
    devnet: Devnet
    ledger: Ledger
    settings: Settings  # the user's

    @property
    def state(self) -> State:
        """What runs now: a test may have added a provider."""
        return State.load(self.root)

    @property
    def user(self):
        return devnet_account(1)

    def env(self) -> dict[str, str]:
        """The environment a `zoo-compute` command of the user runs with."""
        return os.environ | dotenv_values(self.root / "user.env")

    def storage(self) -> Storage:
        return Storage(self.settings.ipfs_api, self.settings.ipfs_replicas)

    def provider_service(self, address: str):
        state = self.state
        name = next(n for n, a in state.accounts.items() if a == address)
        return state.service(name)

    def kill(self, address: str) -> None:
        """SIGKILL a provider's daemon and the processes it started (a group job's rank): a
        machine that vanishes mid-job."""
        self.provider_service(address).kill_tree()


@pytest.fixture(
    scope="package"
)  # stopped once the end-to-end tests are done, not at the session's end
def network(tmp_path_factory):
    root = tmp_path_factory.mktemp("devnet")
    devnet = Devnet(root, providers=3, verifiers=2, workers=1)
    state = devnet.up()
    try:
        w3 = Web3(Web3.HTTPProvider(state.rpc_url))
        ledger = Ledger(w3, Deployment.load(Path(state.manifest)))
        settings = Settings(_env_file=root / "user.env")
        yield Network(root, devnet, ledger, settings)
    finally:
        devnet.down()
        assert not State.load(root).running(), "devnet down stops every process devnet up started"


@pytest.fixture(scope="package")
def gateway(network):
    """The devnet's own gateway (`devnet up` runs its API and its Celery indexer): its base URL,
    once the index has caught up with the chain."""
    url = network.state.gateway_url
    head = network.ledger.w3.eth.block_number
    wait_for(
        lambda: (httpx.get(f"{url}/health").json()["indexed_block"] or 0) >= head,
        60,
        "the devnet's gateway to index the chain",
        poll=0.2,
    )
    return url


def wait_for(condition, timeout: float, what: str, poll: float = 0.5):
    """Poll `condition` until it returns something truthy; fail the test after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := condition():
            return value
        time.sleep(poll)
    pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}")
