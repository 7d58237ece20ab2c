"""Gloo keeps a listener open for its group's life, holds every connection made to it, and aborts
its process when it cannot accept one more: a stranger's connections killed a rank, or a
verifier's re-run. A formed group listens no more, and still works."""

from __future__ import annotations

import socket
import subprocess
import sys
import textwrap

import psutil
import pytest
import torch
import torch.distributed as dist

from node.engine.gloo_listener import gloo_listeners_closed

# a process that may hold few files, in a group of its own as a verifier's re-run of a ddp unit
# opens: it says when its group has formed, and all-reduces once it is told to go on
_ONE_RANK = textwrap.dedent(
    """
    import resource, sys
    import torch, torch.distributed as dist
    from node.distributed.ddp import ddp_group

    resource.setrlimit(resource.RLIMIT_NOFILE, (128, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
    with ddp_group():
        print("formed", flush=True)
        sys.stdin.readline()
        total = torch.ones(4)
        dist.all_reduce(total)
        print("sum", int(total.sum()), flush=True)
    """
)


def tcp_listeners(pid: int) -> set[int]:
    return {
        c.laddr.port
        for c in psutil.Process(pid).net_connections("tcp")
        if c.status == psutil.CONN_LISTEN
    }


def refused(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    except ConnectionRefusedError:
        return True
    return False


def flood(port: int, connections: int) -> None:
    """Open `connections` to `port` at once, as a stranger would, until one is refused."""
    held = []
    try:
        for _ in range(connections):
            held.append(socket.create_connection(("127.0.0.1", port), timeout=2))
    except OSError:
        pass
    finally:
        for connection in held:
            connection.close()


def test_a_formed_gloo_group_refuses_a_stranger_and_still_works() -> None:
    own = psutil.Process().pid
    before = tcp_listeners(own)
    assert not dist.is_initialized()
    try:
        with gloo_listeners_closed():
            dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
            opened = tcp_listeners(own) - before
            assert opened, "gloo's listener is open while its group forms"
        assert tcp_listeners(own) == before
        assert all(refused(port) for port in opened)
        total = torch.ones(3)
        dist.all_reduce(total)
        assert total.tolist() == [1.0, 1.0, 1.0]
    finally:
        dist.destroy_process_group()


def test_a_stranger_flooding_every_port_of_a_rank_does_not_stop_it() -> None:
    rank = subprocess.Popen(
        [sys.executable, "-c", _ONE_RANK],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert rank.stdin is not None and rank.stdout is not None
    try:
        assert rank.stdout.readline().strip() == "formed"
        for port in tcp_listeners(rank.pid):  # gloo's port, before it was closed
            flood(port, 200)
        rank.stdin.write("go\n")
        rank.stdin.flush()
        assert rank.stdout.readline().strip() == "sum 4"
        assert rank.wait(timeout=60) == 0
    finally:
        rank.kill()
        rank.wait()


def test_only_listeners_opened_in_the_block_are_closed() -> None:
    with socket.create_server(("127.0.0.1", 0)) as before:
        with gloo_listeners_closed():
            inside = socket.create_server(("127.0.0.1", 0))
        with inside:
            assert not refused(before.getsockname()[1])
            assert refused(inside.getsockname()[1])


def test_a_group_whose_pairs_would_connect_later_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TORCH_GLOO_LAZY_INIT", "1")
    with pytest.raises(RuntimeError, match="TORCH_GLOO_LAZY_INIT"), gloo_listeners_closed():
        pass
