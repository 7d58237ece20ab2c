"""Throughput and peak memory of the engine's work units next to a plain PyTorch loop.

Both train the same model from the same seed on the same batches with the same optimizer,
schedule, clipping and eval; the plain loop leaves out everything that makes a unit
verifiable (per-step loss checks, snapshots, state copies, hashing, environment capture). For a
Hugging Face spec the plain loop drives the `transformers` model itself, as a user's own
training script would, and takes the loss from its logits.
Rounds alternate which of the two runs first; every figure is the median over rounds, with its
range, and the ratios are medians of the per-round ratios. CPU time per token sits beside the
wall-clock throughput: other load on the machine moves it far less.

    python scripts/bench_training.py                     # tiny GPT, tiny Llama, JSONL Llama; CPU
    python scripts/bench_training.py --spec node/specs/gpt-small.yaml --steps 50 --rounds 4

A spec may read the files shipped beside the specs (node/specs/data): its local sources, and a
tokenizer it names by CID, served here by that CID as an IPFS node would serve it.

On a machine shared with other work, wall-clock figures swing with the load; with several
threads more so (a descheduled thread stalls the others), and `--threads 1` steadies them.
"""

from __future__ import annotations

import argparse
import logging
import os
import resource
import subprocess
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

import torch
import torch.nn.functional as F
from benchkit import Bench, Timer, interleave
from torch.optim.lr_scheduler import LambdaLR

from marketplace.ipfs.importer import only_hash
from marketplace.protocol.checkpoint import Checkpoint
from marketplace.protocol.hf import hf_model
from marketplace.protocol.spec import HFSpec
from node.engine import JobSpec, Shard, load_spec, parse_spec, run_unit
from node.engine.allocator import keep_freed_memory
from node.engine.data import DataError, LocalData, Sampler, load_corpora
from node.engine.train import build_optimizer, lr_schedule

logger = logging.getLogger("bench_training")

ROOT = Path(__file__).resolve().parents[1]
SPECS = ROOT / "node" / "specs"
DEFAULT_SPECS = [SPECS / "tiny.yaml", SPECS / "llama-tiny.yaml", SPECS / "llama-jsonl.yaml"]
Batch = tuple[torch.Tensor, torch.Tensor]


class PlainLoop:
    """The hand-written loop: model, AdamW, LambdaLR, clipping, autocast, nothing else."""

    def __init__(self, spec: JobSpec, device: torch.device):
        self.spec = spec
        self.device = device
        torch.manual_seed(spec.reproducibility.seed)
        if isinstance(spec.model, HFSpec):
            hf = hf_model(spec.model, spec.data.seq_len, spec.vocab_size)
            self.model = PlainCausalLM(hf).to(device)
        else:
            self.model = spec.build_model().to(device)
        self.optimizer = build_optimizer(self.model, spec.training)
        self.scheduler = LambdaLR(self.optimizer, lr_schedule(spec.training))
        self.autocast = torch.autocast(
            device.type, dtype=torch.bfloat16, enabled=spec.training.precision == "bf16"
        )

    def train(self, steps: Iterable[list[Batch]], eval_batches: Iterable[Batch]) -> float:
        accum = self.spec.training.grad_accum_steps
        for micro_batches in steps:
            for x, y in micro_batches:
                with self.autocast:
                    _, loss = self.model(x.to(self.device), y.to(self.device))
                (loss / accum).backward()
            if self.spec.training.grad_clip > 0:
                torch.nn.utils.clip_grad_norm_(
                    self.model.parameters(), self.spec.training.grad_clip
                )
            self.optimizer.step()
            self.scheduler.step()
            self.optimizer.zero_grad(set_to_none=True)
        self.model.eval()
        with torch.no_grad(), self.autocast:
            losses = [
                float(self.model(x.to(self.device), y.to(self.device))[1]) for x, y in eval_batches
            ]
        self.model.train()
        return sum(losses) / max(1, len(losses))


