"""Gloo's listener, closed once its process group has formed.

Gloo's TCP transport listens on an ephemeral port for the group's pairs to connect, on the
address the machine's hostname resolves to, and keeps listening for the group's life: it holds
every connection it accepts and aborts the process when `accept` fails, so a stranger that
opens as many connections as the process may hold files killed a rank, or a verifier's re-run.
The pairs all connect while the group forms, so from then on the listener serves strangers
alone (docs/verification.md, "Who may reach a group's ranks").
"""

from __future__ import annotations

import contextlib
import os
import socket
import stat
from collections.abc import Iterator

_TCP = (socket.AF_INET, socket.AF_INET6)


@contextlib.contextmanager
def gloo_listeners_closed() -> Iterator[None]:
    """Close every TCP listener the block opens (a gloo group's, as `init_process_group` forms
    it) when the block ends; the group's connections stay as they are."""
    if os.environ.get("TORCH_GLOO_LAZY_INIT", "0").lower() not in ("", "0", "false"):
        raise RuntimeError(
            "TORCH_GLOO_LAZY_INIT is set: gloo's pairs would connect after the group formed, "
            "to a listener that must not stay open; unset it"
        )
    before = _tcp_listeners()
    yield
    for fd, _ in _tcp_listeners() - before:
        _close_listener(fd)


def _tcp_listeners() -> set[tuple[int, int]]:
    """(descriptor, inode) of each listening TCP socket of this process."""
    found = set()
    for name in os.listdir("/dev/fd"):
        fd = int(name)
        try:
            status = os.fstat(fd)
        except OSError:  # the listing's own descriptor, closed by now
            continue
        if not stat.S_ISSOCK(status.st_mode):
            continue
        copy = os.dup(fd)
        try:
            sock = socket.socket(fileno=copy)
        except OSError:  # a socket Python cannot wrap (netlink, packet): not a TCP listener
            os.close(copy)
            continue
        with sock:
            if sock.family in _TCP and sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN):
                found.add((fd, status.st_ino))
    return found


def _close_listener(fd: int) -> None:
    """Put an unreachable socket in the listener's place: the listening socket closes with its
    last descriptor (gloo's event loop stops watching it), and gloo, which still owns the
    number, closes the replacement when the group ends. The replacement listens and never
    connects, so an `accept` gloo already had on its way meets EAGAIN, not an error it aborts
    on."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as spare:
        spare.bind("")  # an abstract address of the kernel's choosing, that nobody is told
        spare.listen(1)
        spare.setblocking(False)
        os.dup2(spare.fileno(), fd, inheritable=False)
