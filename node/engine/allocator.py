"""Keep the memory a training step frees for the next step (glibc's malloc, on Linux).

Every step frees and allocates again the same large buffers: activations, logits, gradients.
By default glibc returns a block over its dynamic mmap threshold to the kernel when it is freed,
and trims the heap's free top, so the next step page-faults the same memory in again, zeroed by
the kernel: on `node/specs/llama-jsonl.yaml` about 7,000 faults a step and a tenth of its time
(scripts/bench_training.py). With the threshold at its largest and trimming left for a free top
of over 1 GiB, the process keeps what it freed and reuses it.

A process whose environment already tunes glibc's malloc (a MALLOC_*_ variable, or malloc
tunables in GLIBC_TUNABLES) is left as its owner set it.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import os

logger = logging.getLogger(__name__)

# mallopt parameters (glibc's malloc.h)
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_BYTES = 32 << 20  # glibc's largest: blocks above it are still mapped on their own
TRIM_THRESHOLD_BYTES = 1 << 30


@functools.cache
def keep_freed_memory() -> bool:
    """Set glibc's malloc to keep freed memory, once per process; False where it is left alone
    (another C library, or an environment that tunes malloc itself)."""
    if any(name.startswith("MALLOC_") for name in os.environ) or "glibc.malloc." in os.environ.get(
        "GLIBC_TUNABLES", ""
    ):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # not glibc
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    kept = bool(
        mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)
        and mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES)
    )
    if not kept:
        logger.warning("glibc refused the malloc settings; freed memory goes back to the kernel")
    return kept
