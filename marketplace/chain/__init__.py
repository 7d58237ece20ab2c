"""Chain bindings: compile the ledger, run Anvil, deploy, and send transactions."""

from marketplace.chain.errors import ChainError, ContractRevert

__all__ = ["ChainError", "ContractRevert"]
