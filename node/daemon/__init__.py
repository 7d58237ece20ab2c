"""The provider daemon: bids in the market's sealed auctions, trains the units it wins, gets paid.

    config = NodeConfig(pricing=Pricing.from_zen("1"), journal_path=...)
    daemon = ProviderDaemon(ledger, account, config)
    daemon.run(stop_event, on_ready=print)   # blocks until stop_event is set

Modules, one job each: `journal` (what survives a crash, on marketplace.runtime's journal),
`pricing` (the bid), `bidding` (commit, reveal, close), `worker` (a single-node slot's units),
`group_worker` (a group job's rank), `settlement` (settle, withdraw), `daemon` (the loop, on
marketplace.runtime's follower, tick loop and outbox).
"""

from .daemon import NodeConfig, NotAProvider, ProviderDaemon
from .pricing import PriceBelowFloor, Pricing

__all__ = ["NodeConfig", "NotAProvider", "PriceBelowFloor", "Pricing", "ProviderDaemon"]
