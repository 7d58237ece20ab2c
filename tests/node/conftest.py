"""A real chain, three real IPFS nodes and an onboarded provider wallet for the node tests."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner
from daemon_support import PASSWORD, Daemon, IpfsNode, end_open_auctions
from eth_account.signers.local import LocalAccount

from marketplace.chain.deploy import ZEN, Deployment, Parameters, deploy
from marketplace.chain.ledger import Ledger
from marketplace.cli import main
from marketplace.config import Settings
from marketplace.devnet.accounts import devnet_account
from marketplace.devnet.scripted_job import Cast, Scenario, onboard
from marketplace.storage import Storage
from marketplace.wallet import import_key

# Windows in seconds of chain time, which runs a block a second while a daemon runs. The tests
# skip each window once what it was waiting for is in (every bid, every reveal, the last unit),
# so the windows can be generous: a daemon killed after its bid and started again must still
# reveal in time on a slow machine.
PARAMETERS = Parameters(
    bid_window=30, reveal_window=30, verification_window=30, verification_fee=ZEN // 10
)


@pytest.fixture(scope="session")
def ipfs_nodes(tmp_path_factory) -> Iterator[list[IpfsNode]]:
    """Three, since every checkpoint is pinned on three."""
    root = tmp_path_factory.mktemp("ipfs")
    nodes = [IpfsNode(root / f"repo{i}") for i in range(3)]
    for node in nodes:
        node.wait_ready()
    yield nodes
    for node in nodes:  # all told to stop first: each takes about a second to shut down
        node.process.terminate()
    for node in nodes:
        node.stop()


@pytest.fixture(scope="module")
def storage(ipfs_nodes) -> Iterator[Storage]:
    """A client of the daemon's own IPFS node, where a test puts job specs and reads
    checkpoints."""
    with Storage(ipfs_nodes[0].multiaddr, []) as client:
        yield client


@pytest.fixture(scope="session")
def manifest(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("deploy") / "31337.json"


@pytest.fixture(scope="session")
def deployment(w3, manifest) -> Deployment:
    return deploy(w3, devnet_account(0), PARAMETERS, manifest=manifest)


@pytest.fixture(scope="session")
def ledger(w3, deployment) -> Ledger:
    return Ledger(w3, deployment)


@pytest.fixture
def fresh_ledger(ledger):
    """A ledger client of its own (job ids repeat after the revert, and a client caches spec
    CIDs by job id) on the session's chain, put back as it was after the test."""
    snapshot = ledger.w3.provider.make_request("evm_snapshot", [])["result"]
    yield Ledger(ledger.w3, ledger.deployment)
    ledger.w3.provider.make_request("evm_revert", [snapshot])


@pytest.fixture
def own_ledger(w3, tmp_path) -> Iterator[Ledger]:
    """Contracts of its own on the session's chain, so the only verifiers staked (and drawn) are
    the ones a test stakes itself; the chain is put back as it was after the test."""
    snapshot = w3.provider.make_request("evm_snapshot", [])["result"]
    yield Ledger(w3, deploy(w3, devnet_account(0), PARAMETERS, manifest=tmp_path / "31337.json"))
    w3.provider.make_request("evm_revert", [snapshot])


@pytest.fixture(scope="session")
def cast() -> Cast:
    """Scripted rivals: two providers that always bid high, a user, a verifier."""
    return Cast(
        governor=devnet_account(0),
        user=devnet_account(1),
        providers=(devnet_account(2), devnet_account(3)),
        verifiers=(devnet_account(4),),
    )


@pytest.fixture(scope="session")
def provider() -> LocalAccount:
    """The daemon's own account."""
    return devnet_account(7)


@dataclass
class NodeEnv:
    """What a provider process is given: ZOO_* variables, and its keystore."""

    base: dict[str, str]
    keystore: Path

    def with_home(self, home: Path) -> dict[str, str]:
        return self.base | {"ZOO_HOME": str(home)}


@pytest.fixture(scope="session")
def node_env(tmp_path_factory, anvil, manifest, deployment, ipfs_nodes) -> NodeEnv:
    home = tmp_path_factory.mktemp("provider")
    settings = Settings(home=home)
    _, keystore = import_key(settings, devnet_account(7).key.hex(), PASSWORD)
    base = {
        "ZOO_RPC_URL": anvil.rpc_url,
        "ZOO_MANIFEST": str(manifest),
        "ZOO_IPFS_API": ipfs_nodes[0].multiaddr,
        "ZOO_IPFS_REPLICAS": json.dumps([n.multiaddr for n in ipfs_nodes[1:]]),
        "ZOO_WALLET": str(keystore),
        "ZOO_WALLET_PASSWORD": PASSWORD,
        "ZOO_POLL_INTERVAL": "0.5",
    }
    return NodeEnv(base, keystore)


@pytest.fixture(scope="session")
def onboarded(ledger, cast, provider, node_env, tmp_path_factory) -> LocalAccount:
    """Rivals onboarded by script; the daemon's provider through `node register` and `node stake`,
    then attested the way a verifier would."""
    onboard(ledger, cast, Scenario(funding=20_000 * ZEN))
    ledger.transfer(cast.governor, provider.address, 20_000 * ZEN)
    env = node_env.with_home(tmp_path_factory.mktemp("onboard"))
    runner = CliRunner()
    registered = runner.invoke(main, ["node", "register", "--tier", "community"], env=env)
    assert registered.exit_code == 0, registered.output
    staked = runner.invoke(main, ["node", "stake", "--amount", "5000"], env=env)
    assert staked.exit_code == 0, staked.output
    (event,) = ledger.staking.events.ProviderRegistered().get_logs(
        from_block=0, argument_filters={"provider": provider.address}
    )
    attestation = event["args"]["attestation"]
    ledger.attest_benchmark(cast.verifiers[0], provider.address, attestation, 1)
    return provider


@pytest.fixture(scope="module")
def real_time_chain(w3) -> Iterator[None]:
    """A block a second while a module's daemons run, so deadlines pass in real time. Instant
    mining again after: the folders that follow share this chain, and at a block a second each of
    their transactions would wait for the next block."""
    w3.provider.make_request("evm_setIntervalMining", [1])
    yield
    w3.provider.make_request("evm_setAutomine", [True])


@pytest.fixture
def start_daemon(ledger, onboarded, real_time_chain, node_env, tmp_path) -> Iterator:
    """Starts daemons sharing one home (one journal) per test; kills leftovers at teardown."""
    end_open_auctions(ledger)
    started: list[Daemon] = []
    env = node_env.with_home(tmp_path / "home")

    def start() -> Daemon:
        daemon = Daemon(env, tmp_path / "daemon.log")
        started.append(daemon)
        daemon.wait_ready()
        return daemon

    yield start
    for daemon in started:
        daemon.stop()
