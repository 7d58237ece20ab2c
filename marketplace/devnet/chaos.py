"""Kill -9 the devnet's daemons at random and start them again, as machines that crash would."""

from __future__ import annotations

import logging
import random
import threading
from dataclasses import dataclass, field
from typing import Self

from marketplace.devnet.network import Devnet, State

log = logging.getLogger(__name__)

# Daemons a strike may hit: every process that carries its work in a journal. Anvil, IPFS and
# Redis stand for the chain and the network, and the gateway's API server for a fixed address.
DAEMONS = ("provider-", "verifier-", "worker-", "gateway-indexer")


@dataclass
class Strike:
    name: str
    down_s: float  # how long it stayed dead


@dataclass
class Monkey:
    """Strikes a random daemon whose name starts with one of `targets` every `every` seconds
    (jittered), keeping it dead for a time drawn from `down`, until stopped."""

    devnet: Devnet
    targets: tuple[str, ...] = DAEMONS
    every: float = 10.0
    down: tuple[float, float] = (0.5, 3.0)
    seed: int = 0
    strikes: list[Strike] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chaos", daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *_) -> None:
        self._stop.set()
        self._thread.join()

    def strike(self) -> Strike:
        """Kill one daemon, wait, start it again."""
        state = State.load(self.devnet.root)
        names = [s.name for s in state.running() if s.name.startswith(self.targets)]
        name = self._rng.choice(sorted(names))
        down = self._rng.uniform(*self.down)
        state.service(name).kill_tree()
        log.info("chaos: killed %s for %.1f s", name, down)
        self._stop.wait(down)
        self.devnet.restart(name)
        strike = Strike(name, down)
        self.strikes.append(strike)
        return strike

    def _run(self) -> None:
        while not self._stop.wait(self.every * self._rng.uniform(0.5, 1.5)):
            self.strike()
