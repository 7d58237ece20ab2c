"""Bytes communicated and final eval loss of four ways to train one spec on the same tokens:
fp32 all-reduce every step (the baseline), ddp with compressed gradients, DiLoCo in fp32
(what the rounds alone save and cost) and DiLoCo with compressed pseudo-gradients; the
reduction in bytes and the loss penalty of each.

Every run has the same ranks, each training `max_steps` steps of the same batch size on its
own shard, so all four see the same tokens. The default horizon is long enough for DiLoCo's
regime: its cost in loss comes from the early rounds, while each rank's small batch still
makes its own steps noisy, and it shrinks as training goes on (H=100 in fp32: +7.6% at 1,200
steps, +3.2% at 3,600). Bytes are the payloads the ranks put on the wire
(values, positions and scales), summed over ranks; an fp32 all-reduce counts 4 bytes per
parameter per rank and step. One run: each figure is what that run measured.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import yaml
from benchkit import Bench
from rich.console import Console
from rich.table import Table

from node.distributed.compression import Compressor
from node.distributed.ddp import train_ddp
from node.distributed.diloco import DilocoConfig, train_diloco
from node.distributed.group import DistributedResult, GroupConfig
from node.engine import parse_spec

TARGET_REDUCTION = 1000.0
TARGET_PENALTY = 1.02  # final eval loss at most 2% above the baseline's


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--spec", type=Path, default=Path("node/specs/tiny.yaml"), help="job spec to train"
    )
    parser.add_argument("--ranks", type=int, default=3, help="local gloo ranks")
    parser.add_argument("--steps", type=int, default=7200, help="optimizer steps per rank")
    parser.add_argument("--every", type=int, default=100, help="DiLoCo's H: local steps per round")
    parser.add_argument(
        "--ddp-ratio", type=float, default=0.01, help="ddp: fraction of gradient entries sent"
    )
    parser.add_argument(
        "--ddp-bits", type=int, default=8, help="ddp: bits per sent value (32, 8, 4 or 2)"
    )
    parser.add_argument(
        "--diloco-ratio", type=float, default=1.0, help="DiLoCo: fraction of delta entries sent"
    )
    parser.add_argument(
        "--diloco-selection",
        choices=["topk", "random"],
        default="random",
        help="DiLoCo: largest entries (positions sent) or a mask shared by seed (none sent)",
    )
    parser.add_argument(
        "--diloco-bits", type=int, default=2, help="DiLoCo: bits per sent value (32, 8, 4 or 2)"
    )
    parser.add_argument("--outer-lr", type=float, default=1.0, help="DiLoCo's outer learning rate")
    parser.add_argument(
        "--outer-momentum", type=float, default=0.5, help="DiLoCo's outer Nesterov momentum"
    )
    args = parser.parse_args()
    bench = Bench(
        "distributed",
        {
            "diloco_reduction_ratio": f">= {TARGET_REDUCTION:g}",
            "diloco_loss_penalty_ratio": f"<= {TARGET_PENALTY}",
        },
    )

    raw = yaml.safe_load(args.spec.read_text())
    raw["training"]["max_steps"] = args.steps
    raw["checkpoint"]["every"] = args.every
    spec = parse_spec(raw)
    outer = {"outer_lr": args.outer_lr, "outer_momentum": args.outer_momentum}
    diloco_compressor = Compressor(
        args.diloco_ratio, args.diloco_bits, args.diloco_selection, seed=spec.reproducibility.seed
    )
    runs = {
        "baseline": lambda: train_ddp(spec, GroupConfig(args.ranks)),
        "ddp": lambda: train_ddp(
            spec, GroupConfig(args.ranks, Compressor(args.ddp_ratio, args.ddp_bits))
        ),
        "diloco_fp32": lambda: train_diloco(spec, DilocoConfig(args.ranks, **outer)),
        "diloco": lambda: train_diloco(spec, DilocoConfig(args.ranks, diloco_compressor, **outer)),
    }
    results: dict[str, DistributedResult] = {}
    seconds: dict[str, float] = {}
    for name, run in runs.items():
        start = time.perf_counter()
        results[name] = run()
        seconds[name] = time.perf_counter() - start

    base = results["baseline"]
    kept = f"{args.diloco_selection}-{args.diloco_ratio:g}" if args.diloco_ratio < 1 else "all"
    labels = {
        "baseline": "fp32 all-reduce every step",
        "ddp": f"ddp, top-{args.ddp_ratio:g} at {args.ddp_bits} bits",
        "diloco_fp32": f"DiLoCo H={args.every}, fp32",
        "diloco": f"DiLoCo H={args.every}, {kept} at {args.diloco_bits} bits",
    }
    table = Table(
        title=f"{args.spec.name}: {args.ranks} ranks x {args.steps} steps, "
        f"{base.parameters:,} parameters"
    )
    for column in ("run", "bytes sent", "reduction", "final eval loss", "loss penalty", "wall (s)"):
        table.add_column(column)
    figures: dict[str, float] = {"parameters": base.parameters}
    for name, result in results.items():
        sent = sum(result.bytes_sent)
        reduction = sum(base.bytes_sent) / sent
        penalty = result.eval_loss / base.eval_loss
        table.add_row(
            labels[name],
            f"{sent:,}",
            f"{reduction:,.1f}x",
            f"{result.eval_loss:.4f}",
            f"{penalty:.4f}",
            f"{seconds[name]:.1f}",
        )
        figures |= {f"{name}_bytes": sent, f"{name}_eval_loss": result.eval_loss}
        if name != "baseline":
            figures |= {
                f"{name}_reduction_ratio": reduction,
                f"{name}_loss_penalty_ratio": penalty,
            }
    Console(width=120).print(table)
    bench.record(figures)
    bench.report(f"DiLoCo H={args.every} against the fp32 all-reduce every step")


if __name__ == "__main__":
    main()
