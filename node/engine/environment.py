"""Capture of the software and hardware a unit ran on, for every checkpoint's metadata, and the
execution class (marketplace.protocol.execution) it ran in."""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import os
import platform
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch

from marketplace.protocol import checkpoint
from marketplace.protocol.execution import ExecutionClass
from marketplace.protocol.spec import JobSpec

_PACKAGES = ("zoo-compute", "torch", "numpy", "pydantic", "pyyaml")


@dataclass(frozen=True)
class Host:
    """The execution settings a spec leaves to the machine that runs a unit. They change the bits
    of the result (so they are part of its execution class) but not what the result means."""

    num_threads: int | None = (
        None  # intra-op CPU threads; None: the spec's reproducibility.num_threads
    )
    matmul_precision: Literal["highest", "high", "medium"] = "highest"  # TF32/bf16 matmuls?
    mkldnn: bool = True  # oneDNN kernels on the CPU

    def threads(self, spec: JobSpec) -> int:
        return self.num_threads or spec.reproducibility.num_threads


DEFAULT_HOST = Host()


def execution_class(
    spec: JobSpec, device: torch.device, host: Host = DEFAULT_HOST
) -> ExecutionClass:
    """The class a unit of `spec` runs in on `device` of this machine with `host`'s settings."""
    cuda = device.type == "cuda"
    capability = None
    if cuda:
        major, minor = torch.cuda.get_device_capability(device)
        capability = f"{major}.{minor}"
    return ExecutionClass(
        device=device.type,
        device_model=torch.cuda.get_device_name(device) if cuda else _cpu_model(),
        capability=capability,
        torch=str(torch.__version__),
        cuda=torch.version.cuda,
        cudnn=torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        deterministic=spec.reproducibility.deterministic,
        num_threads=host.threads(spec),
        matmul_precision=host.matmul_precision,
        mkldnn=host.mkldnn,
        dtype=spec.training.precision,
    )


def capture(
    seed: int, num_threads: int, deterministic: bool, device: torch.device
) -> dict[str, Any]:
    """What a verifier needs to judge whether it can reproduce a unit's bits."""
    return {
        "code": code_version(),
        "packages": _package_versions(),
        "python": platform.python_version(),
        "torch": {
            "version": str(torch.__version__),  # a str subclass that weights-only loading refuses
            "cuda": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version()
            if torch.backends.cudnn.is_available()
            else None,
        },
        "hardware": hardware(device),
        "seed": seed,
        "num_threads": num_threads,
        "deterministic": deterministic,
        "device": str(device),
    }


def _unit_sources() -> list[Path]:
    protocol = Path(checkpoint.__file__).parent
    formats = [protocol / name for name in ("spec.py", "checkpoint.py", "tagged.py")]
    return sorted(Path(__file__).parent.glob("*.py")) + formats


@functools.cache
def code_version() -> dict[str, Any]:
    """The digest of the sources that decide a unit's bytes (the engine's, and the protocol's spec
    and checkpoint format) always; the git commit too when running from a checkout."""
    here = Path(__file__).parent
    digest = hashlib.sha256()
    for path in _unit_sources():
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    version: dict[str, Any] = {
        "engine_sha256": digest.hexdigest(),
        "git_commit": None,
        "git_dirty": None,
    }
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            check=False,
            cwd=here,
            capture_output=True,
            text=True,
            timeout=10,
        )
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "."],
            check=False,
            cwd=here,
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired):
        return version
    if commit.returncode == 0:
        version["git_commit"] = commit.stdout.strip()
        version["git_dirty"] = bool(dirty.stdout.strip())
    return version


@functools.cache
def _package_versions() -> dict[str, str | None]:
    versions: dict[str, str | None] = {}
    for name in _PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def hardware(device: torch.device) -> dict[str, Any]:
    """The machine `device` is on: CPU, its count, and the GPU when it is one."""
    info: dict[str, Any] = {
        "machine": platform.machine(),
        "system": platform.system(),
        "cpu": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "byteorder": sys.byteorder,
    }
    if device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(device)
        info["gpu_capability"] = list(torch.cuda.get_device_capability(device))
    return info


@functools.cache
def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()
