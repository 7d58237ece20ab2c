"""The node's allocator settings: freed body buffers are reused, not faulted in again."""

import platform
import subprocess
import sys
import textwrap

import pytest

# Run in a fresh interpreter: the settings are the whole process's, and pytest's must stay as
# they are for the other tests.
_CHURN = textwrap.dedent("""
    import resource
    import sys

    from marketplace.ipfs import allocator

    MIB = 1024 * 1024


    def page_faults_churning(buffers, in_flight):
        # 1 MiB buffers allocated and freed, a few alive at a time, as an add holds reads
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        alive = []
        for i in range(buffers):
            alive.append(bytes([i % 256]) * MIB)
            if len(alive) > in_flight:
                alive.pop(0)
        return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before


    if sys.argv[1] == "reuse":
        allocator.reuse_freed_buffers(4 * MIB, 32 * MIB)
    page_faults_churning(16, in_flight=4)  # the heap grows to what is in flight once
    print(page_faults_churning(64, in_flight=4))
""")


def page_faults(setting: str) -> int:
    out = subprocess.run(
        [sys.executable, "-c", _CHURN, setting], capture_output=True, text=True, check=True
    )
    return int(out.stdout)


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt settings are glibc's")
def test_freed_body_buffers_are_reused_rather_than_faulted_in_again():
    assert page_faults("reuse") < 100
    assert page_faults("defaults") > 500  # about 1,200: buffers mapped and faulted in afresh
