"""Job-status reads from the gateway at 64 concurrent clients,
against the same read from the chain's RPC, and the indexer's lag in blocks while jobs are created
at 50 a minute — all on loopback, in one run.

The server is `zoo-compute gateway serve` in its own process(es); the load comes from another
process (this script with `load`), an asyncio HTTP client with one task per client. The baseline is
what a client without the gateway does: an `eth_call` of `JobMarket.job(id)` against Anvil, through
the same load generator. The lag is the chain head minus the indexer's last block, sampled every
100 ms while `zoo-compute gateway index` runs at its default one-second step and jobs are created on
Anvil (a block per transaction). One run: each figure is what that run measured.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import aiohttp
import httpx
from benchkit import Bench
from rich.console import Console
from sqlalchemy import select
from web3 import Web3

from marketplace.chain.anvil import Anvil
from marketplace.chain.deploy import ZEN, Parameters, deploy
from marketplace.chain.ledger import JobRequest, Ledger
from marketplace.devnet.accounts import devnet_account
from marketplace.devnet.scripted_job import Cast, Scenario, cid_of_bytes, onboard, run_job
from marketplace.gateway import db
from marketplace.gateway.indexer import Indexer
from marketplace.processes import free_port, terminate
from marketplace.protocol.terms import Tier

TARGETS = {"requests_per_s": ">= 2000", "p99_ms": "<= 50", "lag_p99_blocks": "<= 2"}
OPEN_JOBS = 30  # jobs in the index besides one whole settled job: reads spread over all of them


# --- the load generator (a process of its own) ------------------------------------------------


async def _hammer(url: str, requests: list[dict], concurrency: int, seconds: float) -> dict:
    """`concurrency` clients, each sending the next request as soon as its last one answered.

    aiohttp (web3's own HTTP client) rather than httpx: at these rates httpx's per-request cost
    would make the load generator, not the server, the bottleneck on a 2-core machine.
    """
    latencies: list[float] = []
    errors = 0
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(url, connector=connector) as client:

        async def worker(offset: int) -> None:
            nonlocal errors
            i = offset
            while time.perf_counter() < end:
                request = requests[i % len(requests)]
                i += concurrency
                start = time.perf_counter()
                async with client.request(**request) as response:
                    body = await response.read()
                latencies.append(time.perf_counter() - start)
                errors += response.status != 200 or b'"error"' in body

        end = time.perf_counter() + 1.0  # warm-up: connections opened, caches filled
        await asyncio.gather(*(worker(i) for i in range(concurrency)))
        latencies.clear()
        errors = 0
        began = time.perf_counter()
        end = began + seconds
        await asyncio.gather(*(worker(i) for i in range(concurrency)))
        elapsed = time.perf_counter() - began
    latencies.sort()
    return {
        "requests": len(latencies),
        "errors": errors,
        "requests_per_s": len(latencies) / elapsed,
        "p50_ms": 1000 * latencies[len(latencies) // 2],
        "p99_ms": 1000 * latencies[int(len(latencies) * 0.99)],
    }


def load(url: str, requests: list[dict], concurrency: int, seconds: float) -> dict:
    """Run the load generator in its own process, so it does not share an interpreter with what it
    measures."""
    out = subprocess.run(
        [
            sys.executable,
            __file__,
            "load",
            url,
            json.dumps(requests),
            str(concurrency),
            str(seconds),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout)


# --- the chain, the index and the server ------------------------------------------------------


def populate(ledger: Ledger, cast: Cast) -> list[int]:
    """One job run to settlement (bids, slots, units, settlement rows) and OPEN_JOBS open ones."""
    onboard(ledger, cast, Scenario())
    job_ids = [run_job(ledger, cast, Scenario(units=4), cid_of_bytes(b"bench job")).job_id]
    ledger.approve(cast.user, ledger.market.address, 2**255)
    job_ids += [create_job(ledger, cast, i) for i in range(OPEN_JOBS)]
    return job_ids


def create_job(ledger: Ledger, cast: Cast, n: int) -> int:
    request = JobRequest(
        spec_cid=cid_of_bytes(f"bench spec {n}".encode()),
        tier=Tier.COMMUNITY,
        nodes=1,
        units_per_node=10,
        checkpoint_interval=3600,
        sample_rate_bps=1_000,
        max_price=100 * ZEN,
        budget=100 * ZEN,
    )
    fn = ledger.market.functions.createJob(request.as_struct())
    return ledger.market.events.JobCreated().process_receipt(ledger.send(fn, cast.user))[0]["args"][
        "jobId"
    ]


def serve(env: dict[str, str], port: int, workers: int) -> subprocess.Popen:
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "marketplace.cli",
            "gateway",
            "serve",
            "--port",
            str(port),
            "--workers",
            str(workers),
            "--log-level",
            "WARNING",
        ],
        env=env,
    )
    deadline = time.monotonic() + 60
    while True:
        try:
            httpx.get(f"http://127.0.0.1:{port}/health").raise_for_status()
            return server
        except httpx.TransportError:
            if time.monotonic() > deadline or server.poll() is not None:
                terminate(server)
                raise RuntimeError("the gateway did not start") from None
            time.sleep(0.2)


def measure_lag(
    ledger: Ledger,
    cast: Cast,
    env: dict[str, str],
    url: str,
    jobs_per_minute: int,
    seconds: float,
    interval: float,
) -> dict:
    """Create jobs at the given rate while `gateway index` follows; sample head - indexed block."""
    indexer = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "marketplace.cli",
            "gateway",
            "index",
            "--interval",
            str(interval),
            "--log-level",
            "WARNING",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
    )
    sessions = db.open_database(url)
    samples: list[int] = []
    stop = threading.Event()
    created = 0

    def create() -> None:
        nonlocal created
        period = 60 / jobs_per_minute
        next_at = time.monotonic()
        while not stop.is_set():
            create_job(ledger, cast, 10_000 + created)
            created += 1
            next_at += period
            stop.wait(max(0.0, next_at - time.monotonic()))

    try:
        while True:  # the indexer catches up with the history first
            with sessions() as session:
                state = session.get(db.IndexerState, 1)
                if state is not None and state.next_block > ledger.w3.eth.block_number:
                    break
            time.sleep(0.2)
        creator = threading.Thread(target=create)
        creator.start()
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            with sessions() as session:
                indexed = session.scalar(select(db.IndexerState.next_block)) - 1
            samples.append(ledger.w3.eth.block_number - indexed)
            time.sleep(0.1)
        stop.set()
        creator.join()
    finally:
        terminate(indexer)
    samples.sort()
    return {
        "jobs_created": created,
        "lag_p50_blocks": samples[len(samples) // 2],
        "lag_p99_blocks": samples[int(len(samples) * 0.99)],
        "lag_max_blocks": samples[-1],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--seconds", type=float, default=10, help="Measured seconds of load per target."
    )
    parser.add_argument("--concurrency", type=int, default=64, help="Concurrent clients.")
    parser.add_argument("--workers", type=int, default=2, help="Gateway server processes.")
    parser.add_argument("--jobs-per-minute", type=int, default=50)
    parser.add_argument(
        "--index-interval",
        type=float,
        default=1.0,
        help="Seconds between indexer steps (as Celery beat's schedule, by default).",
    )
    parser.add_argument(
        "--lag-seconds",
        type=float,
        default=60,
        help="How long jobs are created while lag is sampled.",
    )
    args = parser.parse_args()
    bench = Bench("gateway", TARGETS)
    console = Console(stderr=True)

    with tempfile.TemporaryDirectory() as tmp, Anvil() as anvil:
        w3 = Web3(Web3.HTTPProvider(anvil.rpc_url))
        manifest = Path(tmp) / "manifest.json"
        ledger = Ledger(w3, deploy(w3, devnet_account(0), Parameters(), manifest=manifest))
        accounts = [devnet_account(i) for i in range(1, 7)]
        cast = Cast(devnet_account(0), accounts[0], tuple(accounts[1:4]), tuple(accounts[4:6]))
        with console.status("running a job and creating open ones on Anvil"):
            job_ids = populate(ledger, cast)
        database = f"sqlite:///{Path(tmp) / 'gateway.sqlite3'}"
        indexer = Indexer(w3, ledger.deployment, db.open_database(database))
        while indexer.step():
            pass
        env = os.environ | {
            "ZOO_RPC_URL": anvil.rpc_url,
            "ZOO_MANIFEST": str(manifest),
            "ZOO_HOME": tmp,
            "ZOO_DATABASE_URL": database,
            # 64 clients on one loopback address: the per-address limits would be the bench.
            "ZOO_GATEWAY_READ_LIMIT": "1000000/minute",
        }
        port = free_port()
        server = serve(env, port, args.workers)
        try:
            with console.status(
                f"GET /jobs/{{id}} at {args.concurrency} clients for {args.seconds:.0f}s"
            ):
                gateway = load(
                    f"http://127.0.0.1:{port}",
                    [{"method": "GET", "url": f"/jobs/{i}"} for i in job_ids],
                    args.concurrency,
                    args.seconds,
                )
        finally:
            terminate(server)
        call = ledger.market.functions.job
        with console.status(
            f"eth_call JobMarket.job(id) at {args.concurrency} clients for {args.seconds:.0f}s"
        ):
            rpc = load(
                anvil.rpc_url,
                [
                    {
                        "method": "POST",
                        "url": "/",
                        "json": {
                            "jsonrpc": "2.0",
                            "id": 1,
                            "method": "eth_call",
                            "params": [
                                {
                                    "to": ledger.market.address,
                                    "data": call(i)._encode_transaction_data(),
                                },
                                "latest",
                            ],
                        },
                    }
                    for i in job_ids
                ],
                args.concurrency,
                args.seconds,
            )
        with console.status(
            f"indexer lag at {args.jobs_per_minute} jobs/minute for {args.lag_seconds:.0f}s"
        ):
            lag = measure_lag(
                ledger,
                cast,
                env,
                database,
                args.jobs_per_minute,
                args.lag_seconds,
                args.index_interval,
            )

    bench.record(
        {
            "requests_per_s": gateway["requests_per_s"],
            "p50_ms": gateway["p50_ms"],
            "p99_ms": gateway["p99_ms"],
            "errors": gateway["errors"],
            "rpc_requests_per_s": rpc["requests_per_s"],
            "rpc_p99_ms": rpc["p99_ms"],
            "rpc_errors": rpc["errors"],
            "vs_rpc_ratio": gateway["requests_per_s"] / rpc["requests_per_s"],
            "lag_p50_blocks": lag["lag_p50_blocks"],
            "lag_p99_blocks": lag["lag_p99_blocks"],
            "lag_max_blocks": lag["lag_max_blocks"],
            "lag_jobs_created": lag["jobs_created"],
        }
    )
    bench.report(
        f"job-status reads at {args.concurrency} clients: gateway GET /jobs/{{id}} "
        f"({args.workers} workers) vs the chain's eth_call JobMarket.job(id); indexer lag "
        f"at {args.jobs_per_minute} jobs/minute"
    )


if __name__ == "__main__":
    if sys.argv[1:2] == ["load"]:
        url, requests, concurrency, seconds = (
            sys.argv[2],
            json.loads(sys.argv[3]),
            int(sys.argv[4]),
            float(sys.argv[5]),
        )
        print(json.dumps(asyncio.run(_hammer(url, requests, concurrency, seconds))))
    else:
        main()
