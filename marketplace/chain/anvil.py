"""Run a local Anvil chain on loopback, on a free port, as a child process we can stop by pid,
and move a devnet's clock."""

from __future__ import annotations

import logging
import re
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Self

from web3.types import RPCEndpoint

from marketplace.chain.errors import ChainError
from marketplace.chain.toolchain import foundry_binary
from marketplace.processes import terminate

if TYPE_CHECKING:
    from web3 import Web3

log = logging.getLogger(__name__)

LISTENING = re.compile(rb"Listening on 127\.0\.0\.1:(\d+)")
ANVIL_MNEMONIC = "test test test test test test test test test test test junk"


@dataclass
class Anvil:
    """An Anvil process. Use as a context manager, or call `start()` and `stop()`."""

    accounts: int = 10
    balance_eth: int = 10_000
    block_time: float | None = None  # seconds; None mines a block per transaction
    log_path: Path | None = None
    process: subprocess.Popen[bytes] | None = field(default=None, init=False)
    port: int | None = field(default=None, init=False)

    @property
    def rpc_url(self) -> str:
        if self.port is None:
            raise ChainError("anvil is not running")
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    def start(self, timeout: float = 30.0) -> Self:
        """Start Anvil on 127.0.0.1 with port 0, and read back the port the kernel gave it."""
        cmd = [
            str(foundry_binary("anvil")),
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--accounts",
            str(self.accounts),
            "--balance",
            str(self.balance_eth),
            "--mnemonic",
            ANVIL_MNEMONIC,
        ]
        if self.block_time:
            cmd += ["--block-time", str(self.block_time)]
        self.process = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        out = self.process.stdout
        assert out is not None
        deadline = time.monotonic() + timeout
        seen = b""
        while time.monotonic() < deadline:
            line = out.readline()
            if not line:
                break
            seen += line
            match = LISTENING.search(line)
            if match:
                self.port = int(match.group(1))
                self._drain(out)
                log.info("anvil pid %d listening on %s", self.process.pid, self.rpc_url)
                return self
        self.stop()
        raise ChainError(f"anvil did not start: {seen.decode(errors='replace')[-500:]}")

    def _drain(self, out: IO[bytes]) -> None:
        """Keep reading anvil's output (to the log file, if any) so its pipe never fills."""

        def pump() -> None:
            if self.log_path is None:
                for _ in iter(out.readline, b""):
                    pass
                return
            with open(self.log_path, "ab") as sink:
                for chunk in iter(out.readline, b""):
                    sink.write(chunk)
                    sink.flush()

        threading.Thread(target=pump, name="anvil-log", daemon=True).start()

    def stop(self) -> None:
        if self.process:
            terminate(self.process)
        self.process = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def advance_time(w3: Web3, seconds: int) -> None:
    """Move a devnet's clock forward and mine a block (Anvil and Hardhat only)."""
    w3.provider.make_request(RPCEndpoint("evm_increaseTime"), [seconds])
    w3.provider.make_request(RPCEndpoint("evm_mine"), [])


def mine(w3: Web3, blocks: int = 1) -> None:
    """Mine `blocks` blocks on a devnet now, with no transactions (Anvil and Hardhat only)."""
    for _ in range(blocks):
        w3.provider.make_request(RPCEndpoint("evm_mine"), [])


def reorganize(w3: Web3, from_block: int, transactions: list[dict] | None = None) -> None:
    """Replace a devnet's blocks from `from_block` to its head with as many new ones, as a reorg
    would (Anvil only): the first new block holds `transactions` (requests from accounts Anvil
    holds the keys of), else a transfer of 1 wei, so that it differs from the block it replaces.
    The replaced blocks' transactions are gone, not back in the pool: their senders must send
    them again."""
    if transactions is None:
        someone = w3.eth.accounts[0]
        transactions = [{"from": someone, "to": someone, "value": "0x1"}]
    depth = w3.eth.block_number - from_block + 1
    w3.provider.make_request(RPCEndpoint("anvil_reorg"), [depth, [[tx, 0] for tx in transactions]])
