"""A provider daemon with a gateway posts a line to the job's log for each unit it commits."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator

import httpx
import pytest
from click.testing import CliRunner
from daemon_support import Daemon, end_open_auctions, wait_for
from test_daemon import bids_in, create_job, events, reveals_in, wait_paid

from marketplace.cli import main
from marketplace.processes import terminate
from marketplace.storage import Storage

pytestmark = [pytest.mark.slow, pytest.mark.anvil]

LINE = re.compile(
    r"slot 0 unit (\d): steps (\d+) to (\d+), loss \d+\.\d{4}, checkpoint (\w+) "
    r"\(worth \d+ GPU-seconds\) committed in block (\d+)"
)


@pytest.fixture
def gateway(anvil, manifest, deployment, ipfs_nodes, tmp_path) -> Iterator[str]:
    """`zoo-compute gateway index` and `gateway serve` on the node tests' chain; the server's
    URL."""
    env = {
        "ZOO_RPC_URL": anvil.rpc_url,
        "ZOO_MANIFEST": str(manifest),
        "ZOO_HOME": str(tmp_path / "gateway"),
        "ZOO_IPFS_API": ipfs_nodes[0].multiaddr,
        "ZOO_IPFS_REPLICAS": "[]",
    }
    cli = [sys.executable, "-m", "marketplace.cli", "gateway"]
    with open(tmp_path / "gateway.log", "ab") as out:
        indexer = subprocess.Popen(
            [*cli, "index", "--interval", "0.2", "--log-level", "WARNING"],
            env=os.environ | env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        server = subprocess.Popen(
            [*cli, "serve", "--port", "0", "--log-level", "INFO"],
            env=os.environ | env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        found = wait_for(
            lambda: re.search(
                r"Uvicorn running on (http://127\.0\.0\.1:\d+)",
                (tmp_path / "gateway.log").read_text(),
            ),
            60,
            "the gateway",
        )
        yield found.group(1)
    finally:
        terminate(server)
        terminate(indexer)


def test_a_line_for_each_committed_unit(
    ledger, cast, onboarded, real_time_chain, node_env, ipfs_nodes, gateway, tmp_path
):
    end_open_auctions(ledger)
    daemon = Daemon(
        node_env.with_home(tmp_path / "home") | {"ZOO_GATEWAY_URL": gateway},
        tmp_path / "daemon.log",
    )
    try:
        daemon.wait_ready()
        with Storage(ipfs_nodes[0].multiaddr, []) as storage:
            job_id = create_job(ledger, cast, storage)
        reveals_in(
            ledger, job_id, bids_in(ledger, cast, job_id, onboarded.address), onboarded.address
        )
        wait_paid(ledger, job_id, onboarded.address)

        def posted() -> list[dict] | None:
            lines = httpx.get(f"{gateway}/jobs/{job_id}/logs").json()
            return lines if len(lines) == 3 else None

        lines = wait_for(posted, 30, "the daemon's log lines")
    finally:
        daemon.stop()

    committed = events(ledger, "CheckpointCommitted", job_id)
    assert [line["author"] for line in lines] == [onboarded.address] * 3
    for line, unit in zip(lines, committed):
        index, start, end, cid, block = LINE.fullmatch(line["line"]).groups()
        assert (int(index), cid, int(block)) == (
            unit["args"]["index"],
            unit["args"]["cid"],
            unit["blockNumber"],
        )
        # the spec's units are two steps
        assert (int(start), int(end)) == (2 * int(index), 2 * int(index) + 2)

    shown = CliRunner().invoke(main, ["jobs", "--gateway", gateway, "logs", str(job_id)])
    assert shown.exit_code == 0, shown.output
    assert shown.output.splitlines() == [
        f"{onboarded.address[:10]}  {line['line']}" for line in lines
    ]
