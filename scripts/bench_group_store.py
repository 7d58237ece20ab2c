"""The group's store (node/distributed/store.py) against torch's TCPStore, which it replaced:
what the board's operations cost, and what an attack leaves in the host's memory.

Each repetition times, on both stores in turn, a look at a key (what a rank waiting on a round
does every 5 ms) and a 4 MiB part written and read back (a post's part). Then, on each store, a
stranger tries to write 64 MiB in 4 MiB keys, and a member does: TCPStore keeps all of both;
ours refuses the stranger's login and keeps no more of the member's than its budget.
"""

import argparse
import time
from dataclasses import replace
from datetime import timedelta

import torch.distributed as dist
from benchkit import Bench, interleave
from eth_account import Account

from marketplace.processes import free_port
from node.distributed.signing import local_signing
from node.distributed.store import GroupStore, StoreHost

MIB = 2**20
PART = b"x" * (4 * MIB)
FLOOD = 16  # parts: 64 MiB
BUDGET = 4 * len(PART)  # a member's here: its posts of a few rounds
SIGNING = local_signing(3)
TIMEOUT = timedelta(seconds=10)


def timed(store: dist.Store, looks: int, parts: int) -> tuple[float, float]:
    """Microseconds a look takes, and milliseconds a part's write and read back take."""
    began = time.perf_counter()
    for _ in range(looks):
        store.check(["rounds/0/1"])
    look = (time.perf_counter() - began) / looks * 1e6
    began = time.perf_counter()
    for index in range(parts):
        store.set(f"part/{index % 4}", PART)
        store.get(f"part/{index % 4}")
    return look, (time.perf_counter() - began) / parts * 1e3


def flood(store: dist.Store) -> None:
    for index in range(FLOOD):
        store.set(f"junk/{index}", PART)


def held_mib(store: dist.Store) -> float:
    """MiB of the flood a store still holds."""
    return sum(len(PART) for i in range(FLOOD) if store.check([f"junk/{i}"])) / MIB


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repetitions", type=int, default=5)
    parser.add_argument("--looks", type=int, default=2000)
    parser.add_argument("--parts", type=int, default=40)
    args = parser.parse_args()

    bench = Bench(
        "group_store",
        {
            "look_ratio": "<= 3",
            "part_ratio": "<= 3",
            "stranger_held_mib_ours": "<= 0",
            "member_held_ratio": "<= 1",
        },
    )
    tcp_port = free_port()
    tcp = dist.TCPStore("127.0.0.1", tcp_port, 1, is_master=True, timeout=TIMEOUT)
    with StoreHost("127.0.0.1", free_port(), SIGNING, BUDGET) as host:
        ours = GroupStore(*host.address, 1, SIGNING, TIMEOUT)
        sides = {
            "tcpstore": lambda _: timed(tcp, args.looks, args.parts),
            "ours": lambda _: timed(ours, args.looks, args.parts),
        }
        for result in interleave(sides, args.repetitions, warmup=1):
            (tcp_look, tcp_part), (our_look, our_part) = result["tcpstore"], result["ours"]
            bench.record(
                {
                    "look_us_tcpstore": tcp_look,
                    "look_us_ours": our_look,
                    "look_ratio": our_look / tcp_look,
                    "part_ms_tcpstore": tcp_part,
                    "part_ms_ours": our_part,
                    "part_ratio": our_part / tcp_part,
                }
            )

        # TCPStore has no members: a stranger is anyone who reaches the port
        flood(dist.TCPStore("127.0.0.1", tcp_port, is_master=False, timeout=TIMEOUT))
        stranger_tcp = held_mib(tcp)
        not_a_holder = replace(SIGNING, keys={2: bytes(Account.create().key)})
        stranger = GroupStore(*host.address, 2, not_a_holder, timedelta(seconds=1))
        try:
            flood(stranger)
        except RuntimeError:  # its login is refused
            pass
        stranger_ours = held_mib(ours)
        flood(GroupStore(*host.address, 2, SIGNING, TIMEOUT))
        member_ours = host.used(2) / MIB
    bench.report(
        "The group's store vs torch's TCPStore (a look, a 4 MiB part, a 64 MiB flood)",
        {
            "stranger_held_mib_tcpstore": stranger_tcp,
            "stranger_held_mib_ours": stranger_ours,
            "member_held_mib_ours": member_ours,
            "member_budget_mib": BUDGET / MIB,
            "member_held_ratio": member_ours / (BUDGET / MIB),
        },
    )


if __name__ == "__main__":
    main()
