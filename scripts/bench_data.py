"""Throughput and peak memory of the data pipeline (tokenize + filter + dedup) next to the
tokenizer alone, on a generated JSONL corpus many times the pipeline's buffer.

Both sides stream the same file through the same trained byte-level BPE in buffers of the same
size; the pipeline adds the quality filters and exact plus MinHash near-duplicate removal.
Repetitions alternate which side runs first; figures are medians with their range. Throughput
counts the tokens each side writes (the pipeline writes fewer: it dropped documents), and the
documents per second it reads, by wall time and by CPU time (which other load on a shared
machine moves far less; the target is on it). Peak memory is the growth of a child process's
RSS high-water mark while it streams the corpus, beside the corpus's size, and beside the same
for the corpus's first quarter: memory bounded by the buffer and the dedup window stays the same
when the corpus grows fourfold. Nothing is downloaded: the corpus comes from node.data.synthetic.

    python scripts/bench_data.py                          # 64 MB corpus, 1 MiB buffer, 3 reps
    python scripts/bench_data.py --corpus-mb 16 --repetitions 5
"""

from __future__ import annotations

import argparse
import io
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from benchkit import Bench, Timer, interleave

from marketplace.protocol import tokenizer
from marketplace.protocol.spec import DedupSpec, FilterSpec
from node.data import Pipeline, PipelineStats, TokenizerEncoder, documents, synthetic

FILTERS = FilterSpec(min_chars=40, min_alpha_ratio=0.6, max_repeated_line_ratio=0.3)
DEDUP = DedupSpec(exact=True, near=True, threshold=0.8, num_perm=64, window=5_000)
VOCAB_SIZE = 4096
TRAINING_DOCUMENTS = 4000  # the tokenizer learns from the corpus's first documents


class Sink(io.RawIOBase):
    """Takes the token stream and keeps nothing, so only the pipeline is measured."""

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:  # type: ignore[override]
        return len(data)


def make_corpus(path: Path, megabytes: int) -> tuple[int, int]:
    """A JSONL corpus of about `megabytes` MB with 5% exact copies, 5% near copies and 5% junk;
    its size in bytes and documents."""
    count = megabytes * 1_000_000 // 560  # generated documents average ~560 bytes as JSON
    size = synthetic.write_jsonl(
        path,
        synthetic.documents(count, seed=0, duplicates=0.05, near_duplicates=0.05, junk_share=0.05),
    )
    return size, count


def stream(path: Path, pipeline: Pipeline) -> PipelineStats:
    with path.open("rb") as f:
        return pipeline.run(documents("jsonl", f), Sink())


def side(name: str, trained_json: str, buffer: int) -> Pipeline:
    encoder = TokenizerEncoder(tokenizer.load(trained_json.encode()))
    if name == "pipeline":
        return Pipeline(encoder, FILTERS, DEDUP, buffer_bytes=buffer)
    return Pipeline(encoder, buffer_bytes=buffer)


def peak_rss_growth_mb(
    args: argparse.Namespace, corpus: Path, tokenizer_path: Path, name: str
) -> float:
    """RSS high-water growth of a fresh process streaming the corpus through one side."""
    # glibc would otherwise keep freed buffers in its heap; mapping blocks over 64 KiB on their
    # own returns them on free, so RSS tracks what is live
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536"}
    out = subprocess.run(
        [
            sys.executable,
            __file__,
            "--memory-of",
            name,
            "--buffer-mb",
            str(args.buffer_mb),
            "--corpus",
            str(corpus),
            "--tokenizer",
            str(tokenizer_path),
        ],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    )
    return float(out.stdout.strip().splitlines()[-1])


