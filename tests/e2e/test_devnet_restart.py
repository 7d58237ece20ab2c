"""What chaos strikes besides the daemons: an IPFS node, Redis and the gateway's API server,
killed (kill -9) and started again by `Devnet.restart`, come back where every process expects
them, with what they held."""

from __future__ import annotations

import secrets

import httpx
import pytest
import redis

from marketplace.devnet.redis_server import RedisServer
from marketplace.storage import Storage

pytestmark = pytest.mark.slow

SERVERS = ("ipfs-user", "redis", "gateway")


def test_struck_servers_come_back_on_their_addresses_with_their_data(network):
    before = network.state
    data = b"kept across a kill -9: " + secrets.token_bytes(16)
    with Storage(before.ipfs["user"], []) as node:  # that node alone, no replica to fall back on
        cid = node.add_bytes(data)
    queue = redis.Redis(unix_socket_path=str(RedisServer(network.root / "redis").socket))
    queue.set("devnet-restart", data)
    pids = {name: before.service(name).pid for name in SERVERS}

    for name in SERVERS:
        before.service(name).kill_tree()
    for name in SERVERS:
        network.devnet.restart(name)

    after = network.state
    assert (after.ipfs, after.redis_url, after.gateway_url) == (
        before.ipfs,
        before.redis_url,
        before.gateway_url,
    )
    for name in SERVERS:
        service = after.service(name)
        assert service.alive() and service.pid != pids[name], name
    with Storage(after.ipfs["user"], []) as node:
        assert node.cat(cid) == data  # its repo
    assert queue.get("devnet-restart") == data  # its append-only file
    queue.close()
    health = httpx.get(f"{after.gateway_url}/health", timeout=10)
    assert health.status_code == 200 and health.json()["indexed_block"] is not None
