"""Read the ledger's struct views by field name, so a field added to a struct breaks nothing."""

from __future__ import annotations

from typing import Any

from web3.contract import Contract

from marketplace.chain.tx import call


def view(contract: Contract, name: str, *args) -> dict[str, Any]:
    """Call `name(*args)` and name the fields of the one struct it returns."""
    (output,) = next(
        i["outputs"] for i in contract.abi if i.get("name") == name and i["type"] == "function"
    )
    values = call(getattr(contract.functions, name)(*args))
    return dict(zip((c["name"] for c in output["components"]), values, strict=True))
