"""Bytes communicated and final eval loss of three ways to train one spec on the same tokens:
fp32 all-reduce every step (the baseline), ddp with compressed gradients, and DiLoCo with
compressed pseudo-gradients; the reduction in bytes and the loss penalty of each.

Every run has the same ranks, each training `max_steps` steps on its own shard, so all three
see the same tokens. Bytes are the payloads the ranks put on the wire (values, indices and
scales), summed over ranks; an fp32 all-reduce counts 4 bytes per parameter per rank and step.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import yaml
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
    parser.add_argument("--steps", type=int, default=300, help="optimizer steps per rank")
    parser.add_argument("--every", type=int, default=50, help="DiLoCo's H: local steps per round")
    parser.add_argument(
        "--ddp-topk", type=float, default=0.01, help="ddp: fraction of gradient entries sent"
    )
    parser.add_argument(
        "--ddp-bits", type=int, default=8, help="ddp: bits per sent value (32, 8 or 4)"
    )
    parser.add_argument(
        "--diloco-topk", type=float, default=0.05, help="DiLoCo: fraction of delta entries sent"
    )
    parser.add_argument(
        "--diloco-bits", type=int, default=4, help="DiLoCo: bits per sent value (32, 8 or 4)"
    )
    parser.add_argument(
        "--outer-lr", type=float, default=0.7, help="DiLoCo's outer Nesterov learning rate"
    )
    args = parser.parse_args()

    raw = yaml.safe_load(args.spec.read_text())
    raw["training"]["max_steps"] = args.steps
    raw["checkpoint"]["every"] = args.every
    spec = parse_spec(raw)
    runs = {
        "baseline": lambda: train_ddp(spec, GroupConfig(args.ranks)),
        "ddp": lambda: train_ddp(
            spec, GroupConfig(args.ranks, Compressor(args.ddp_topk, args.ddp_bits))
        ),
        "diloco": lambda: train_diloco(
            spec,
            DilocoConfig(
                args.ranks, Compressor(args.diloco_topk, args.diloco_bits), outer_lr=args.outer_lr
            ),
        ),
    }
    results: dict[str, DistributedResult] = {}
    seconds: dict[str, float] = {}
    for name, run in runs.items():
        start = time.perf_counter()
        results[name] = run()
        seconds[name] = time.perf_counter() - start

    base = results["baseline"]
    labels = {
        "baseline": "fp32 all-reduce every step",
        "ddp": f"ddp, top-{args.ddp_topk:g} at {args.ddp_bits} bits",
        "diloco": f"DiLoCo H={args.every}, top-{args.diloco_topk:g} at {args.diloco_bits} bits",
    }
    table = Table(
        title=f"{args.spec.name}: {args.ranks} ranks x {args.steps} steps, {base.parameters:,} parameters"
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
        figures |= {f"{name}_bytes": sent, f"{name}_eval_loss": round(result.eval_loss, 4)}
        if name != "baseline":
            figures |= {
                f"{name}_reduction_ratio": round(reduction, 1),
                f"{name}_loss_penalty_ratio": round(penalty, 4),
            }
    console = Console()
    console.print(table)
    met = (
        figures["diloco_reduction_ratio"] >= TARGET_REDUCTION
        and figures["diloco_loss_penalty_ratio"] <= TARGET_PENALTY
    )
    console.print(
        f"DiLoCo: {figures['diloco_reduction_ratio']:,.1f}x less communication at a loss "
        f"ratio of {figures['diloco_loss_penalty_ratio']:.4f}; target met: {met}"
    )
    print(
        json.dumps(
            {
                "bench": "distributed",
                "figures": figures,
                "targets": {
                    "diloco_reduction_ratio": f">= {TARGET_REDUCTION:g}",
                    "diloco_loss_penalty_ratio": f"<= {TARGET_PENALTY}",
                },
            }
        )
    )


if __name__ == "__main__":
    main()
