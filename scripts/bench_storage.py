"""Add throughput and server memory of the embedded IPFS node, against raw SHA-256 on this machine.

Adds a file through the HTTP API (the Storage client, as project code does) to a node running in
its own process, and hashes the same amount of data with hashlib in this process, in the same
run. Prints a table, then one JSON line. The node's repo goes to tmpfs (/dev/shm) by default so
the figure is the node's own cost rather than this machine's disk; --repo-dir puts it on disk.
"""

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import ipfshttpclient

from marketplace.storage import Storage

MIB = 1024 * 1024


def write_input(path: Path, size: int) -> None:
    """Incompressible, reproducible input, written a piece at a time (never whole in memory)."""
    seed = hashlib.sha256(b"bench_storage").digest()
    with open(path, "wb") as out:
        written = 0
        while written < size:
            piece = hashlib.sha256(seed + written.to_bytes(8, "big")).digest() * (MIB // 32)
            out.write(piece[:size - written])
            written += len(piece)


def sha256_mb_per_s(size: int) -> float:
    """Plain hashlib over the same number of bytes, in the 256 KiB pieces the node hashes."""
    piece = os.urandom(256 * 1024)
    start = time.perf_counter()
    for _ in range(size // len(piece)):
        hashlib.sha256(piece).digest()
    return size / MIB / (time.perf_counter() - start)


def rss_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"{field} missing from /proc/{pid}/status")


def reset_peak_rss(pid: int) -> None:
    """Restart the kernel's peak-RSS counter (VmHWM) so a run's peak is its own."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")


def start_node(repo: Path) -> tuple[subprocess.Popen, str]:
    process = subprocess.Popen([sys.executable, "-m", "marketplace.ipfs", "--repo", str(repo),
                                "--port", "0"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while not (repo / "api").exists():
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"node did not start: {process.stderr.read().decode()}")
        time.sleep(0.05)
    return process, (repo / "api").read_text() + "/http"


def _runs(rates: list[float]) -> str:
    return "best of " + ", ".join(f"{rate:.0f}" for rate in rates)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mib", type=int, default=256, help="size of the added file")
    parser.add_argument("--runs", type=int, default=3, help="adds (and hash runs); best is kept")
    parser.add_argument("--repo-dir", type=Path,
                        default=Path("/dev/shm") if Path("/dev/shm").is_dir() else None,
                        help="where the node's repo goes (default: /dev/shm, tmpfs)")
    args = parser.parse_args()
    size = args.size_mib * MIB

    with tempfile.TemporaryDirectory(prefix="bench-input-") as inputs, \
            tempfile.TemporaryDirectory(prefix="bench-ipfs-", dir=args.repo_dir) as repo_dir:
        data = Path(inputs) / "input.bin"
        write_input(data, size)
        process, api = start_node(Path(repo_dir) / "repo")
        try:
            with Storage(api, replicas=[]) as storage:
                storage.add_bytes(b"warm-up")  # load every code path before measuring idle
                idle_kib = rss_kib(process.pid, "VmRSS")
                add_rates, peaks_kib = [], []
                for _ in range(args.runs):
                    reset_peak_rss(process.pid)
                    start = time.perf_counter()
                    cid = storage.add_file(data)
                    add_rates.append(size / MIB / (time.perf_counter() - start))
                    peaks_kib.append(rss_kib(process.pid, "VmHWM"))
                    with ipfshttpclient.Client(api) as admin:  # start the next run empty
                        admin.pin.rm(cid)
                        admin.repo.gc()
        finally:
            process.terminate()
            process.wait(timeout=30)
    hash_rates = [sha256_mb_per_s(size) for _ in range(args.runs)]

    add_mb_per_s, sha_mb_per_s = max(add_rates), max(hash_rates)
    figures = {
        "add_mb_per_s": round(add_mb_per_s, 1),
        "sha256_mb_per_s": round(sha_mb_per_s, 1),
        "add_throughput_ratio": round(add_mb_per_s / sha_mb_per_s, 3),
        "server_peak_rss_above_idle_mb": round((max(peaks_kib) - idle_kib) / 1024, 1),
    }
    rows = [
        ("file added", f"{args.size_mib} MiB", f"CID {cid}"),
        ("node repo", str(args.repo_dir or tempfile.gettempdir()), ""),
        ("add via HTTP API", f"{add_mb_per_s:.0f} MB/s", _runs(add_rates)),
        ("hashlib.sha256", f"{sha_mb_per_s:.0f} MB/s", _runs(hash_rates)),
        ("add / sha256", f"{figures['add_throughput_ratio']:.2f}", "target >= 0.5"),
        ("server RSS idle", f"{idle_kib / 1024:.1f} MiB", ""),
        ("server peak above idle", f"{figures['server_peak_rss_above_idle_mb']:.1f} MiB",
         "target < 64"),
    ]
    for name, value, note in rows:
        print(f"{name:<24} {value:>14}  {note}")
    print(json.dumps({"bench": "storage", "figures": figures,
                      "targets": {"add_throughput_ratio": ">= 0.5",
                                  "server_peak_rss_above_idle_mb": "< 64"}}))


if __name__ == "__main__":
    main()
