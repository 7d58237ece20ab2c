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
from typing import Literal

import torch
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from marketplace.errors import ZooError

SIZE = 512  # n for the n x n matmul: entries in {-2..2}, sums within 2**24, exact in float32
SEED = 20_260_101
REPEATS = 20
FORMAT: Literal["zoo-compute/benchmark-v1"] = "zoo-compute/benchmark-v1"


class BenchmarkRejected(ZooError, ValueError):
    """A benchmark report that does not check out."""


# A report is a few hundred bytes; anything much larger is not one, and is not read further.
MAX_REPORT_BYTES = 4096
# Far above any machine's score (an H100 does about 67,000 GFLOP/s in float32): the attested
# score is a uint, and a score past this is a lie, not a fast machine.
MAX_GFLOPS = 1e9


class BenchmarkReport(BaseModel):
    """The document a provider pins and a verifier reads: validated field by field, since anyone
    may register with any bytes. Types are strict (no "1.5" for 1.5), the throughput is finite,
    positive and bounded, strings are bounded, and unknown fields are refused."""

    model_config = ConfigDict(strict=True, frozen=True, extra="forbid")

    format: Literal["zoo-compute/benchmark-v1"]
    size: int = Field(ge=1, le=1 << 16)
    checksum: str = Field(pattern=r"^[0-9a-f]{64}$")  # sha256 of the int64 result matrix
    gflops: float = Field(gt=0, le=MAX_GFLOPS, allow_inf_nan=False)  # the matmul's throughput
    device: str = Field(max_length=200)
    torch_version: str = Field(max_length=64)
    machine: str = Field(max_length=64)

    def to_bytes(self) -> bytes:
        return json.dumps(self.model_dump(), sort_keys=True).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> BenchmarkReport:
        if len(data) > MAX_REPORT_BYTES:
            raise BenchmarkRejected(f"not a benchmark report: over {MAX_REPORT_BYTES} bytes")
        try:
            return cls.model_validate_json(data)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(map(str, e['loc'])) or 'document'}: {e['msg']}" for e in exc.errors()
            )
            raise BenchmarkRejected(f"not a benchmark report: {problems}") from None


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
    if report.size != SIZE:
        raise BenchmarkRejected(f"unknown benchmark {report.format!r} of size {report.size}")
    if report.checksum != expected_checksum():
        raise BenchmarkRejected("matmul checksum is wrong: the multiplications were not done")
