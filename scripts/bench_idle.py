"""CPU an idle devnet uses: every process `zoo-compute devnet up` starts, with no job on the market.

The devnet (3 providers, a verifier, the gateway and its indexer, Anvil mining a block a second,
IPFS nodes, Redis, a re-run worker) is started, left to settle, and each of its processes' CPU
time (with its children's) is read from /proc over several windows. The baseline is the chain
itself: Anvil's share, which every daemon's polls add to. Each figure is a percentage of one core,
the median over the windows.

    python scripts/bench_idle.py                  # 5 windows of 30 s, about 4 minutes
    python scripts/bench_idle.py --windows 3 --seconds 10
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from benchkit import Bench, cpu_seconds

from marketplace.devnet.network import Devnet

TARGETS = {"total_cpu_pct": "< 2"}
ROLES = ("anvil", "provider", "verifier", "gateway-indexer", "gateway", "ipfs", "worker", "redis")


def role_of(service: str) -> str:
    """The role a devnet service plays: `provider-2` and `ipfs-user` count with their kind."""
    return next((role for role in ROLES if service.startswith(role)), service)


def window(pids: dict[str, int], seconds: float) -> dict[str, float]:
    """Each role's CPU over `seconds`, in percent of one core, and the devnet's total."""
    before = {name: cpu_seconds(pid) for name, pid in pids.items()}
    time.sleep(seconds)
    used: defaultdict[str, float] = defaultdict(float)
    for name, pid in pids.items():
        used[role_of(name)] += 100 * (cpu_seconds(pid) - before[name]) / seconds
    figures = {f"{role.replace('-', '_')}_cpu_pct": used[role] for role in ROLES}
    figures["total_cpu_pct"] = sum(used.values())
    figures["daemons_over_chain_ratio"] = (figures["total_cpu_pct"] - used["anvil"]) / max(
        used["anvil"], 1e-9
    )
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--windows", type=int, default=5, help="measured windows")
    parser.add_argument("--seconds", type=float, default=30, help="length of each window")
    parser.add_argument("--settle", type=float, default=20, help="seconds left idle first")
    parser.add_argument("--providers", type=int, default=3, help="provider daemons")
    args = parser.parse_args()

    bench = Bench("idle", TARGETS)
    with tempfile.TemporaryDirectory(prefix="bench-idle-") as root:
        devnet = Devnet(Path(root) / "devnet", providers=args.providers)
        state = devnet.up()
        try:
            pids = {service.name: service.pid for service in state.running()}
            time.sleep(args.settle)
            for _ in range(args.windows):
                bench.record(window(pids, args.seconds))
        finally:
            devnet.down()
    bench.report(
        f"An idle devnet: {len(pids)} processes, CPU in % of one core",
        once={"processes": len(pids)},
    )


if __name__ == "__main__":
    main()
