"""`zoo-compute train` fails in one clear line, loses nothing, and `--no-wait` returns the job
id."""

from __future__ import annotations

import subprocess
import sys

import pytest

from marketplace.protocol.terms import JobStatus

from .conftest import SPEC

pytestmark = pytest.mark.slow


def train(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "marketplace.cli", "train", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def one_line_error(result: subprocess.CompletedProcess) -> str:
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    return lines[0]


def test_invalid_spec_names_the_field(network, tmp_path):
    spec = tmp_path / "bad.yaml"
    spec.write_text(SPEC.read_text().replace("n_head: 4", "n_head: 5"))
    error = one_line_error(train(network.env(), "--config", str(spec), "--max-budget", "10"))
    assert "model.n_head" in error


def test_no_chain_at_the_rpc_url(network):
    env = network.env() | {"ZOO_RPC_URL": "http://127.0.0.1:9"}
    error = one_line_error(train(env, "--config", str(SPEC), "--max-budget", "10"))
    assert "no chain answers at http://127.0.0.1:9" in error


def test_budget_below_the_reserve_and_too_little_zen_escrow_nothing(network):
    ledger, user = network.ledger, network.user.address
    held, jobs_before = ledger.balance(user), ledger.market.functions.jobCount().call()
    error = one_line_error(train(network.env(), "--config", str(SPEC), "--max-budget", "0.001"))
    assert "below the reserve" in error
    error = one_line_error(
        train(network.env(), "--config", str(SPEC), "--max-budget", "1000000000")
    )
    assert "holds" in error and "the budget needs" in error
    assert ledger.balance(user) == held and ledger.market.functions.jobCount().call() == jobs_before


def test_no_bids_cancels_and_shows_the_refund(network):
    ledger, user = network.ledger, network.user.address
    held = ledger.balance(user)
    # No provider of the Gold tier exists on the devnet.
    result = train(
        network.env(),
        "--config",
        str(SPEC),
        "--max-budget",
        "500",
        "--tier",
        "gold",
        "--auction-timeout",
        "15",
    )
    error = one_line_error(result)
    assert "no bids" in error and "500.000000 ZEN refunded" in error
    job_id = ledger.market.functions.jobCount().call()
    assert ledger.market.functions.status(job_id).call() == JobStatus.CANCELLED
    assert ledger.balance(user) == held


def test_no_wait_prints_the_job_id(network):
    result = train(
        network.env(), "--config", str(SPEC), "--max-budget", "50", "--tier", "gold", "--no-wait"
    )
    assert result.returncode == 0, result.stderr
    job_id = int(result.stdout.strip().splitlines()[-1])
    ledger = network.ledger
    assert job_id == ledger.market.functions.jobCount().call()
    assert ledger.market.functions.status(job_id).call() == JobStatus.OPEN
    ledger.send(ledger.market.functions.cancelJob(job_id), network.user)
