"""Add throughput and server memory of the embedded IPFS node, against raw SHA-256 on this machine.

Adds a file through the HTTP API (the Storage client, as project code does) to a node running in
its own process, and hashes the same amount of data with hashlib in this process, in the same
run: adds and hashing take turns, and each figure is the median over the runs, with its range.
CPU time per GB, of the node and client together and of hashlib, sits beside the throughputs:
other load on the machine moves it far less. The node's repo goes to tmpfs (/dev/shm) by default
so the figure is the node's own cost rather than this machine's disk; --repo-dir puts it on disk.
"""

import argparse
import hashlib
import json
import os
import random
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import ipfshttpclient
from benchkit import Bench, Timer, interleave
from rich.console import Console

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


def sha256_blocks(data: bytes) -> None:
    """Plain hashlib over the same bytes, already in memory, in the 256 KiB blocks the node
    hashes: the floor any add has to pay."""
    view = memoryview(data)
    block = 256 * 1024
    for offset in range(0, len(view), block):
        hashlib.sha256(view[offset : offset + block]).digest()


def rss_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"{field} missing from /proc/{pid}/status")


def reset_peak_rss(pid: int) -> None:
    """Restart the kernel's peak-RSS counter (VmHWM) so a run's peak is its own."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")


def start_node(repo: Path, token: str) -> tuple[subprocess.Popen, str]:
    """The node, with `token` as its RPC API's bearer token; its API multiaddr."""
    process = subprocess.Popen(
        [sys.executable, "-m", "marketplace.ipfs", "--repo", str(repo), "--port", "0"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=os.environ | {"ZOO_IPFS_API_TOKEN": token},
    )
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
    matching = [
        (point, fstype)
        for point, fstype in mounts
        if real == point or real.startswith(point.rstrip("/") + "/")
    ]
    return max(matching, key=lambda m: len(m[0]))[1] if matching else "unknown"


def _fs_note(fstype: str) -> str:
    return f"{fstype}: " + (
        "the node's own cost, no disk" if fstype == "tmpfs" else "this disk's speed included"
    )


def measure(data: Path, repo: Path, runs: int, bench: Bench) -> tuple[int, set[str]]:
    """Records each run's add and plain hashing, taking turns, so both see the machine in the
    same state; the node's idle RSS and the CIDs it returned."""
    gb = data.stat().st_size / 1e9
    token = secrets.token_urlsafe(32)
    process, api = start_node(repo, token)
    try:
        with (
            Storage(api, replicas=[], api_token=token) as storage,
            ipfshttpclient.Client(api, headers={"Authorization": f"Bearer {token}"}) as admin,
        ):
            storage.add_bytes(b"warm-up")  # load every code path before measuring idle
            idle_kib = rss_kib(process.pid, "VmRSS")
            cids: set[str] = set()

            def add(_: int) -> tuple[Timer, Timer, int]:
                reset_peak_rss(process.pid)
                with Timer() as both, Timer(process.pid) as node:
                    cid = storage.add_file(data)
                peak_kib = rss_kib(process.pid, "VmHWM")
                cids.add(cid)
                admin.pin.rm(cid)  # start the next run from an empty store
                admin.repo.gc()
                return both, node, peak_kib

            def sha256(_: int) -> Timer:
                payload = data.read_bytes()
                with Timer() as timer:
                    sha256_blocks(payload)
                return timer

            for sides in interleave({"add": add, "sha256": sha256}, runs):
                (both, node, peak_kib), sha = sides["add"], sides["sha256"]
                bench.record(
                    {
                        "add_mb_per_s": gb * 1e3 / both.wall_s,
                        "sha256_mb_per_s": gb * 1e3 / sha.wall_s,
                        "add_throughput_ratio": sha.wall_s / both.wall_s,
                        "server_peak_rss_above_idle_mb": (peak_kib - idle_kib) / 1024,
                        "node_cpu_s": node.cpu_s,
                        "client_cpu_s": both.cpu_s - node.cpu_s,
                        "add_cpu_s_per_gb": both.cpu_s / gb,
                        "sha256_cpu_s_per_gb": sha.cpu_s / gb,
                        "cpu_throughput_ratio": sha.cpu_s / both.cpu_s,
                    }
                )
    finally:
        process.terminate()
        process.wait(timeout=30)
    return idle_kib, cids


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mib", type=int, default=256, help="size of the added file")
    parser.add_argument(
        "--runs", type=int, default=7, help="adds and hash runs, taking turns; medians are reported"
    )
    parser.add_argument(
        "--repo-dir",
        type=Path,
        default=Path("/dev/shm") if Path("/dev/shm").is_dir() else None,
        help="where the node's repo goes (default: /dev/shm, tmpfs)",
    )
    args = parser.parse_args()
    bench = Bench(
        "storage", {"add_throughput_ratio": ">= 0.5", "server_peak_rss_above_idle_mb": "< 64"}
    )
    with (
        tempfile.TemporaryDirectory(prefix="bench-input-") as inputs,
        tempfile.TemporaryDirectory(prefix="bench-ipfs-", dir=args.repo_dir) as repo_dir,
    ):
        data = Path(inputs) / "input.bin"
        write_input(data, args.size_mib * MIB)
        idle_kib, cids = measure(data, Path(repo_dir) / "repo", args.runs, bench)
        expected, reference = reference_cid(data)
    if cids != {expected}:
        sys.exit(f"the node's CIDs {sorted(cids)} differ from {reference}'s {expected}")
    repo_place = str(args.repo_dir or tempfile.gettempdir())
    Console().print(
        f"added {args.size_mib} MiB as CID {expected}, checked against {reference}; "
        f"node repo in {repo_place} ({_fs_note(filesystem_of(repo_place))})"
    )
    bench.report(
        f"IPFS add via the HTTP API vs hashlib.sha256, {args.size_mib} MiB x {args.runs}",
        once={"server_idle_rss_mb": idle_kib / 1024},
    )


if __name__ == "__main__":
    main()
