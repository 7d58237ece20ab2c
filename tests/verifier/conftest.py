"""Real parts for the verifier tests: Anvil and the ledger, an IPFS node, Redis, a Celery worker."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from eth_account.signers.local import LocalAccount

from marketplace.chain.anvil import advance_time, mine
from marketplace.chain.deploy import ZEN, Parameters, deploy
from marketplace.chain.ledger import CommittedUnit, JobRequest, Ledger
from marketplace.devnet.accounts import devnet_account
from marketplace.devnet.redis_server import RedisServer
from marketplace.devnet.scripted_job import Cast, Scenario, cid_of_bytes, onboard
from marketplace.processes import terminate
from marketplace.protocol.checkpoint import Checkpoint
from marketplace.protocol.terms import Tier
from marketplace.protocol.units import unit_steps
from marketplace.storage import Storage
from node.engine import JobSpec, parse_spec, run_unit, unit_shard
from verifier.celery_app import configure
from verifier.daemon import VerifierDaemon
from verifier.journal import Journal

# A job small enough that a unit re-runs in a fraction of a second: 3 units of 3 steps per slot.
SPEC = """
name: verifier-test
model: {architecture: mlp, context: 4, n_embd: 8, hidden: 32, n_layer: 1}
data: {seq_len: 16, sources: [{kind: synthetic, generator: markov, num_bytes: 4096, seed: 1}]}
training: {lr: 1.0e-2, batch_size: 8, max_steps: 9, warmup_steps: 1, eval_batches: 1}
checkpoint: {every: 3}
reproducibility: {seed: 0, num_threads: 1}
"""
UNITS = 3
GPU_SECONDS = 60
PARAMETERS = Parameters(verification_fee=ZEN // 10, false_report_slash=100 * ZEN)


def _wait(
    ready: Callable[[], bool], process: subprocess.Popen, log: Path, what: str, timeout: float = 60
) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if process.poll() is not None or time.monotonic() > deadline:
            terminate(process)
            raise RuntimeError(f"{what} did not start: {log.read_text(errors='replace')[-2000:]}")
        time.sleep(0.1)


# --- the services, one of each per session --------------------------------------------------


@pytest.fixture(scope="session")
def deployment(w3, tmp_path_factory):
    return deploy(
        w3, devnet_account(0), PARAMETERS, manifest=tmp_path_factory.mktemp("deploy") / "31337.json"
    )


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory) -> Iterator[str]:
    with RedisServer(tmp_path_factory.mktemp("redis")) as server:
        yield server.url


@pytest.fixture(scope="session")
def celery(redis_url):
    return configure(redis_url)


@pytest.fixture(scope="session")
def worker(redis_url, ipfs_api, tmp_path_factory) -> Iterator[subprocess.Popen]:
    """`zoo-compute verifier worker` as its own process, ready once Celery says so."""
    log = tmp_path_factory.mktemp("worker") / "worker.log"
    env = os.environ | {
        "ZOO_REDIS_URL": redis_url,
        "ZOO_IPFS_API": ipfs_api,
        "ZOO_IPFS_REPLICAS": "[]",
    }
    with open(log, "ab") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "marketplace.cli", "verifier", "worker", "--concurrency", "1"],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    _wait(lambda: "ready." in log.read_text(errors="replace"), process, log, "Celery worker")
    yield process
    terminate(process)


# --- per-test state -------------------------------------------------------------------------


@pytest.fixture
def ledger(w3, deployment) -> Iterator[Ledger]:
    """The deployed ledger; every test starts from the freshly deployed state."""
    snapshot = w3.provider.make_request("evm_snapshot", [])["result"]
    yield Ledger(w3, deployment)
    w3.provider.make_request("evm_revert", [snapshot])


@pytest.fixture
def cast() -> Cast:
    accounts = [devnet_account(i) for i in range(1, 7)]
    return Cast(
        governor=devnet_account(0),
        user=accounts[0],
        providers=tuple(accounts[1:4]),
        verifiers=tuple(accounts[4:6]),
    )


@pytest.fixture
def storage(ipfs_api) -> Iterator[Storage]:
    with Storage(ipfs_api, []) as client:
        yield client


@pytest.fixture
def spec() -> JobSpec:
    return parse_spec(SPEC)


@pytest.fixture
def spec_cid(storage) -> str:
    return storage.add_bytes(SPEC.encode())


@pytest.fixture
def make_daemon(ledger, storage, celery, tmp_path) -> Iterator[Callable[..., VerifierDaemon]]:
    """Daemons of given verifier accounts, each with its own journal unless one is named."""
    journals: list[Journal] = []

    def make(account: LocalAccount, journal_path: Path | None = None) -> VerifierDaemon:
        journal = Journal(journal_path or tmp_path / f"{account.address}.sqlite3")
        journals.append(journal)
        return VerifierDaemon(ledger, account, journal, storage, celery, downtime_every=0)

    yield make
    for journal in journals:
        journal.close()


def _drive(daemons: list[VerifierDaemon], done: Callable[[], bool], timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError("the verifiers did not finish in time")
        for daemon in daemons:
            daemon.tick()
        mine(daemons[0].ledger.w3)
        time.sleep(0.1)


@pytest.fixture
def drive() -> Callable[..., None]:
    """Tick daemons, mining a block each round so samples become drawable, until `done()`."""
    return _drive


# --- a job with a scripted provider that really trains ---------------------------------------


@dataclass
class ScriptedProvider:
    """Trains units with the real engine, pins each checkpoint and commits it through the ledger."""

    ledger: Ledger
    storage: Storage
    account: LocalAccount
    spec: JobSpec
    job_id: int
    slot: int = 0
    checkpoint: Checkpoint | None = None

    def train(self, index: int) -> Checkpoint:
        spec = self.spec
        result = run_unit(
            spec,
            self.checkpoint,
            unit_shard(spec, self.slot),
            unit_steps(spec, index),
            device="cpu",
        )
        return result.checkpoint

    def commit(
        self, checkpoint: Checkpoint, state_hash: str | None = None, withheld: bool = False
    ) -> CommittedUnit:
        """Commit `checkpoint`, under its own state hash unless a (faked) one is given; a withheld
        checkpoint is committed under its CID but added to no node."""
        data = checkpoint.to_bytes()
        cid = cid_of_bytes(data) if withheld else self.storage.add_bytes(data)
        advance_time(self.ledger.w3, GPU_SECONDS)
        unit = self.ledger.commit_checkpoint(
            self.account,
            self.job_id,
            self.slot,
            cid,
            bytes.fromhex(state_hash or checkpoint.state_hash()),
        )
        self.checkpoint = checkpoint
        return unit

    def honest(self, index: int) -> CommittedUnit:
        return self.commit(self.train(index))


@pytest.fixture
def job(ledger, cast, storage, spec_cid) -> Callable[..., ScriptedProvider]:
    """Onboards the cast, creates a job of SPEC at a sample rate, auctions its `nodes` slots to
    the first providers (the one of slot 0 returned).
    Only the cast's verifiers numbered in `judges` stay staked: the ledger draws who judges among
    them."""

    def create(
        sample_rate_bps: int, judges: tuple[int, ...] = (0, 1), nodes: int = 1
    ) -> ScriptedProvider:
        scenario = Scenario()
        onboard(ledger, cast, scenario)
        for i, verifier in enumerate(cast.verifiers):
            if i not in judges:
                ledger.send(ledger.request_unstake_call(scenario.verifier_stake), verifier)
        request = JobRequest(
            spec_cid=spec_cid,
            tier=Tier.COMMUNITY,
            nodes=nodes,
            units_per_node=UNITS,
            checkpoint_interval=3_600,
            sample_rate_bps=sample_rate_bps,
            max_price=100 * ZEN,
            budget=5_000 * ZEN,
        )
        job_id = ledger.create_job(cast.user, request)
        bidders = cast.providers[:nodes]
        bids = [ledger.commit_bid(bidder, job_id, 60 * ZEN) for bidder in bidders]
        advance_time(ledger.w3, PARAMETERS.bid_window + 1)
        for bidder, bid in zip(bidders, bids, strict=True):
            ledger.reveal_bid(bidder, bid)
        advance_time(ledger.w3, PARAMETERS.reveal_window + 1)
        ledger.close_auction(cast.governor, job_id)
        holder = ledger.slot(job_id, 0)["provider"]
        provider = next(p for p in bidders if p.address == holder)
        return ScriptedProvider(ledger, storage, provider, parse_spec(SPEC), job_id)

    return create
