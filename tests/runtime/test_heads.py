"""New heads pushed by a real Anvil: a cursor steps over blocks its contracts did not log in
without a request, reads the same events as by polling, finds a reorg by the pushed parent hash,
and polls as before when the node has no websocket; the tick loop sleeps until a block comes."""

from __future__ import annotations

import threading
import time

import pytest
from web3 import Web3

from marketplace.chain.anvil import Anvil
from marketplace.chain.events import BlockMark, ChainReorganized, EventCursor
from marketplace.devnet.accounts import devnet_account
from marketplace.processes import free_port
from marketplace.runtime.heads import HeadFeed, websocket_url
from marketplace.runtime.loop import run_ticks

pytestmark = pytest.mark.anvil

GOVERNOR, USER = devnet_account(0), devnet_account(1)


class Counted(Web3.HTTPProvider):
    """An HTTP provider that counts the requests it sends, by method."""

    def __init__(self, url: str):
        super().__init__(url)
        self.sent: list[str] = []

    def make_request(self, method, params):
        self.sent.append(method)
        return super().make_request(method, params)


def mine(w3: Web3, blocks: int = 1) -> None:
    for _ in range(blocks):
        w3.provider.make_request("evm_mine", [])


def await_head(feed: HeadFeed, number: int, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while (feed.newest() is None or feed.newest().number < number) and time.monotonic() < deadline:
        time.sleep(0.01)
    newest = feed.newest()
    assert newest is not None and newest.number >= number, f"no head {number} pushed"


def test_the_websocket_is_on_the_rpc_port():
    assert websocket_url("http://127.0.0.1:8545") == "ws://127.0.0.1:8545"
    assert websocket_url("https://rpc.example/v1/key") == "wss://rpc.example/v1/key"
    assert websocket_url("ipc:///tmp/geth.ipc") is None


def test_a_blocks_bloom_names_the_contracts_that_logged(anvil, w3, ledger):
    with HeadFeed.of(w3) as feed:
        await_live(feed)
        mine(w3)
        empty = w3.eth.block_number
        ledger.transfer(GOVERNOR, USER.address, 1)
        logged = w3.eth.block_number
        await_head(feed, logged)
        heads = {head.number: head for head in feed.after(empty - 1) or []}

    assert heads[logged].may_log(ledger.zen.address)
    assert not heads[logged].may_log(ledger.market.address)
    assert not heads[empty].may_log(ledger.zen.address)
    assert heads[logged].parent_hash == heads[empty].hash
    assert heads[logged].hash == "0x" + bytes(w3.eth.get_block(logged)["hash"]).hex()


def await_live(feed: HeadFeed, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not feed.live and time.monotonic() < deadline:
        time.sleep(0.01)
    assert feed.live, "no subscription"


def test_a_cursor_on_pushed_heads_asks_only_for_blocks_that_may_hold_its_logs(anvil, ledger):
    provider = Counted(anvil.rpc_url)
    w3 = Web3(provider)
    start = w3.eth.block_number
    polled = EventCursor(w3, [ledger.zen], start)
    with HeadFeed.of(w3) as feed:
        await_live(feed)
        pushed = EventCursor(w3, [ledger.zen], start, heads=feed)
        assert pushed.poll() == []  # the first poll asks: no block read yet to link heads to
        provider.sent.clear()

        mine(ledger.w3, 3)
        await_head(feed, start + 3)
        assert pushed.poll() == []
        assert pushed.poll() == []  # standing still
        assert provider.sent == []  # three empty blocks and a still chain: nothing asked
        assert pushed.next_block == start + 4
        assert pushed.last == BlockMark(start + 3, polled.hash_of(start + 3) or "")
        assert pushed.time == w3.eth.get_block("latest")["timestamp"]

        for amount in (1, 2):
            ledger.transfer(GOVERNOR, USER.address, amount)
        mine(ledger.w3)
        await_head(feed, w3.eth.block_number)
        provider.sent.clear()
        events = pushed.poll()
        assert provider.sent == ["eth_getLogs"]  # the head came pushed: only the logs are asked

    assert [e["args"]["value"] for e in events] == [1, 2]
    assert polled.poll() == events
    assert pushed.position == polled.position


def test_a_pushed_head_on_another_branch_is_a_reorg(anvil, w3, ledger):
    start = w3.eth.block_number + 1
    with HeadFeed.of(w3) as feed:
        await_live(feed)
        cursor = EventCursor(w3, [ledger.zen], start, heads=feed)
        mine(w3, 3)
        await_head(feed, start + 2)
        cursor.poll()
        read = cursor.last
        assert read is not None and read.number == start + 2

        # A transfer in the new branch makes its blocks differ from the old ones, whatever the
        # chain's clock says (an empty branch mined within the same second can repeat them).
        someone = w3.eth.accounts[0]
        transfer = {"from": someone, "to": someone, "value": "0x1"}
        w3.provider.make_request("anvil_reorg", [2, [[transfer, 0]]])
        mine(w3)
        await_head(feed, start + 3)
        with pytest.raises(ChainReorganized) as reorg:
            cursor.poll()

    assert reorg.value.block == read
    assert cursor.fork([read]) is None


def test_without_a_websocket_the_cursor_and_the_loop_poll(anvil, w3, ledger):
    silent = Web3(Web3.HTTPProvider(f"http://127.0.0.1:{free_port()}"))
    with HeadFeed.of(silent) as feed:
        time.sleep(0.2)
        assert not feed.live and feed.after(0) is None
        cursor = EventCursor(w3, [ledger.zen], w3.eth.block_number + 1, heads=feed)
        ledger.transfer(GOVERNOR, USER.address, 5)
        assert [e["args"]["value"] for e in cursor.poll()] == [5]

        stop, ticks = threading.Event(), []

        def tick():
            ticks.append(time.monotonic())
            if len(ticks) == 3:
                stop.set()

        run_ticks(tick, stop, 0.05, heads=feed)
    assert len(ticks) == 3


def test_the_loop_sleeps_until_a_block_is_pushed(anvil, w3):
    stop, ticks = threading.Event(), []
    with HeadFeed.of(w3) as feed:
        await_live(feed)
        loop = threading.Thread(
            target=run_ticks, args=(lambda: ticks.append(1), stop, 0.01), kwargs={"heads": feed}
        )
        loop.start()
        time.sleep(0.5)
        idle = len(ticks)
        mine(w3)
        deadline = time.monotonic() + 5
        while len(ticks) == idle and time.monotonic() < deadline:
            time.sleep(0.01)
        woken = len(ticks)
        stop.set()
        loop.join(5)

    assert idle == 1  # the first tick, then nothing while the chain stood still
    assert woken == 2  # one tick for the block
    assert not loop.is_alive()  # the stop woke it


def test_a_dropped_subscription_falls_back_to_polling():
    with Anvil() as chain:
        w3 = Web3(Web3.HTTPProvider(chain.rpc_url))
        with HeadFeed.of(w3) as feed:
            await_live(feed)
            chain.stop()
            deadline = time.monotonic() + 5
            while feed.live and time.monotonic() < deadline:
                time.sleep(0.01)
            assert not feed.live and feed.newest() is None
