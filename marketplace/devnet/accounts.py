"""The devnet's well-known accounts (Anvil's default mnemonic): never use them on a real chain."""

from __future__ import annotations

from eth_account import Account
from eth_account.signers.local import LocalAccount

from marketplace.chain.anvil import ANVIL_MNEMONIC

Account.enable_unaudited_hdwallet_features()


def devnet_account(index: int) -> LocalAccount:
    """Account `index` of Anvil's default mnemonic (index 0 deploys and governs on a devnet)."""
    return Account.from_mnemonic(ANVIL_MNEMONIC, account_path=f"m/44'/60'/0'/0/{index}")
