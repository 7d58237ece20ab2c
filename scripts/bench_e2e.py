"""The same training work (a) by the plain engine in one process and (b) as a marketplace job on
the devnet, from escrow to the last committed checkpoint: wall times and the efficiency a/b.

(b) includes everything the market adds to the provider's side: escrow, the auction windows,
fetching the spec, splitting the run into verifiable units, pinning each checkpoint on three IPFS
nodes and committing it on-chain. Verifiers run elsewhere in a real network; on one machine they
would compete with the provider for the same cores, so sampling is off here unless asked for
(--sample-rate). The settlement that follows the verification window is timed apart.

The default job is shaped like a real one: units of about a minute of compute on two idle
cores (a job's checkpoint deadline is minutes) and a job of about ten. Besides the ratio, which
depends on that length, the bench splits the overhead into what each job pays once (escrow and
auction) and what each unit pays, measured against the training loop's own seconds (recorded in
every checkpoint), so the figure extrapolates to other lengths and does not move with the
training speed that other load on the machine changes.

Each repetition runs (a) and (b) back to back, taking turns at going first, (b) on a fresh
devnet; every figure is the median over the repetitions, with its range, and the target is met
when the median meets it. Beside wall times sit the CPU seconds of everything each side ran over
the same window (for (b) the chain, IPFS nodes, providers, verifier and gateway too), which other
load on the machine moves far less. At the defaults one repetition takes about 17 minutes on two
cores, so the default three take about 50; `--steps 240 --every 24 --repetitions 1` shows in a
few minutes that it runs (its efficiency is then mostly the auction's cost, not a figure).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

import yaml
from benchkit import Bench, Timer, interleave
from rich.console import Console
from web3 import Web3

from marketplace import jobs
from marketplace.chain.deploy import ZEN, Deployment
from marketplace.chain.ledger import Ledger
from marketplace.config import Settings
from marketplace.devnet.accounts import devnet_account
from marketplace.devnet.network import Devnet
from marketplace.protocol.checkpoint import Checkpoint
from marketplace.protocol.terms import JobStatus
from marketplace.storage import Storage
from node.engine import parse_spec, run_unit, unit_shard

TARGET = 0.95
POLL = 0.1  # seconds between the bench's own reads of the job's status


@dataclass(frozen=True)
class Run:
    wall_s: float  # escrow (or the engine's start) to the last checkpoint
    cpu_s: float  # of every process of the run, over the same window
    loop_s: float  # of which the engine's step loops ran
    state_hash: str  # of the final checkpoint


@dataclass(frozen=True)
class MarketRun(Run):
    auction_s: float  # escrow to the job running on a provider
    settle_s: float  # after the last checkpoint: the verification window and settlement
    units: int


def spec_text(path: Path, steps: int, every: int, threads: int) -> str:
    spec = yaml.safe_load(path.read_text())
    spec["training"]["max_steps"] = steps
    spec["checkpoint"]["every"] = every
    spec["reproducibility"]["num_threads"] = threads
    return yaml.safe_dump(spec, sort_keys=False)


def plain(text: str) -> Run:
    spec = parse_spec(text)
    with Timer() as timer:
        _, state_hash, metrics = run_unit(spec, None, unit_shard(spec, 0), spec.training.max_steps)
    return Run(timer.wall_s, timer.cpu_s, metrics["seconds"], state_hash)


def on_market(text: str, sample_rate: int, root: Path) -> MarketRun:
    # Two providers, so with the user's there are three IPFS nodes to pin each checkpoint on.
    devnet = Devnet(root, providers=2, verifiers=1)
    state = devnet.up()
    try:
        ledger = Ledger(
            Web3(Web3.HTTPProvider(state.rpc_url)), Deployment.load(Path(state.manifest))
        )
        settings = Settings(_env_file=root / "user.env")
        user = devnet_account(1)
        order = jobs.Order(max_budget=5_000 * ZEN, max_price=100 * ZEN, sample_rate_bps=sample_rate)
        with Storage.of(settings) as storage:
            with Timer() as trained:  # this process is the devnet's parent: its CPU counts too
                start = time.perf_counter()
                job_id = jobs.submit(ledger, user, storage, text, order)
                job = jobs.ChainJob(ledger, user, job_id, poll=POLL)
                job.wait(until=JobStatus.RUNNING, auction_timeout=120)
                auction = time.perf_counter() - start
                while ledger.market.functions.status(job_id).call() != JobStatus.COMPLETED:
                    time.sleep(POLL)
            with Timer() as settled:
                job.wait()
            (last,) = jobs.latest_units(ledger, job_id)
            cids = [
                e["args"]["cid"]
                for e in ledger.market.events.CheckpointCommitted().get_logs(
                    from_block=ledger.deployment.deploy_block, argument_filters={"jobId": job_id}
                )
            ]
            loop = sum(
                Checkpoint.load(storage.cat(cid)).metadata["metrics"]["seconds"] for cid in cids
            )
        return MarketRun(
            trained.wall_s,
            trained.cpu_s,
            loop,
            bytes(last["stateHash"]).hex(),
            auction,
            settled.wall_s,
            len(cids),
        )
    finally:
        devnet.down()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--spec", type=Path, default=Path("node/specs/tiny.yaml"), help="job spec to train"
    )
    parser.add_argument("--steps", type=int, default=24_000, help="optimizer steps of the job")
    parser.add_argument("--every", type=int, default=2_400, help="steps per work unit")
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads of the training, in both runs (default 1: on one 2-core machine "
        "the devnet's chain, IPFS nodes, verifier and idle providers need the other core)",
    )
    parser.add_argument("--sample-rate", type=int, default=0, help="verification sample rate, bps")
    parser.add_argument(
        "--root", type=Path, help="devnet folder, kept with its logs (default: a temporary one)"
    )
    parser.add_argument(
        "--repetitions",
        type=int,
        default=3,
        help="runs of (a) and (b) each, taking turns; medians are reported",
    )
    args = parser.parse_args()

    text = spec_text(args.spec, args.steps, args.every, args.threads)

    def market(_: int) -> MarketRun:
        with nullcontext(args.root) if args.root else tempfile.TemporaryDirectory() as root:
            return on_market(text, args.sample_rate, Path(root))

    bench = Bench("e2e", {"efficiency_ratio": f">= {TARGET}"})
    same_state = True
    sides = {"plain": lambda _: plain(text), "market": market}
    for runs in interleave(sides, args.repetitions):
        a, b = runs["plain"], runs["market"]
        same_state &= a.state_hash == b.state_hash
        # Time outside the step loops that the market adds: training speed, which other load on
        # the machine moves, cancels out.
        overhead = (b.wall_s - b.loop_s) - (a.wall_s - a.loop_s)
        bench.record(
            {
                "plain_s": a.wall_s,
                "market_s": b.wall_s,
                "plain_loop_s": a.loop_s,
                "market_loop_s": b.loop_s,
                "auction_s": b.auction_s,
                "per_unit_overhead_s": (overhead - b.auction_s) / b.units,
                "settle_s": b.settle_s,
                "efficiency_ratio": a.wall_s / b.wall_s,
                "plain_cpu_s": a.cpu_s,
                "market_cpu_s": b.cpu_s,
                "cpu_efficiency_ratio": a.cpu_s / b.cpu_s,
            }
        )
    Console().print(
        f"(a) plain engine in one process, (b) marketplace job on the devnet, escrow to the last "
        f"checkpoint; settle_s is the verification window and settlement after it. The market's "
        f"overhead outside the step loops is auction_s per job + per_unit_overhead_s per unit. "
        f"Final state hash {a.state_hash[:16]}, the same in (a) and (b) of every repetition: "
        f"{same_state}"
    )
    bench.report(
        f"{args.spec.name}: {args.steps} steps in {b.units} units of {args.every}, "
        f"{args.threads} torch thread(s)",
        once={"units": b.units, "threads": args.threads, "same_state": same_state},
    )


if __name__ == "__main__":
    main()
