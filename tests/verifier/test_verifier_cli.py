"""`zoo-compute verifier`: register and stake from a keystore, and the daemon as a process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner

from marketplace.chain.anvil import mine
from marketplace.chain.deploy import ZEN
from marketplace.cli import main
from marketplace.config import Settings
from marketplace.wallet import save

PASSWORD = "verifier test password"

pytestmark = pytest.mark.anvil


@pytest.fixture
def env(ledger, anvil, deployment, ipfs_api, redis_url, cast, tmp_path) -> dict[str, str]:
    """ZOO_* settings of a verifier whose keystore holds cast.verifiers[1]'s key."""
    home = tmp_path / "home"
    save(Settings(home=home), cast.verifiers[1], PASSWORD)
    manifest = tmp_path / "manifest.json"
    deployment.write(manifest)
    return {
        "ZOO_HOME": str(home),
        "ZOO_WALLET_PASSWORD": PASSWORD,
        "ZOO_RPC_URL": anvil.rpc_url,
        "ZOO_MANIFEST": str(manifest),
        "ZOO_IPFS_API": ipfs_api,
        "ZOO_IPFS_REPLICAS": "[]",
        "ZOO_REDIS_URL": redis_url,
        "ZOO_POLL_INTERVAL": "0.2",
    }


def test_register_and_stake(ledger, cast, env):
    address = cast.verifiers[1].address
    ledger.transfer(cast.governor, address, 5_000 * ZEN)
    runner = CliRunner(env=env)

    registered = runner.invoke(main, ["verifier", "register", "--endpoint", "http://127.0.0.1:9/v"])
    staked = runner.invoke(main, ["verifier", "stake", "--amount", "1500.5"])

    assert registered.exit_code == 0, registered.output
    assert staked.exit_code == 0, staked.output
    assert ledger.staking_account(address)["staked"] == 1_500_500_000_000_000_000_000
    assert ledger.staking.functions.isActiveVerifier(address).call()


def test_errors_are_one_line(env):
    runner = CliRunner(env=env | {"ZOO_WALLET_PASSWORD": "wrong"})
    wrong_password = runner.invoke(main, ["verifier", "start"])
    bad_amount = CliRunner(env=env).invoke(main, ["verifier", "stake", "--amount", "lots"])
    assert wrong_password.exit_code == 1 and "Traceback" not in wrong_password.output
    assert wrong_password.output.startswith("Error: wrong password")
    assert bad_amount.exit_code == 2 and "is not a number of ZEN" in bad_amount.output


@pytest.mark.slow
@pytest.mark.usefixtures("worker")
def test_daemon_process_posts_a_result_and_stops_on_sigterm(job, env, tmp_path):
    provider = job(10_000, judges=(1,))  # the daemon's verifier, the only one staked
    ledger = provider.ledger
    log = tmp_path / "verifier.log"
    with open(log, "ab") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "marketplace.cli", "verifier", "start"],
            env=os.environ | env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    posted = ledger.verification.events.ResultPosted()
    try:
        unit = provider.honest(0)  # trained and committed while the verifier starts
        deadline = time.monotonic() + 90
        while not posted.get_logs(from_block=unit.block_number):
            assert process.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            mine(ledger.w3)
            time.sleep(0.3)
        assert "verifier ready: " in log.read_text()
    finally:
        process.send_signal(signal.SIGTERM)
        code = process.wait(timeout=30)
    assert code == 0, log.read_text()
    assert "verifier stopped" in log.read_text()
    (result,) = posted.get_logs(from_block=unit.block_number)
    assert result["args"]["pass"] is True
