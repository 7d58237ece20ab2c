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
import random
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import ipfshttpclient

from marketplace.ipfs.cid import CID
from marketplace.ipfs.importer import FileImporter
from marketplace.storage import Storage

MIB = 1024 * 1024


def write_input(path: Path, size: int) -> None:
    """Reproducible random input, written a piece at a time (never whole in memory). No two
    chunks are alike, so every block is hashed and written: repeated content would let the
    node skip the blocks it already stored."""
    rng = random.Random("bench_storage")
    with open(path, "wb") as out:
        out.writelines(rng.randbytes(min(MIB, size - offset)) for offset in range(0, size, MIB))


def reference_cid(path: Path) -> tuple[str, str]:
    """The file's CID from the independent `ipfs_cid` tool when it is installed, otherwise from
    this project's importer hashing the file locally; and which of the two it is."""
    tool = shutil.which("ipfs_cid")
    if tool:
        out = subprocess.run([tool, str(path)], capture_output=True, text=True, check=True)
        return json.loads(out.stdout)["CIDv0"], "ipfs_cid"
    importer = FileImporter(CID.of_parts)
    with open(path, "rb") as file:
        while piece := file.read(MIB):
            importer.write(piece)
    return str(importer.finish().cid), "local importer (ipfs_cid not installed)"


def sha256_mb_per_s(data: bytes) -> float:
    """Plain hashlib over the same bytes, already in memory, in the 256 KiB blocks the node
    hashes: the floor any add has to pay."""
    view = memoryview(data)
    block = 256 * 1024
    start = time.perf_counter()
    for offset in range(0, len(view), block):
        hashlib.sha256(view[offset:offset + block]).digest()
    return len(data) / 1e6 / (time.perf_counter() - start)


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


def filesystem_of(path: str) -> str:
    """The file system type holding `path`, from the longest matching mount point."""
    mounts = [line.split()[1:3] for line in Path("/proc/mounts").read_text().splitlines()]
    real = os.path.realpath(path)
    matching = [(point, fstype) for point, fstype in mounts
                if real == point or real.startswith(point.rstrip("/") + "/")]
    return max(matching, key=lambda m: len(m[0]))[1] if matching else "unknown"


def _fs_note(fstype: str) -> str:
    return f"{fstype}: " + ("the node's own cost, no disk" if fstype == "tmpfs"
                            else "this disk's speed included")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class Run:
    add_mb_per_s: float
    sha256_mb_per_s: float
    peak_rss_kib: int
    server_cpu_s: float  # node process, during the add
    client_cpu_s: float  # this process (the Storage client), during the add


def measure(data: Path, repo: Path, runs: int) -> tuple[list[Run], int, set[str]]:
    """Alternate adds and plain hashing, so both see the machine in the same state."""
    size = data.stat().st_size
    process, api = start_node(repo)
    try:
        with Storage(api, replicas=[]) as storage, ipfshttpclient.Client(api) as admin:
            storage.add_bytes(b"warm-up")  # load every code path before measuring idle
            idle_kib = rss_kib(process.pid, "VmRSS")
            results, cids = [], set()
            for _ in range(runs):
                reset_peak_rss(process.pid)
                server_cpu, client_cpu = cpu_seconds(process.pid), time.process_time()
                start = time.perf_counter()
                cid = storage.add_file(data)
                cids.add(cid)
                elapsed = time.perf_counter() - start
                run = Run(size / 1e6 / elapsed, 0.0, rss_kib(process.pid, "VmHWM"),
                          cpu_seconds(process.pid) - server_cpu, time.process_time() - client_cpu)
                admin.pin.rm(cid)  # start the next run from an empty store
                admin.repo.gc()
                run.sha256_mb_per_s = sha256_mb_per_s(data.read_bytes())
                results.append(run)
    finally:
        process.terminate()
        process.wait(timeout=30)
    return results, idle_kib, cids


def report(size_mib: int, repo_dir: str, runs: list[Run], idle_kib: int, cid: str,
           reference: str) -> None:
    best = max(runs, key=lambda r: r.add_mb_per_s)
    sha = max(r.sha256_mb_per_s for r in runs)
    figures = {
        "add_mb_per_s": round(best.add_mb_per_s, 1),
        "sha256_mb_per_s": round(sha, 1),
        "add_throughput_ratio": round(best.add_mb_per_s / sha, 3),
        "server_peak_rss_above_idle_mb": round((max(r.peak_rss_kib for r in runs) - idle_kib)
                                               / 1024, 1),
        # CPU time moves less with other load on the machine than wall time does.
        "node_cpu_s": round(min(r.server_cpu_s for r in runs), 2),
        "client_cpu_s": round(min(r.client_cpu_s for r in runs), 2),
    }
    hash_cpu_s = size_mib / sha
    rows = [
        ("file added", f"{size_mib} MiB", f"CID {cid}"),
        ("CID checked against", "", reference),
        ("node repo", repo_dir, _fs_note(filesystem_of(repo_dir))),
        ("add via HTTP API", f"{best.add_mb_per_s:.0f} MB/s",
         "runs: " + ", ".join(f"{r.add_mb_per_s:.0f}" for r in runs)),
        ("hashlib.sha256", f"{sha:.0f} MB/s",
         "runs: " + ", ".join(f"{r.sha256_mb_per_s:.0f}" for r in runs)),
        ("add / sha256", f"{figures['add_throughput_ratio']:.2f}", "target >= 0.5"),
        ("CPU per add, least", f"{figures['node_cpu_s']:.2f} s node",
         f"{figures['client_cpu_s']:.2f} s client; hashing alone {hash_cpu_s:.2f} s"),
        ("cores, load average", f"{os.cpu_count()}", " ".join(f"{x:.1f}" for x in os.getloadavg())),
        ("server RSS idle", f"{idle_kib / 1024:.1f} MiB", ""),
        ("server peak above idle", f"{figures['server_peak_rss_above_idle_mb']:.1f} MiB",
         "target < 64"),
    ]
    for name, value, note in rows:
        print(f"{name:<24} {value:>14}  {note}")
    print(json.dumps({"bench": "storage", "figures": figures,
                      "targets": {"add_throughput_ratio": ">= 0.5",
                                  "server_peak_rss_above_idle_mb": "< 64"}}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mib", type=int, default=256, help="size of the added file")
    parser.add_argument("--runs", type=int, default=3, help="adds (and hash runs); best is kept")
    parser.add_argument("--repo-dir", type=Path,
                        default=Path("/dev/shm") if Path("/dev/shm").is_dir() else None,
                        help="where the node's repo goes (default: /dev/shm, tmpfs)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-input-") as inputs, \
            tempfile.TemporaryDirectory(prefix="bench-ipfs-", dir=args.repo_dir) as repo_dir:
        data = Path(inputs) / "input.bin"
        write_input(data, args.size_mib * MIB)
        runs, idle_kib, cids = measure(data, Path(repo_dir) / "repo", args.runs)
        expected, reference = reference_cid(data)
    if cids != {expected}:
        sys.exit(f"the node's CIDs {sorted(cids)} differ from {reference}'s {expected}")
    report(args.size_mib, str(args.repo_dir or tempfile.gettempdir()), runs, idle_kib, expected,
           reference)


if __name__ == "__main__":
    main()
