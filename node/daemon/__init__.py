"""The provider daemon: bids in the market's sealed auctions, trains the units it wins, gets paid.

    daemon = ProviderDaemon(ledger, account, NodeConfig(pricing=Pricing.from_zen("1"), journal_path=...))
    daemon.run(stop_event, on_ready=print)   # blocks until stop_event is set

Modules, one job each: `journal` (what survives a crash), `outbox` (exactly-once transactions),
`pricing` (the bid), `bidding` (commit, reveal, close), `worker` (units), `settlement` (settle,
withdraw), `daemon` (the loop).
"""

from .daemon import NodeConfig, NotAProvider, ProviderDaemon
from .pricing import PriceBelowFloor, Pricing

__all__ = ["NodeConfig", "NotAProvider", "PriceBelowFloor", "Pricing", "ProviderDaemon"]
