"""The same training work (a) by the plain engine in one process and (b) as a marketplace job on
the devnet, from escrow to the last committed checkpoint: wall times and the efficiency a/b.

(b) includes everything the market adds to the provider's side: the auction windows, fetching the
spec, splitting the run into verifiable units, pinning each checkpoint on three IPFS nodes and
committing it on-chain. Verifiers run elsewhere in a real network; on one machine they would
compete with the provider for the same cores, so sampling is off here unless asked for
(--sample-rate). The settlement that follows the verification window is timed apart.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import yaml
from rich.console import Console
from rich.table import Table
from web3 import Web3

from marketplace import jobs
from marketplace.chain.accounts import devnet_account
from marketplace.chain.deploy import ZEN, Deployment
from marketplace.chain.ledger import JobStatus, Ledger
from marketplace.config import Settings
from marketplace.devnet.network import Devnet
from marketplace.storage import Storage
from node.engine import parse_spec, run_unit
from node.work import unit_shard

TARGET = 0.95


def spec_text(path: Path, steps: int, every: int) -> str:
    spec = yaml.safe_load(path.read_text())
    spec["training"]["max_steps"] = steps
    spec["checkpoint"]["every"] = every
    return yaml.safe_dump(spec, sort_keys=False)


def plain(text: str) -> tuple[float, str]:
    spec = parse_spec(text)
    start = time.perf_counter()
    _, state_hash, _ = run_unit(spec, None, unit_shard(spec, 0), spec.training.max_steps)
    return time.perf_counter() - start, state_hash


def on_market(text: str, sample_rate: int, root: Path) -> tuple[float, float, str]:
    devnet = Devnet(root, providers=1, verifiers=1)
    state = devnet.up()
    try:
        ledger = Ledger(Web3(Web3.HTTPProvider(state.rpc_url)), Deployment.load(Path(state.manifest)))
        settings = Settings(_env_file=root / "user.env")
        user = devnet_account(1)
        order = jobs.Order(max_budget=5_000 * ZEN, max_price=100 * ZEN, sample_rate_bps=sample_rate)
        with Storage(settings.ipfs_api, settings.ipfs_replicas) as storage:
            start = time.perf_counter()
            job_id = jobs.submit(ledger, user, storage, text, order)
            jobs.wait_for_auction(ledger, user, job_id, timeout=120)
            while ledger.market.functions.status(job_id).call() != JobStatus.COMPLETED:
                time.sleep(0.2)
            trained = time.perf_counter() - start
            jobs.settle(ledger, user, job_id)
            settled = time.perf_counter() - start - trained
            (unit,) = jobs.latest_units(ledger, job_id)
        return trained, settled, bytes(unit["stateHash"]).hex()
    finally:
        devnet.down()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", type=Path, default=Path("node/specs/tiny.yaml"), help="job spec to train")
    parser.add_argument("--steps", type=int, default=2_400, help="optimizer steps of the job")
    parser.add_argument("--every", type=int, default=400, help="steps per work unit")
    parser.add_argument("--sample-rate", type=int, default=0, help="verification sample rate, bps")
    args = parser.parse_args()

    text = spec_text(args.spec, args.steps, args.every)
    plain_s, plain_hash = plain(text)
    with tempfile.TemporaryDirectory() as root:
        market_s, settle_s, market_hash = on_market(text, args.sample_rate, Path(root))
    ratio = plain_s / market_s

    table = Table(title=f"{args.spec.name}: {args.steps} steps in units of {args.every}")
    for column in ("run", "wall time (s)", "final state hash"):
        table.add_column(column)
    table.add_row("(a) plain engine, one process", f"{plain_s:.1f}", plain_hash[:16])
    table.add_row("(b) marketplace job on the devnet", f"{market_s:.1f}", market_hash[:16])
    table.add_row("    then verification window + settlement", f"{settle_s:.1f}", "")
    console = Console()
    console.print(table)
    console.print(f"efficiency a/b = {ratio:.3f} (target >= {TARGET}); same final state: {plain_hash == market_hash}")
    print(json.dumps({
        "bench": "e2e",
        "figures": {"plain_s": round(plain_s, 2), "market_s": round(market_s, 2),
                    "settle_s": round(settle_s, 2), "efficiency_ratio": round(ratio, 3),
                    "same_state": plain_hash == market_hash},
        "targets": {"efficiency_ratio": f">= {TARGET}"},
    }))


if __name__ == "__main__":
    main()
