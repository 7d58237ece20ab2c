"""Gas of each lifecycle step and of a whole job (3 bidders, 1 winner, 10 checkpoints), from real
transaction receipts on Anvil, next to the targets.

Two identical jobs run back to back: the first on a fresh deployment pays for first-ever storage
(the treasury's first balance, each account's first `owed`), the second shows the steady state.
The whole-job figure counts every transaction of the job; the randomly sampled verifications
are reported apart. Gas is deterministic, so one run is its own median.
"""

from __future__ import annotations

import statistics
import tempfile
from pathlib import Path

from benchkit import Bench
from rich.console import Console
from rich.table import Table
from web3 import Web3

from marketplace.chain.anvil import Anvil
from marketplace.chain.deploy import ZEN, Parameters, deploy
from marketplace.chain.ledger import Ledger
from marketplace.devnet.accounts import devnet_account
from marketplace.devnet.scripted_job import Cast, Scenario, cid_of_bytes, onboard, run_job

# Sealed bids lock collateral (a commit pays Staking's lock) and a unit's pay is fixed by the job.
TARGETS = {
    "commit_reveal_gas": 130_000,
    "checkpoint_gas": 65_000,
    "settle_gas": 130_000,
    "whole_job_gas": 1_600_000,
}
SCENARIO = Scenario(units=10, sample_rate_bps=1_000)


def figures(gas: dict[str, list[int]]) -> dict[str, int]:
    bids = len(gas["commitBid"])
    return {
        "commit_reveal_gas": round(statistics.mean(gas["commitBid"]) + max(gas["revealBid"])),
        # Two unit commitments share a storage slot: even units open it, odd ones fill it.
        "checkpoint_gas": round(statistics.mean(gas["commitCheckpoint"])),
        "checkpoint_max_gas": max(gas["commitCheckpoint"]),
        "settle_gas": gas["settle"][0],
        # Everything the job itself needs; verifications are sampled at random, so they are
        # counted apart (a job at 10% sampling expects one).
        "whole_job_gas": sum(sum(v) for step, v in gas.items() if step != "postResult"),
        "bidders": bids,
    }


def main() -> None:
    bench = Bench("gas", {name: f"<= {t}" for name, t in TARGETS.items()})
    with Anvil() as chain, tempfile.TemporaryDirectory() as tmp:
        w3 = Web3(Web3.HTTPProvider(chain.rpc_url))
        accounts = [devnet_account(i) for i in range(7)]
        cast = Cast(accounts[0], accounts[1], tuple(accounts[2:5]), tuple(accounts[5:7]))
        deployment = deploy(
            w3,
            cast.governor,
            Parameters(verification_fee=ZEN // 10),
            manifest=Path(tmp) / "manifest.json",
        )
        ledger = Ledger(w3, deployment)
        onboard(ledger, cast, SCENARIO)
        runs = [
            run_job(ledger, cast, SCENARIO, cid_of_bytes(f"spec {i}".encode())) for i in range(2)
        ]

    console = Console()
    steps = Table(title="Gas per step (transaction receipts, 21,000 intrinsic included)")
    for column in ("step", "first job", "steady state", "calls"):
        steps.add_column(column, justify="right" if column != "step" else "left")
    for step, values in runs[1].gas.items():
        first = runs[0].gas.get(step, [])
        steps.add_row(
            step, f"{max(first):,}" if first else "-", f"{max(values):,}", str(len(values))
        )
    console.print(steps)

    first, steady = figures(runs[0].gas), figures(runs[1].gas)
    posts = runs[0].gas.get("postResult", []) + runs[1].gas.get("postResult", [])
    console.print(
        f"checkpoint_gas is the mean over the job's checkpoints; the costliest was "
        f"{steady['checkpoint_max_gas']:,} (the one that completes the job)"
    )
    console.print(
        f"{steady['bidders']} bidders, 1 winner, {SCENARIO.units} checkpoints; "
        f"{len(posts)} sampled verification(s) over both jobs at {SCENARIO.sample_rate_bps} bps"
        + (f", {round(statistics.mean(posts)):,} gas each" if posts else "")
    )

    bench.record(
        {
            **{name: steady[name] for name in TARGETS},
            **{f"first_job_{name}": first[name] for name in TARGETS},
            **{
                f"{name.removesuffix('_gas')}_target_ratio": steady[name] / t
                for name, t in TARGETS.items()
            },
            "checkpoint_max_gas": steady["checkpoint_max_gas"],
        }
    )
    bench.report(
        "Gas against the targets, steady state (the second job)",
        once={"post_result_gas": round(statistics.mean(posts)) if posts else None},
    )


if __name__ == "__main__":
    main()
