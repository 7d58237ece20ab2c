"""A chaos soak: honest jobs on a devnet whose daemons are killed (kill -9) at random and started
again, each job checked to the wei.

Every daemon that keeps a journal is a target: the providers (and the ranks they start), the
verifiers, their Celery worker and the gateway's indexer. After each job: it settled; the user
paid exactly what the providers earned; each provider received its pay less the 5% fee; the
treasury the fee less the verifiers' pool; the market holds what it held before; and nobody was
slashed (every party is honest, and no daemon stays down for a checkpoint interval). The suite
runs a small version: one job with the verifiers, worker and indexer struck
(tests/e2e/test_marketplace.py).

    python scripts/chaos.py                      # 3 jobs, a strike every 12 s
    python scripts/chaos.py --jobs 10 --every 6 --seed 42
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from dotenv import dotenv_values
from web3 import Web3

from marketplace.chain.deploy import Deployment
from marketplace.chain.ledger import Ledger
from marketplace.devnet.chaos import DAEMONS, Monkey
from marketplace.devnet.network import Devnet

SPEC = Path(__file__).resolve().parents[1] / "node" / "specs" / "tiny.yaml"
FEE_BPS = 500
BUDGET_ZEN = 5_000


def run_job(root: Path) -> subprocess.CompletedProcess:
    env = os.environ | dotenv_values(root / "user.env")
    argv = [sys.executable, "-m", "marketplace.cli", "train", "--config", str(SPEC)]
    argv += ["--max-budget", str(BUDGET_ZEN), "--sample-rate", "5000"]
    return subprocess.run(argv, check=False, env=env, capture_output=True, text=True, timeout=1800)


def check_job(ledger: Ledger, job_id: int, before: dict[str, int], parties: list[str]) -> list[str]:
    """What is wrong with the settled job `job_id`, given the balances before it: nothing when
    every balance moved to the wei as settlement says."""
    problems = []
    (event,) = ledger.market.events.JobSettled().get_logs(
        from_block=ledger.deployment.deploy_block, argument_filters={"jobId": job_id}
    )
    s = event["args"]
    market = ledger.market.functions
    earned = {p: market.earned(job_id, p).call() for p in market.participants(job_id).call()}
    deadline = time.monotonic() + 180  # the daemons withdraw and claim on their own
    while any(ledger.owed(a) for a in parties) and time.monotonic() < deadline:
        time.sleep(1)
    after = {a: ledger.balance(a) for a in before}
    user, treasury = parties[0], ledger.treasury.address
    if s["payment"] != sum(earned.values()):
        problems.append(f"payment {s['payment']} != earned {sum(earned.values())}")
    if s["fee"] != sum(e * FEE_BPS // 10_000 for e in earned.values()):
        problems.append(f"fee {s['fee']} is not 5% of each provider's pay")
    if after[user] - before[user] != -s["payment"]:
        problems.append(f"the user paid {before[user] - after[user]}, not {s['payment']}")
    for provider, pay in earned.items():
        if after[provider] - before[provider] != pay - pay * FEE_BPS // 10_000:
            problems.append(f"provider {provider} received {after[provider] - before[provider]}")
    if after[treasury] - before[treasury] != s["fee"] - s["verifierPool"]:
        problems.append(f"the treasury received {after[treasury] - before[treasury]}")
    if after[ledger.market.address] != before[ledger.market.address]:
        problems.append("the market's balance moved")
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=3)
    parser.add_argument("--every", type=float, default=12.0, help="mean seconds between strikes")
    parser.add_argument("--down", type=float, default=3.0, help="most seconds a daemon stays down")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    root = Path(tempfile.mkdtemp(prefix="zoo-chaos-"))
    devnet = Devnet(root, providers=3, verifiers=2, workers=1)
    print(f"devnet in {root}: starting", flush=True)
    state = devnet.up()
    failures: list[str] = []
    strikes: Counter[str] = Counter()
    try:
        ledger = Ledger(
            Web3(Web3.HTTPProvider(state.rpc_url)), Deployment.load(Path(state.manifest))
        )
        user = state.accounts["user"]
        roles = [a for n, a in state.accounts.items() if n.startswith(("provider", "verifier"))]
        parties = [user, *roles]
        for n in range(args.jobs):
            before = {a: ledger.balance(a) for a in [*parties, ledger.treasury.address]}
            before[ledger.market.address] = ledger.balance(ledger.market.address)
            monkey = Monkey(devnet, DAEMONS, args.every, (0.5, args.down), args.seed + n)
            started, first_block = time.monotonic(), ledger.w3.eth.block_number
            with monkey:
                result = run_job(root)
            for strike in monkey.strikes:
                strikes[strike.name.rstrip("0123456789")] += 1
            if result.returncode != 0:
                failures.append(f"job {n + 1}: train failed: {result.stderr.strip()[-400:]}")
                continue
            job_id = ledger.market.functions.jobCount().call()
            problems = check_job(ledger, job_id, before, parties)
            slashed = ledger.staking.events.Slashed().get_logs(from_block=first_block)
            if slashed:
                problems.append(f"{len(slashed)} slash(es) of honest parties")
            failures += [f"job {job_id}: {p}" for p in problems]
            print(
                f"job {job_id}: settled in {time.monotonic() - started:.0f} s through "
                f"{len(monkey.strikes)} strikes ({', '.join(s.name for s in monkey.strikes)}): "
                + ("ok" if not problems else "; ".join(problems)),
                flush=True,
            )
    finally:
        devnet.down()

    print(f"\n{'daemon':<18}{'strikes':>8}")
    for name, count in sorted(strikes.items()):
        print(f"{name:<18}{count:>8}")
    print(
        "\n".join(["", *failures]) if failures else "\nevery job settled to the wei, nobody slashed"
    )
    summary = {"chaos": {"jobs": args.jobs, "strikes": dict(strikes), "failures": len(failures)}}
    print(json.dumps(summary))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
