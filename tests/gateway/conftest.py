"""A ledger on the shared Anvil with one whole job run on it, an IPFS node, and a fresh gateway
database per test."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from gateway_support import UNLIMITED, gateway_env, wait_for_http, wait_until_caught_up
from web3.logs import DISCARD

from marketplace.chain.anvil import advance_time
from marketplace.chain.deploy import ZEN, Parameters, deploy
from marketplace.chain.ledger import JobRequest, Ledger
from marketplace.config import Settings
from marketplace.devnet.accounts import devnet_account
from marketplace.devnet.scripted_job import Cast, Scenario, cid_of_bytes, onboard, run_job
from marketplace.gateway.api.main import create_app
from marketplace.gateway.db import open_database
from marketplace.gateway.indexer import Indexer
from marketplace.processes import free_port, terminate
from marketplace.protocol.terms import Tier


@pytest.fixture(scope="module")
def ledger(w3, tmp_path_factory):
    deployment = deploy(
        w3,
        devnet_account(0),
        Parameters(verification_fee=ZEN // 10),
        manifest=tmp_path_factory.mktemp("deploy") / "31337.json",
    )
    return Ledger(w3, deployment)


@pytest.fixture(scope="module")
def trusted_manifest(ledger, tmp_path_factory) -> Iterator[None]:
    """The SDK in this process knows the module's ledger from its own copy of the manifest, as a
    user's machine does: it checks what the gateway hands over to sign against it."""
    manifest = ledger.deployment.write(tmp_path_factory.mktemp("trusted") / "manifest.json")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ZOO_MANIFEST", str(manifest))
        yield


@pytest.fixture(scope="module")
def cast() -> Cast:
    accounts = [devnet_account(i) for i in range(1, 7)]
    return Cast(
        governor=devnet_account(0),
        user=accounts[0],
        providers=tuple(accounts[1:4]),
        verifiers=tuple(accounts[4:6]),
    )


@pytest.fixture(scope="module")
def slash_amount() -> int:
    return 250 * ZEN


@pytest.fixture(scope="module")
def story(ledger, cast, slash_amount):
    """A two-node job settled, then the losing bidder slashed for downtime: it alone bids on a
    second job, whose collateral makes the Downtime share `slash_amount`, and misses its first
    checkpoint; the second verifier reports it. The second job stays running, its slot auctioned
    again."""
    scenario = Scenario(nodes=2, units=3)
    onboard(ledger, cast, scenario)
    outcome = run_job(ledger, cast, scenario, cid_of_bytes(b"gateway job spec"))
    loser = next(p for p in cast.providers if p.address not in outcome.winners)
    # Collateral is half a slot's budget; a Downtime slash takes a fifth of it.
    request = JobRequest(
        spec_cid=cid_of_bytes(b"gateway job spec, abandoned"),
        tier=Tier.COMMUNITY,
        nodes=1,
        units_per_node=3,
        checkpoint_interval=scenario.checkpoint_interval,
        sample_rate_bps=scenario.sample_rate_bps,
        max_price=scenario.max_price,
        budget=slash_amount * 10,
    )
    ledger.approve(cast.user, ledger.market.address, request.budget)
    receipt = ledger.send(ledger.market.functions.createJob(request.as_struct()), cast.user)
    job_id = ledger.market.events.JobCreated().process_receipt(receipt, errors=DISCARD)[0]["args"][
        "jobId"
    ]
    assert job_id == outcome.job_id + 1
    bid = ledger.commit_bid(loser, job_id, scenario.bids[0])
    advance_time(ledger.w3, ledger.market.functions.bidWindow().call() + 1)
    ledger.reveal_bid(loser, bid)
    advance_time(ledger.w3, ledger.market.functions.revealWindow().call() + 1)
    ledger.close_auction(cast.governor, job_id)
    advance_time(ledger.w3, scenario.checkpoint_interval + 1)
    ledger.send(ledger.report_downtime_call(job_id, 0), cast.verifiers[1])
    return outcome


@pytest.fixture
def sessions(tmp_path):
    return open_database(f"sqlite:///{tmp_path / 'gateway.sqlite3'}")


@pytest.fixture
def indexer(ledger, sessions) -> Indexer:
    return Indexer(ledger.w3, ledger.deployment, sessions)


@pytest.fixture
def settings(ledger, ipfs_api, tmp_path) -> Settings:
    """The gateway's settings: this test's database, the module's ledger, the session's IPFS
    node."""
    manifest = ledger.deployment.write(tmp_path / "manifest.json")
    return Settings(
        home=tmp_path,
        rpc_url=ledger.w3.provider.endpoint_uri,
        manifest=manifest,
        ipfs_api=ipfs_api,
        database_url=f"sqlite:///{tmp_path / 'gateway.sqlite3'}",
        gateway_read_limit=UNLIMITED,
        gateway_write_limit=UNLIMITED,
    )


@pytest.fixture
def client(settings) -> TestClient:
    return TestClient(create_app(settings))


@pytest.fixture(scope="module")
def served_gateway(ledger, story, ipfs_api, tmp_path_factory) -> Iterator[str]:
    """`zoo-compute gateway index` and `gateway serve` as processes on the module's ledger; the
    server's URL."""
    root = tmp_path_factory.mktemp("served")
    env = gateway_env(ledger, root, ipfs_api)
    cli = [sys.executable, "-m", "marketplace.cli", "gateway"]
    port = free_port()
    logs = open(root / "gateway.log", "w")  # noqa: SIM115 - closed below, after both processes stop
    indexer = subprocess.Popen(
        [*cli, "index", "--interval", "0.2", "--log-level", "WARNING"],
        env=env,
        cwd=root,
        stdout=logs,
        stderr=subprocess.STDOUT,
    )
    server = subprocess.Popen(
        [*cli, "serve", "--port", str(port), "--log-level", "WARNING"],
        env=env,
        cwd=root,
        stdout=logs,
        stderr=subprocess.STDOUT,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        wait_for_http(f"{url}/health", server, log=root / "gateway.log")
        wait_until_caught_up(url, ledger.w3.eth.block_number, indexer)
        yield url
    finally:
        terminate(server)
        terminate(indexer)
        logs.close()
