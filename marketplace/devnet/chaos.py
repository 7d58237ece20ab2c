"""Kill -9 the devnet's daemons at random and start them again, as machines that crash would."""

from __future__ import annotations

import logging
import random
import threading
from dataclasses import dataclass, field
from typing import Self

from marketplace.devnet.network import Devnet, State
from marketplace.errors import ZooError

log = logging.getLogger(__name__)

# Daemons a strike may hit: every process that carries its work in a journal.
DAEMONS = ("provider-", "verifier-", "worker-", "gateway-indexer")
# What the daemons reach at a fixed address, restarted there with its data: the IPFS nodes (their
# repos), Redis (its append-only file) and the gateway's API server. Anvil stands for the chain.
SERVERS = ("ipfs-", "redis", "gateway")
EVERY_PROCESS = (*DAEMONS, *SERVERS)


@dataclass
class Strike:
    name: str
    down_s: float  # how long it stayed dead
    restarted: bool = True  # False: it did not come back (the monkey tries again next strike)


@dataclass
class Monkey:
    """Strikes a random process whose name starts with one of `targets` every `every` seconds
    (jittered), keeping it dead for a time drawn from `down`, until stopped; whatever it killed
    runs again once it stops."""

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
        self._revive()

    def strike(self) -> Strike | None:
        """Start again whatever an earlier strike left dead; then kill one process, wait, and
        start it again. None when no target runs."""
        self._revive()
        state = State.load(self.devnet.root)
        names = [s.name for s in state.running() if s.name.startswith(self.targets)]
        if not names:
            return None
        name = self._rng.choice(sorted(names))
        down = self._rng.uniform(*self.down)
        state.service(name).kill_tree()
        log.info("chaos: killed %s for %.1f s", name, down)
        self._stop.wait(down)
        strike = Strike(name, down, self._start(name))
        self.strikes.append(strike)
        return strike

    def _start(self, name: str) -> bool:
        try:
            self.devnet.restart(name)
            return True
        except ZooError as exc:  # it came back but does not serve, or did not come back
            log.warning("chaos: %s did not come back: %s", name, exc)
            return False

    def _revive(self) -> None:
        """Restart the strikes' victims still dead (a failed restart)."""
        state = State.load(self.devnet.root)
        for strike in self.strikes:
            if not strike.restarted and not state.service(strike.name).alive():
                strike.restarted = self._start(strike.name)

    def _run(self) -> None:
        while not self._stop.wait(self.every * self._rng.uniform(0.5, 1.5)):
            self.strike()
