"""What this provider asks per GPU-hour: its own cost floor plus a margin, never above the job's
cap."""

from __future__ import annotations

from dataclasses import dataclass

from marketplace.errors import ZooError

BPS = 10_000


class PriceBelowFloor(ZooError, ValueError):
    """A job whose maximum price does not cover this provider's cost floor."""


@dataclass(frozen=True)
class Pricing:
    """Prices are ZEN wei per reference GPU-hour of the job's tier: a unit pays the price times
    the GPU-seconds the job says it is worth / 3600, so the floor is what this node spends on the
    work one reference GPU does in an hour (less if it is faster, more if slower)."""

    floor: int  # the cost of one GPU-hour here: electricity, hardware, bandwidth
    margin_bps: int = 2_000  # asked on top of the floor when the job's cap leaves room

    def __post_init__(self) -> None:
        if self.floor <= 0 or self.margin_bps < 0:
            raise ValueError("the cost floor must be positive and the margin not negative")

    def quote(self, max_price: int) -> int:
        """The sealed bid for a job capped at `max_price`: the floor plus margin, trimmed to the
        cap but never below the floor, because winning below cost loses money."""
        if max_price < self.floor:
            raise PriceBelowFloor(
                f"max price {max_price} wei/GPU-hour is below the floor {self.floor}"
            )
        return min(self.floor + self.floor * self.margin_bps // BPS, max_price)
