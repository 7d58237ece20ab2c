"""The engine keeps the memory a training step frees, so the next step does not fault it in again.

Each case runs in a fresh process: the allocator's settings are the process's, once set.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Steps that allocate and free 80 MiB in 1 MiB blocks, as a step's activations and gradients come
# and go; prints the page faults a step costs once warm. "initial" holds glibc's thresholds at
# where a process starts (128 KiB; its default then moves them with what is freed, so how much
# a default process faults depends on its history), "keep" applies the engine's settings.
STEPS = """
import ctypes, resource, sys, torch
from node.engine.allocator import keep_freed_memory

if sys.argv[1] == "keep":
    assert keep_freed_memory()
else:
    mallopt = ctypes.CDLL(None).mallopt
    assert mallopt(-3, 128 << 10) and mallopt(-1, 128 << 10)  # M_MMAP_ and M_TRIM_THRESHOLD

def step():
    blocks = [torch.ones(1 << 18) for _ in range(80)]
    del blocks

for _ in range(2):
    step()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(5):
    step()
print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 5)
"""


def glibc() -> bool:
    try:
        ctypes.CDLL(None).mallopt  # noqa: B018
    except AttributeError:
        return False
    return True


def python(script: str, *args: str, **env: str) -> str:
    """What `script` prints in a fresh process, under this environment less malloc's settings."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    out = subprocess.run(
        [sys.executable, "-c", script, *args],
        cwd=ROOT,
        env={**clean, **env},
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.strip().splitlines()[-1]


@pytest.mark.skipif(not glibc(), reason="the allocator settings are glibc's")
def test_a_step_reuses_the_memory_the_last_step_freed():
    pages = 80 * 256  # 80 MiB in 4 KiB pages
    assert float(python(STEPS, "initial")) > pages / 2  # each block mapped and faulted anew
    assert float(python(STEPS, "keep")) < pages / 100  # the blocks freed are used again


@pytest.mark.skipif(not glibc(), reason="the allocator settings are glibc's")
@pytest.mark.parametrize(
    "env", [{"MALLOC_TRIM_THRESHOLD_": "0"}, {"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=0"}]
)
def test_an_environment_that_tunes_malloc_is_left_as_it_is(env):
    script = "from node.engine.allocator import keep_freed_memory; print(keep_freed_memory())"
    assert python(script, **env) == "False"
