"""ZEN amounts: the unit, and wei as decimal text without floats (a float would show
0.003999999999999998)."""

from __future__ import annotations

ZEN = 10**18  # wei per ZEN: ZEN has 18 decimals


def exact(wei: int) -> str:
    """Every digit, with thousands separators and no trailing zeros: `1,234.5`,
    `0.000000000000000003`."""
    whole, fraction = divmod(int(wei), ZEN)
    digits = f"{fraction:018d}".rstrip("0")
    return f"{whole:,}.{digits}" if digits else f"{whole:,}"


def rounded(wei: int, places: int = 6) -> str:
    """To `places` decimals, the last rounded half up: `0.004000`, `4,999.988000`."""
    step = 10 ** (18 - places)
    units = (abs(int(wei)) + step // 2) // step
    whole, fraction = divmod(units, 10**places)
    sign = "-" if wei < 0 and units else ""
    return f"{sign}{whole:,}.{fraction:0{places}d}" if places else f"{sign}{whole:,}"
