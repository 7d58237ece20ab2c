"""A provider's training throughput beside a running devnet, next to the same unit alone.

The devnet (`zoo-compute devnet up`: Anvil mining a block a second, 3 provider daemons, the
verifier and its worker, the gateway and its indexer, IPFS nodes, Redis) is started and left
idle. Each repetition trains the same work unit as a provider does (`run_unit`: the spec's first
unit, on slot 0's shard, from its seed) twice, in turn first: once with the devnet running, once
alone, with every devnet process paused (SIGSTOP, so it takes no CPU at all; SIGCONT after).
Throughput is tokens per second of the unit's optimizer steps; the ratio is devnet over alone,
per repetition, and its median is held to the target. The devnet's CPU during its side shows
what the unit shared the machine with, and `other_load_pct` the CPU of everything else on the
machine (the larger of the two sides'): on a machine shared with other work, a repetition with
other load of tens of percent measures that load, not the devnet.

    python scripts/bench_devnet_training.py                 # tiny spec, CPU, 11 repetitions
    python scripts/bench_devnet_training.py --repetitions 5 --unit-steps 100
"""

from __future__ import annotations

import argparse
import os
import signal
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from benchkit import Bench, cpu_seconds, interleave

from marketplace.devnet.network import Devnet
from node.engine import JobSpec, load_spec, run_unit, unit_shard

TARGETS = {"throughput_ratio": ">= 0.98"}
DEFAULT_SPEC = Path(__file__).resolve().parents[1] / "node" / "specs" / "tiny.yaml"


@contextmanager
def paused(pids: list[int]) -> Iterator[None]:
    """Every process of the devnet stopped (each leads a session of its own: its children
    stop with it) for the duration, continued after whatever happens."""
    for pid in pids:
        os.killpg(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        for pid in pids:
            os.killpg(pid, signal.SIGCONT)


def busy_seconds() -> float:
    """CPU seconds the whole machine has spent busy since boot, over all its cores."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle, iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def train(spec: JobSpec, steps: int) -> float:
    """Tokens per second of one unit's optimizer steps, as the unit itself times them."""
    result = run_unit(spec, None, unit_shard(spec, 0), steps, device="cpu")
    tokens = steps * spec.training.batch_size * spec.training.grad_accum_steps * spec.data.seq_len
    return tokens / result.metrics["seconds"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", type=Path, default=DEFAULT_SPEC, help="job spec to train")
    parser.add_argument("--unit-steps", type=int, default=300, help="optimizer steps per unit")
    parser.add_argument("--repetitions", type=int, default=11, help="measured repetitions")
    parser.add_argument("--settle", type=float, default=15, help="seconds left idle first")
    parser.add_argument("--providers", type=int, default=3, help="provider daemons")
    args = parser.parse_args()

    spec = load_spec(args.spec)
    bench = Bench("devnet_training", TARGETS)
    with tempfile.TemporaryDirectory(prefix="bench-devnet-training-") as root:
        devnet = Devnet(Path(root) / "devnet", providers=args.providers)
        state = devnet.up()
        try:
            pids = [service.pid for service in state.running()]
            train(spec, args.unit_steps)  # warm-up: the corpus read and torch's first calls
            time.sleep(args.settle)

            def measured(unit_pids: list[int]) -> tuple[float, float, float]:
                """Tokens per second of a unit, and the CPU, in % of one core meanwhile, of the
                devnet and of everything else on the machine (other users' work)."""
                ours, devnet_before = os.getpid(), sum(cpu_seconds(p) for p in unit_pids)
                mine, machine, began = cpu_seconds(ours), busy_seconds(), time.monotonic()
                rate = train(spec, args.unit_steps)
                seconds = time.monotonic() - began
                devnet_used = sum(cpu_seconds(p) for p in unit_pids) - devnet_before
                other = busy_seconds() - machine - (cpu_seconds(ours) - mine) - devnet_used
                return rate, 100 * devnet_used / seconds, 100 * max(other, 0.0) / seconds

            def alone(_: int) -> tuple[float, float, float]:
                with paused(pids):
                    return measured([])

            sides = {"devnet": lambda _: measured(pids), "alone": alone}
            for result in interleave(sides, args.repetitions):
                (on_devnet, devnet_cpu, other_on), (by_itself, _, other_alone) = (
                    result["devnet"],
                    result["alone"],
                )
                bench.record(
                    {
                        "alone_tokens_per_s": by_itself,
                        "devnet_tokens_per_s": on_devnet,
                        "throughput_ratio": on_devnet / by_itself,
                        "devnet_cpu_pct": devnet_cpu,
                        "other_load_pct": max(other_on, other_alone),
                    }
                )
        finally:
            devnet.down()
    bench.report(
        f"A {spec.name} unit of {args.unit_steps} steps on CPU "
        f"({spec.reproducibility.num_threads} threads), beside an idle devnet and alone",
        once={"unit_steps": args.unit_steps, "devnet_processes": len(pids)},
    )


if __name__ == "__main__":
    main()