def vm_hwm_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def measure_memory_here(args: argparse.Namespace) -> None:
    """The child of peak_rss_growth_mb: build the side, reset the high-water mark, stream."""
    pipeline = side(args.memory_of, args.tokenizer.read_text(), args.buffer_mb << 20)
    Path("/proc/self/clear_refs").write_text("5")  # restart the high-water mark (Linux >= 4.0)
    before = vm_hwm_mb()
    stream(args.corpus, pipeline)
    print(vm_hwm_mb() - before)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus-mb", type=int, default=64, help="size of the generated corpus")
    parser.add_argument("--buffer-mb", type=int, default=1, help="the pipeline's text buffer")
    parser.add_argument("--repetitions", type=int, default=3, help="timed repetitions of each side")
    parser.add_argument("--memory-of", choices=["pipeline", "tokenizer"], help=argparse.SUPPRESS)
    parser.add_argument("--corpus", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--tokenizer", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.memory_of:
        measure_memory_here(args)
        return

    with tempfile.TemporaryDirectory(prefix="bench-data-") as folder:
        corpus = Path(folder) / "corpus.jsonl"
        size, count = make_corpus(corpus, args.corpus_mb)
        with corpus.open("rb") as f:
            head = [t for _, t in zip(range(TRAINING_DOCUMENTS), documents("jsonl", f))]
        trained = tokenizer.train("bpe", VOCAB_SIZE, head).to_str()
        tokenizer_path = Path(folder) / "tokenizer.json"
        tokenizer_path.write_text(trained)
        quarter = Path(folder) / "quarter.jsonl"
        with corpus.open("rb") as whole, quarter.open("wb") as part:
            part.writelines(line for _, line in zip(range(count // 4), whole))
        buffer = args.buffer_mb << 20

        bench = Bench(
            "data",
            {
                "pipeline_to_tokenizer_cpu_docs_ratio": ">= 0.3",
                "pipeline_peak_rss_ratio": "< 0.5",
                "rss_full_to_quarter_ratio": "< 1.25",
            },
        )

        def timed(name: str):
            def run(_: int) -> tuple[PipelineStats, Timer]:
                pipeline = side(name, trained, buffer)  # a fresh dedup window each time
                with Timer() as timer:
                    stats = stream(corpus, pipeline)
                return stats, timer

            return run

        kept = {}
        sides = {name: timed(name) for name in ("pipeline", "tokenizer")}
        for results in interleave(sides, args.repetitions):
            (p, pt), (t, tt) = results["pipeline"], results["tokenizer"]
            kept = {"pipeline": p, "tokenizer": t}
            bench.record(
                {
                    "pipeline_tokens_per_s": p.tokens / pt.wall_s,
                    "tokenizer_tokens_per_s": t.tokens / tt.wall_s,
                    "pipeline_docs_per_s": p.documents / pt.wall_s,
                    "tokenizer_docs_per_s": t.documents / tt.wall_s,
                    "pipeline_mb_per_s": size / 1e6 / pt.wall_s,
                    "pipeline_to_tokenizer_cpu_docs_ratio": tt.cpu_s / pt.cpu_s,
                    "pipeline_tokens_per_cpu_s": p.tokens / pt.cpu_s,
                    "pipeline_to_tokenizer_docs_ratio": (p.documents / pt.wall_s)
                    / (t.documents / tt.wall_s),
                    "pipeline_cpu_s": pt.cpu_s,
                    "tokenizer_cpu_s": tt.cpu_s,
                }
            )
        pipeline_mem = peak_rss_growth_mb(args, corpus, tokenizer_path, "pipeline")
        quarter_mem = peak_rss_growth_mb(args, quarter, tokenizer_path, "pipeline")
        tokenizer_mem = peak_rss_growth_mb(args, corpus, tokenizer_path, "tokenizer")
        p = kept["pipeline"]
        corpus_mb = size / 2**20
        bench.report(
            f"data pipeline on a generated {corpus_mb:.0f} MiB JSONL corpus ({count:,} documents), "
            f"BPE of {VOCAB_SIZE} tokens, {args.buffer_mb} MiB buffer, dedup window "
            f"{DEDUP.window:,}: pipeline (filter + exact/near dedup + tokenize) vs tokenizer alone",
            once={
                "corpus_mb": corpus_mb,
                "buffer_mb": args.buffer_mb,
                "corpus_buffer_ratio": corpus_mb / args.buffer_mb,
                "documents": p.documents,
                "filtered": p.filtered,
                "exact_duplicates": p.exact_duplicates,
                "near_duplicates": p.near_duplicates,
                "pipeline_tokens": p.tokens,
                "tokenizer_tokens": kept["tokenizer"].tokens,
                "peak_buffered_mb": p.peak_buffered_bytes / 2**20,
                "pipeline_peak_rss_mb": pipeline_mem,
                "tokenizer_peak_rss_mb": tokenizer_mem,
                "pipeline_peak_rss_quarter_mb": quarter_mem,
                "pipeline_peak_rss_ratio": pipeline_mem / corpus_mb,
                "rss_full_to_quarter_ratio": pipeline_mem / quarter_mem,
            },
        )


if __name__ == "__main__":
    main()
