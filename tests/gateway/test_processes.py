"""The gateway as operators and the devnet run it: Celery beat indexing over Redis, and the CLI's
indexer and server."""

from __future__ import annotations

import multiprocessing
import subprocess
import sys
import time

import httpx
import pytest
from gateway_support import gateway_env, wait_for_http
from sqlalchemy import select

from marketplace.devnet.network import Devnet, State
from marketplace.devnet.redis_server import RedisServer
from marketplace.gateway import db
from marketplace.processes import free_port, terminate

pytestmark = pytest.mark.anvil


@pytest.fixture
def env(ledger, story, tmp_path) -> dict[str, str]:
    return gateway_env(ledger, tmp_path)


def wait_until_indexed(
    url: str, block: int, process: subprocess.Popen, timeout: float = 60
) -> None:
    sessions = db.open_database(url)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"exited with {process.returncode}: {process.stdout.read()}")
        with sessions() as session:
            if (session.scalar(select(db.IndexerState.next_block)) or 0) > block:
                return
        time.sleep(0.2)
    pytest.fail(f"block {block} not indexed in {timeout}s")


def start(argv: list[str], env: dict[str, str], cwd) -> subprocess.Popen:
    return subprocess.Popen(
        argv, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def test_celery_beat_indexes_the_chain(ledger, env, tmp_path):
    with RedisServer(tmp_path / "redis") as redis:
        worker = start(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "marketplace.gateway.tasks",
                "worker",
                "-B",
                "--pool",
                "solo",
                "--loglevel",
                "WARNING",
                "-s",
                str(tmp_path / "beat-schedule"),
            ],
            env | {"ZOO_REDIS_URL": redis.url},
            tmp_path,
        )
        try:
            wait_until_indexed(env["ZOO_DATABASE_URL"], ledger.w3.eth.block_number, worker)
        finally:
            terminate(worker)


def test_cli_indexes_and_serves(ledger, story, env, tmp_path):
    cli = [sys.executable, "-m", "marketplace.cli"]
    indexer = start([*cli, "gateway", "index", "--interval", "0.2"], env, tmp_path)
    port = free_port()
    server = start(
        [*cli, "gateway", "serve", "--port", str(port), "--log-level", "WARNING"], env, tmp_path
    )
    try:
        wait_until_indexed(env["ZOO_DATABASE_URL"], ledger.w3.eth.block_number, indexer)
        wait_for_http(f"http://127.0.0.1:{port}/health", server)
        job = httpx.get(f"http://127.0.0.1:{port}/jobs/{story.job_id}").json()
        assert (job["status"], int(job["clearing_price"])) == ("settled", story.clearing_price)
        assert (
            httpx.get(f"http://127.0.0.1:{port}/openapi.json").json()["info"]["title"]
            == "Zoo Compute gateway"
        )
    finally:
        terminate(server)
        terminate(indexer)
    assert "indexer ready" in indexer.stdout.read()


def _open_when_all_are_ready(url: str, ready) -> None:
    ready.wait()
    db.open_database(url)


def test_the_server_and_the_indexer_create_one_database_at_once(tmp_path):
    """`gateway serve` and `gateway index` start together and both create the schema on one file:
    neither may die of the other's half-made tables or its lock."""
    fork = multiprocessing.get_context("fork")
    for attempt in range(8):
        url = f"sqlite:///{tmp_path / f'gateway-{attempt}.sqlite3'}"
        ready = fork.Barrier(3)
        opening = [
            fork.Process(target=_open_when_all_are_ready, args=(url, ready)) for _ in range(3)
        ]
        for process in opening:
            process.start()
        for process in opening:
            process.join(60)
        assert [process.exitcode for process in opening] == [0, 0, 0]
    with db.open_database(url)() as session:
        assert session.scalar(select(db.IndexerState.next_block)) is None


def test_devnet_runs_the_gateway_and_stops_it_by_pid(ledger, ipfs_api, tmp_path):
    """The devnet's own gateway: its API on a free port and its Celery indexer, started and stopped
    as `devnet up` and `devnet down` do, on this module's ledger instead of a whole devnet's."""
    root = tmp_path / "devnet"
    root.mkdir()
    devnet = Devnet(root)
    with RedisServer(tmp_path / "redis") as redis:
        state = State(
            root=root,
            rpc_url=ledger.w3.provider.endpoint_uri,
            redis_url=redis.url,
            ipfs={"user": ipfs_api},
            manifest=str(ledger.deployment.write(root / "deployment.json")),
        )
        try:
            server, indexer = devnet.start_gateway(state)
            state.gateway_url = devnet.wait_for_gateway(server, indexer)
            state.save()
            assert devnet.status()["gateway_url"] == state.gateway_url
            assert (
                httpx.get(f"{state.gateway_url}/health").json()["indexed_block"]
                >= ledger.deployment.deploy_block
            )
        finally:
            stopped = devnet.down()
    assert sorted(stopped) == ["gateway", "gateway-indexer"]
    assert not server.alive() and not indexer.alive()
    with pytest.raises(httpx.TransportError):
        httpx.get(f"{state.gateway_url}/health")
