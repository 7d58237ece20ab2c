"""A provider's training throughput beside a running devnet, next to the same unit alone.

The devnet (`zoo-compute devnet up`: Anvil mining a block a second, 3 provider daemons, the
verifier and its worker, the gateway and its indexer, IPFS nodes, Redis) is started and left
idle. Each repetition trains the same work unit as a provider does (`run_unit`: the spec's first
unit, on slot 0's shard, from its seed) twice, in turn first: once with the devnet running, once
alone, with every devnet process paused (SIGSTOP, so it takes no CPU at all; SIGCONT after).
Throughput is tokens per second of the unit's optimizer steps; the ratio is devnet over alone,
per repetition, and its median is held to the target. The devnet's CPU during its side shows
what the unit shared the machine with.

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

            def beside_devnet(_: int) -> tuple[float, float]:
                before, began = sum(cpu_seconds(p) for p in pids), time.monotonic()
                rate = train(spec, args.unit_steps)
                used = sum(cpu_seconds(p) for p in pids) - before
                return rate, 100 * used / (time.monotonic() - began)

            def alone(_: int) -> tuple[float, float]:
                with paused(pids):
                    return train(spec, args.unit_steps), 0.0

            sides = {"devnet": beside_devnet, "alone": alone}
            for result in interleave(sides, args.repetitions):
                (on_devnet, devnet_cpu), (by_itself, _) = result["devnet"], result["alone"]
                bench.record(
                    {
                        "alone_tokens_per_s": by_itself,
                        "devnet_tokens_per_s": on_devnet,
                        "throughput_ratio": on_devnet / by_itself,
                        "devnet_cpu_pct": devnet_cpu,
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
