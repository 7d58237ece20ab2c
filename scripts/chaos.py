"""A chaos soak: honest jobs on a devnet whose processes are killed (kill -9) at random and
started again, each job checked to the wei.

Every process but Anvil is a target: the daemons that keep a journal (the providers and the ranks
they start, the verifiers, their Celery worker, the gateway's indexer) and the servers they reach
at fixed addresses (the IPFS nodes, Redis, the gateway's API server), restarted there with their
data. After each job: it settled; the user paid exactly what the providers earned; each provider
received its pay less the 5% fee; the treasury the fee less the verifiers' pool; the market holds
what it held before; and nobody was slashed (every party is honest, and no daemon stays down for a
checkpoint interval). It prints the jobs run, the kills and restarts per process, and the wei
lost: the sum of every balance's distance from what settlement says, which must be 0. The suite
runs a small version: one job with the verifiers, worker and indexer struck
(tests/e2e/test_marketplace.py).

    python scripts/chaos.py                      # 3 jobs, a strike every 12 s
    python scripts/chaos.py --jobs 10 --every 6 --seed 42
    python scripts/chaos.py --daemons-only       # spare IPFS, Redis and the gateway's server
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
from marketplace.devnet.chaos import DAEMONS, EVERY_PROCESS, Monkey
from marketplace.devnet.network import Devnet

SPEC = Path(__file__).resolve().parents[1] / "node" / "specs" / "tiny.yaml"
FEE_BPS = 500
BUDGET_ZEN = 5_000


def run_job(root: Path) -> subprocess.CompletedProcess:
    env = os.environ | dotenv_values(root / "user.env")
    argv = [sys.executable, "-m", "marketplace.cli", "train", "--config", str(SPEC)]
    argv += ["--max-budget", str(BUDGET_ZEN), "--sample-rate", "5000"]
    return subprocess.run(argv, check=False, env=env, capture_output=True, text=True, timeout=1800)


def check_job(
    ledger: Ledger, job_id: int, before: dict[str, int], parties: list[str]
) -> list[tuple[str, int]]:
    """What is wrong with the settled job `job_id`, given the balances before it, each with the
    wei it is off by: nothing when every balance moved to the wei as settlement says."""
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
    moved = {a: after[a] - before[a] for a in before}
    user, treasury = parties[0], ledger.treasury.address
    fee = sum(e * FEE_BPS // 10_000 for e in earned.values())
    expected = [
        ("payment against earned", s["payment"], sum(earned.values())),
        ("fee against 5% of each provider's pay", s["fee"], fee),
        ("the user's payment", -moved[user], s["payment"]),
        *(
            (f"provider {p}'s pay", moved[p], pay - pay * FEE_BPS // 10_000)
            for p, pay in earned.items()
        ),
        ("the treasury's share", moved[treasury], s["fee"] - s["verifierPool"]),
        ("the market's balance", moved[ledger.market.address], 0),
    ]
    return [
        (f"{what}: {got} != {want}", abs(got - want)) for what, got, want in expected if got != want
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=3)
    parser.add_argument("--every", type=float, default=12.0, help="mean seconds between strikes")
    parser.add_argument("--down", type=float, default=3.0, help="most seconds a process stays down")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--daemons-only", action="store_true", help="strike only the daemons that keep a journal"
    )
    args = parser.parse_args()

    root = Path(tempfile.mkdtemp(prefix="zoo-chaos-"))
    devnet = Devnet(root, providers=3, verifiers=2, workers=1)
    print(f"devnet in {root}: starting", flush=True)
    state = devnet.up()
    targets = DAEMONS if args.daemons_only else EVERY_PROCESS
    failures: list[str] = []
    kills: Counter[str] = Counter()
    restarts: Counter[str] = Counter()
    wei_lost = slashes = settled = 0
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
            monkey = Monkey(devnet, targets, args.every, (0.5, args.down), args.seed + n)
            started, first_block = time.monotonic(), ledger.w3.eth.block_number
            with monkey:
                result = run_job(root)
            for strike in monkey.strikes:
                kills[strike.name] += 1
                restarts[strike.name] += strike.restarted
            if result.returncode != 0:
                failures.append(f"job {n + 1}: train failed: {result.stderr.strip()[-400:]}")
                continue
            settled += 1
            job_id = ledger.market.functions.jobCount().call()
            problems = check_job(ledger, job_id, before, parties)
            wei_lost += sum(wei for _, wei in problems)
            slashed = ledger.staking.events.Slashed().get_logs(from_block=first_block)
            slashes += len(slashed)
            messages = [what for what, _ in problems]
            if slashed:
                messages.append(f"{len(slashed)} slash(es) of honest parties")
            failures += [f"job {job_id}: {m}" for m in messages]
            print(
                f"job {job_id}: settled in {time.monotonic() - started:.0f} s through "
                f"{len(monkey.strikes)} strikes ({', '.join(s.name for s in monkey.strikes)}): "
                + ("ok" if not messages else "; ".join(messages)),
                flush=True,
            )
    finally:
        devnet.down()

    print(f"\njobs run {args.jobs}, settled {settled}, honest slashes {slashes}")
    print(f"wei lost {wei_lost}\n")
    print(f"{'process':<18}{'kills':>7}{'restarts':>10}")
    for name in sorted(kills):
        print(f"{name:<18}{kills[name]:>7}{restarts[name]:>10}")
    print(
        "\n".join(["", *failures]) if failures else "\nevery job settled to the wei, nobody slashed"
    )
    summary = {
        "chaos": {
            "jobs": args.jobs,
            "settled": settled,
            "kills": dict(kills),
            "restarts": dict(restarts),
            "wei_lost": wei_lost,
            "slashes": slashes,
            "failures": len(failures),
        }
    }
    print(json.dumps(summary))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
