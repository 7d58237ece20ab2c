"""The node's allocator settings: freed body buffers are reused, not faulted in again."""

import platform
import resource

import pytest

from marketplace.ipfs import allocator

MIB = 1024 * 1024


def page_faults_churning(buffers: int, in_flight: int) -> int:
    """Minor page faults while allocating and freeing 1 MiB buffers, a few alive at a time,
    as an add holds network reads in flight."""
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    alive = []
    for i in range(buffers):
        alive.append(bytes([i % 256]) * MIB)
        if len(alive) > in_flight:
            alive.pop(0)
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt settings are glibc's")
def test_freed_body_buffers_are_reused_rather_than_faulted_in_again():
    allocator.reuse_freed_buffers(4 * MIB, 32 * MIB)
    page_faults_churning(16, in_flight=4)  # the heap grows to what is in flight once
    assert page_faults_churning(64, in_flight=4) < 100  # about 1,200 under glibc's defaults
