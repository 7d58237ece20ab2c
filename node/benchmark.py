"""The admission benchmark: a standard matmul a provider runs and a verifier checks before
attesting.

The matrices hold small integers, so every product and sum is exact in float32 on any hardware:
the checksum of the result is the same on a CPU and on any GPU, and proves the multiplications
were done; the timing gives the GFLOP/s the verifier attests as the provider's score.
"""

from __future__ import annotations

import hashlib
import json
import platform
import time
from dataclasses import asdict, dataclass

import torch

from marketplace.errors import ZooError

SIZE = 512  # n for the n x n matmul: entries in {-2..2}, sums within 2**24, exact in float32
SEED = 20_260_101
REPEATS = 20
FORMAT = "zoo-compute/benchmark-v1"


class BenchmarkRejected(ZooError, ValueError):
    """A benchmark report that does not check out."""


@dataclass(frozen=True)
class BenchmarkReport:
    format: str
    size: int
    checksum: str  # sha256 of the int64 result matrix
    gflops: float  # measured throughput of the matmul
    device: str
    torch_version: str
    machine: str

    def to_bytes(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> BenchmarkReport:
        try:
            return cls(**json.loads(data))
        except (ValueError, TypeError) as exc:
            raise BenchmarkRejected(f"not a benchmark report: {exc}") from None


def _operands(device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(SEED)
    a = torch.randint(-2, 3, (SIZE, SIZE), generator=generator).to(device, torch.float32)
    b = torch.randint(-2, 3, (SIZE, SIZE), generator=generator).to(device, torch.float32)
    return a, b


def _checksum(product: torch.Tensor) -> str:
    return hashlib.sha256(product.to("cpu", torch.int64).numpy().tobytes()).hexdigest()


def expected_checksum() -> str:
    """The checksum every honest machine reports (computed here on the CPU)."""
    a, b = _operands(torch.device("cpu"))
    return _checksum(a @ b)


def run_benchmark(device: str | torch.device | None = None) -> BenchmarkReport:
    """Time REPEATS matmuls of SIZE x SIZE on `device` (default: CUDA when present, else CPU)."""
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    a, b = _operands(device)
    product = a @ b  # warm-up, and the result the checksum proves
    if device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(REPEATS):
        a @ b
    if device.type == "cuda":
        torch.cuda.synchronize()
    elapsed = time.perf_counter() - start
    flops = 2 * SIZE**3 * REPEATS
    return BenchmarkReport(
        format=FORMAT,
        size=SIZE,
        checksum=_checksum(product),
        gflops=round(flops / elapsed / 1e9, 3),
        device=(
            torch.cuda.get_device_name(device)
            if device.type == "cuda"
            else platform.processor() or "cpu"
        ),
        torch_version=torch.__version__,
        machine=platform.machine(),
    )


def check_report(report: BenchmarkReport) -> None:
    """Raise BenchmarkRejected unless the report is well-formed and its checksum is right."""
    if report.format != FORMAT or report.size != SIZE:
        raise BenchmarkRejected(f"unknown benchmark {report.format!r} of size {report.size}")
    if report.checksum != expected_checksum():
        raise BenchmarkRejected("matmul checksum is wrong: the multiplications were not done")
    if not report.gflops > 0:
        raise BenchmarkRejected(f"implausible throughput {report.gflops} GFLOP/s")
