"""One devnet for the end-to-end tests: real Anvil, IPFS nodes, Redis, Celery, daemons and torch."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from dotenv import dotenv_values
from eth_account.signers.local import LocalAccount
from web3 import Web3

from marketplace import jobs
from marketplace.chain.deploy import ZEN, Deployment
from marketplace.chain.ledger import Hardware, Ledger, SealedBid
from marketplace.config import Settings
from marketplace.devnet.accounts import devnet_account
from marketplace.devnet.network import Devnet, State
from marketplace.protocol.terms import JobStatus, Tier
from marketplace.storage import Storage
from node.daemon import onboarding

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

    def enlist(self, *indices: int, endpoint: str | None = None) -> list[LocalAccount]:
        """Accounts `indices` of the devnet's mnemonic (ones nothing else on the devnet uses) as
        providers that run no daemon: funded, registered with a real benchmark report (and
        `endpoint`, where a group's ranks reach it), staked and admitted. The test acts for them
        by hand, as cheaters would."""
        ledger, accounts = self.ledger, [devnet_account(i) for i in indices]
        with self.storage() as storage:
            for account in accounts:
                ledger.w3.provider.make_request(
                    "anvil_setBalance", [account.address, hex(10 * 10**18)]
                )
                ledger.transfer(devnet_account(0), account.address, 20_000 * ZEN)
                _, report = onboarding.publish_benchmark(storage, replicas=3)
                hardware = Hardware("cpu", 0, 0, 1, endpoint or f"by-hand-{account.address}")
                onboarding.register(ledger, account, Tier.COMMUNITY, hardware, report)
                onboarding.stake_with_permit(ledger, account, 10_000 * ZEN)
        wait_for(
            lambda: all(ledger.staking_account(a.address)["admitted"] for a in accounts),
            60,
            "the admissions",
        )
        return accounts

    def underbid(self, account: LocalAccount, job_id: int, price: int = ZEN // 2) -> SealedBid:
        """Seal a bid under the honest providers' prices for the open job `job_id`, at once:
        its bid window is a few seconds."""
        return self.ledger.commit_bid(account, job_id, price)

    def take(self, *bids: tuple[LocalAccount, SealedBid]) -> None:
        """Reveal each (account, sealed bid) in its window, then see each account hold its
        job's slot 0, closing the auction itself if no honest provider bid (each bids on one
        job at a time)."""
        ledger = self.ledger
        for account, bid in bids:
            deadline = ledger.job(bid.job_id)["bidDeadline"]
            wait_for(
                lambda deadline=deadline: ledger.w3.eth.get_block("latest")["timestamp"] > deadline,
                30,
                "the reveal window",
                poll=0.2,
            )
            ledger.reveal_bid(account, bid)
        for account, bid in bids:
            jobs.ChainJob(ledger, account, bid.job_id, poll=0.2).wait(until=JobStatus.RUNNING)
            assert ledger.slot(bid.job_id, 0)["provider"] == account.address, "outbid"

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


def wait_for_fee_claims(ledger, job_id: int, verifiers: list[str], timeout: float = 120) -> None:
    """Until every verifier that verified units of the settled job has claimed its fees. A claim
    moves them into what the market owes the verifier, so `owed` is 0 before it as after the
    withdrawal that follows: only the claim events tell the two apart."""
    owed_fees = {
        v for v in verifiers if ledger.verification.functions.verificationsBy(job_id, v).call()
    }

    def claimed() -> bool:
        logs = ledger.market.events.VerificationFeesClaimed().get_logs(
            from_block=ledger.deployment.deploy_block, argument_filters={"jobId": job_id}
        )
        return {log["args"]["verifier"] for log in logs} >= owed_fees

    wait_for(claimed, timeout, "the verifiers' fee claims")