class PlainCausalLM(torch.nn.Module):
    """A `transformers` causal LM and the next-token loss of its logits, as a user writes it."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits = self.model(input_ids=x, use_cache=False).logits
        return logits, F.cross_entropy(logits.float().flatten(0, 1), y.flatten())


class ShippedFiles:
    """The files shipped beside the specs, served by their CIDs (Kubo's, from our importer)."""

    def __init__(self, folder: Path):
        self.files = {str(only_hash(p.read_bytes())): p for p in folder.iterdir() if p.is_file()}

    def cat(self, cid: str, max_bytes: int | None = None) -> bytes:
        if cid not in self.files:
            raise DataError(f"{cid} is none of the files in {SPECS / 'data'}")
        data = self.files[cid].read_bytes()
        if max_bytes is not None and len(data) > max_bytes:
            raise ValueError(f"{cid} holds more than {max_bytes} bytes")
        return data

    def read_to(self, cid: str, path: str, max_bytes: int | None = None) -> None:
        Path(path).write_bytes(self.cat(cid, max_bytes))


SHIPPED = ShippedFiles(SPECS / "data")
LOCAL = LocalData((SPECS / "data",))


def plan_batches(
    spec: JobSpec, shard: Shard, first_step: int, steps: int
) -> tuple[Iterator[list[Batch]], Iterator[Batch]]:
    """The exact batches the engine draws for those steps (no spikes expected), and its eval set,
    drawn as the loop reaches them, as a data loader hands a plain loop its batches."""
    sampler = Sampler(
        load_corpora(spec.data, SHIPPED, LOCAL),
        spec.data.seq_len,
        spec.training.batch_size,
        spec.reproducibility.seed,
    )
    accum = spec.training.grad_accum_steps
    train = (
        [sampler.batch(shard.index, s, m) for m in range(accum)]
        for s in range(first_step, first_step + steps)
    )
    evals = (sampler.eval_batch(i) for i in range(spec.training.eval_batches))
    return train, evals


def configure(spec: JobSpec) -> None:
    """The settings run_unit applies, so the plain loop runs under the same kernels, threads and
    allocator."""
    keep_freed_memory()
    torch.set_num_threads(spec.reproducibility.num_threads)
    torch.use_deterministic_algorithms(spec.reproducibility.deterministic)


def tokens_per_step(spec: JobSpec) -> int:
    return spec.training.batch_size * spec.training.grad_accum_steps * spec.data.seq_len


def measure_throughput(
    spec: JobSpec, steps: int, rounds: int, device: torch.device, bench: Bench
) -> None:
    """Records each round's throughput and CPU time per token of both sides, run back to back."""
    shard = Shard.of(spec, 0, 0, steps * (rounds + 1))
    configure(spec)  # run_unit applies the same settings itself and restores these on exit
    loop = PlainLoop(spec, device)
    checkpoint: Checkpoint | None = None

    def engine(_: int) -> Timer:
        nonlocal checkpoint
        with Timer() as timer:
            checkpoint, _, _ = run_unit(
                spec, checkpoint, shard, steps, device=device, storage=SHIPPED, local_data=LOCAL
            )
            _sync(device)
        return timer

    def plain(round_: int) -> Timer:
        batches, eval_batches = plan_batches(spec, shard, round_ * steps, steps)
        with Timer() as timer:
            loop.train(batches, eval_batches)
            _sync(device)
        return timer

    tokens = steps * tokens_per_step(spec)
    # round 0 warms caches and is not counted
    for timers in interleave({"engine": engine, "plain": plain}, rounds, warmup=1):
        e, p = timers["engine"], timers["plain"]
        bench.record(
            {
                "engine_tokens_per_s": tokens / e.wall_s,
                "plain_tokens_per_s": tokens / p.wall_s,
                # paired: a round's two sides ran back to back, so load from elsewhere hits both
                # alike
                "throughput_ratio": p.wall_s / e.wall_s,
                "engine_cpu_us_per_token": 1e6 * e.cpu_s / tokens,
                "plain_cpu_us_per_token": 1e6 * p.cpu_s / tokens,
                "cpu_throughput_ratio": p.cpu_s / e.cpu_s,
            }
        )


def measure_memory(
    spec: JobSpec, path: Path, steps: int, device: torch.device
) -> tuple[float, float]:
    """Peak memory in MB while training: CUDA allocator peaks in-process, else the growth of
    peak RSS in a fresh process for each side, from after torch and the data are loaded."""
    if device.type == "cuda":
        shard = Shard.of(spec, 0, 0, steps)
        configure(spec)
        peaks = []
        for side in ("engine", "plain"):
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(device)
            _run_side(side, spec, shard, steps, device)
            _sync(device)
            peaks.append(torch.cuda.max_memory_allocated(device) / 2**20)
        return peaks[0], peaks[1]
    # glibc would otherwise keep freed tensor memory in its heap (as the engine asks it to, except
    # under this setting), so RSS would stop tracking what is live; mapping every block over
    # 64 KiB on its own returns it on free
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536"}
    peaks = []
    for side in ("engine", "plain"):
        out = subprocess.run(
            [
                sys.executable,
                __file__,
                "--spec",
                str(path),
                "--steps",
                str(steps),
                "--threads",
                str(spec.reproducibility.num_threads),
                "--memory-of",
                side,
            ],
            capture_output=True,
            text=True,
            check=True,
            env=env,
        )
        peaks.append(float(out.stdout.strip().splitlines()[-1]))
    return peaks[0], peaks[1]


def read_spec(path: Path, threads: int | None) -> JobSpec:
    spec = load_spec(path)
    if threads is None:
        return spec
    raw = spec.model_dump(mode="json")
    raw["reproducibility"]["num_threads"] = threads
    return parse_spec(raw)


def _run_side(side: str, spec: JobSpec, shard: Shard, steps: int, device: torch.device) -> None:
    if side == "engine":
        run_unit(spec, None, shard, steps, device=device, storage=SHIPPED, local_data=LOCAL)
    else:
        PlainLoop(spec, device).train(*plan_batches(spec, shard, 0, steps))


def _reset_peak_rss() -> float:
    """Restart the kernel's high-water mark of this process's RSS (Linux >= 4.0); return it."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        logger.warning("cannot reset peak RSS; the figure includes start-up")
        return 0.0
    return _peak_rss_mb()


def _peak_rss_mb() -> float:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024  # kB
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--spec",
        type=Path,
        nargs="+",
        default=DEFAULT_SPECS,
        help="job specs to train, each benched in turn (default: tiny GPT and tiny Llama)",
    )
    parser.add_argument(
        "--steps", type=int, help="optimizer steps per round (default: checkpoint.every)"
    )
    parser.add_argument(
        "--rounds", type=int, default=12, help="timed rounds of each, after one warm-up round"
    )
    parser.add_argument("--device", help="cpu or cuda (default: cuda when available)")
    parser.add_argument(
        "--threads", type=int, help="override the spec's reproducibility.num_threads"
    )
    parser.add_argument("--memory-of", choices=["engine", "plain"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    paths = [path.resolve() for path in args.spec]
    os.chdir(ROOT)  # specs name their shipped files from the repository's root
    for path in paths:
        spec = read_spec(path, args.threads)
        steps = args.steps or spec.checkpoint.every
        if args.memory_of:  # child process of measure_memory
            configure(spec)
            load_corpora(spec.data, SHIPPED, LOCAL)  # reading the corpus is not training
            baseline = _reset_peak_rss()
            _run_side(args.memory_of, spec, Shard.of(spec, 0, 0, steps), steps, device)
            print(_peak_rss_mb() - baseline)
            return
        bench_spec(spec, path, steps, args.rounds, device)


def bench_spec(spec: JobSpec, path: Path, steps: int, rounds: int, device: torch.device) -> None:
    bench = Bench("training", {"throughput_ratio": ">= 0.97"})
    measure_throughput(spec, steps, rounds, device, bench)
    engine_mem, plain_mem = measure_memory(spec, path, steps, device)
    memory_kind = "CUDA peak allocated" if device.type == "cuda" else "RSS growth while training"
    bench.report(
        f"{spec.name} on {device}, num_threads={spec.reproducibility.num_threads}: engine "
        f"(run_unit) vs a plain PyTorch loop, {steps} steps x {rounds} rounds; "
        f"memory: {memory_kind}, measured once",
        once={"engine_peak_mem_mb": engine_mem, "plain_peak_mem_mb": plain_mem},
    )


if __name__ == "__main__":
    main()
