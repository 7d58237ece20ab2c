"""The C allocator's settings for a node that streams large request bodies through memory."""

import ctypes
import logging

log = logging.getLogger(__name__)

# mallopt parameters, from glibc's malloc.h.
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3


def reuse_freed_buffers(largest: int, kept: int) -> None:
    """Serve allocations of up to `largest` bytes from the heap and keep up to `kept` freed
    bytes there for reuse. The HTTP parser copies every network read of a body into a new
    buffer of up to 1 MiB; under glibc's defaults such buffers are mapped fresh from the
    kernel, or the heap is trimmed once they are freed, so every read faulted its pages in
    again (about 5,000 page faults per 256 MiB added). Kept memory is what the bounded add
    pipeline had in use at once, reused rather than grown. Without glibc, nothing changes."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        log.debug("no mallopt in this C library: allocator left at its defaults")
        return
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    if not (mallopt(_M_MMAP_THRESHOLD, largest) and mallopt(_M_TRIM_THRESHOLD, kept)):
        log.debug("mallopt refused the settings: allocator left at its defaults")
