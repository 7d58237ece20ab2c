"""How the one-shot commands of `node`, `verifier` and `wallet` reach the ledger: the chain at
ZOO_RPC_URL, or the gateway at ZOO_GATEWAY_URL through the SDK. The wallet signs here either way;
the daemons always go to the chain."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from decimal import Decimal

from eth_account.signers.local import LocalAccount
from web3 import Web3

from marketplace.chain.deploy import ZEN
from marketplace.chain.ledger import Hardware
from marketplace.cli.wallet import open_ledger
from marketplace.config import Settings
from marketplace.protocol.terms import Role, Tier
from marketplace.sdk import Client
from marketplace.wallet import address_of, keystore_path, load_account


@dataclass(frozen=True)
class Standing:
    """An address's funds and its account with the ledger, in wei, read at one moment."""

    address: str
    eth: int  # for gas
    zen: int
    role: str  # a Role label: none, provider or verifier
    tier: int
    admitted: bool  # a provider whose benchmark a verifier attested
    staked: int  # locked included
    locked: int  # collateral committed to running jobs
    unbonding: int
    owed: int  # pay the market holds for it

    @property
    def tier_name(self) -> str:
        return Tier.label_of(self.tier)


class Direct:
    """The chain itself: reads are calls, writes are transactions signed and sent from here."""

    def __init__(self, settings: Settings, signer: LocalAccount | None):
        self.ledger = open_ledger(settings)
        self.signer = signer

    def standing(self, address: str) -> Standing:
        account = self.ledger.staking_account(address)
        return Standing(
            address,
            self.ledger.w3.eth.get_balance(Web3.to_checksum_address(address)),
            self.ledger.balance(address),
            Role(account["role"]).label,
            account["tier"],
            account["admitted"],
            account["staked"],
            account["locked"],
            account["unbonding"],
            self.ledger.owed(address),
        )

    def slot_provider(self, job_id: int, slot: int) -> str | None:
        return self.ledger.slot(job_id, slot)["provider"]

    def register_provider(self, tier: str, hardware: Hardware) -> None:
        self.ledger.register_provider(self.signer, Tier.named(tier), hardware)

    def register_verifier(self, endpoint: str) -> None:
        self.ledger.register_verifier(self.signer, endpoint)

    def stake(self, amount: int) -> None:
        """One transaction: an ERC-2612 permit for the staking contract, signed here."""
        from node.daemon.onboarding import stake_with_permit

        stake_with_permit(self.ledger, self.signer, amount)

    def withdraw(self) -> None:
        self.ledger.withdraw(self.signer)


class ThroughGateway:
    """A gateway: reads come from its chain views and index, writes are its unsigned transactions
    signed here."""

    def __init__(self, settings: Settings, signer: LocalAccount | None):
        self.client = Client(
            settings.gateway_url,
            wallet=signer,
            ipfs_api=settings.ipfs_api,
            ipfs_replicas=settings.ipfs_replicas,
        )

    def standing(self, address: str) -> Standing:
        shown = self.client.account(address)
        return Standing(
            shown["address"],
            int(shown["eth"]),
            int(shown["zen"]),
            shown["role"],
            shown["tier"],
            shown["admitted"],
            int(shown["staked"]),
            int(shown["locked"]),
            int(shown["unbonding"]),
            int(shown["owed"]),
        )

    def slot_provider(self, job_id: int, slot: int) -> str | None:
        """The slot's provider as indexed: its newest row, unless that row removed the provider."""
        rows = [row for row in self.client.job(job_id)["slots"] if row["slot"] == slot]
        return rows[-1]["provider"] if rows and rows[-1]["removed_reason"] is None else None

    def register_provider(self, tier: str, hardware: Hardware) -> None:
        self.client.register_provider(hardware, tier=tier)

    def register_verifier(self, endpoint: str) -> None:
        self.client.register_verifier(endpoint)

    def stake(self, amount: int) -> None:
        self.client.stake(Decimal(amount) / ZEN)

    def withdraw(self) -> None:
        self.client.withdraw()


LedgerAccess = Direct | ThroughGateway


@contextmanager
def reach_ledger(settings: Settings, *, signing: bool) -> Iterator[tuple[LedgerAccess, str]]:
    """The way to the ledger (a gateway when ZOO_GATEWAY_URL is set) and the wallet's address.

    With `signing`, the wallet is unlocked first (its password asked for now, not after a long
    step).
    """
    signer = load_account(settings) if signing else None
    address = signer.address if signer else address_of(keystore_path(settings))
    if not settings.gateway_url:
        yield Direct(settings, signer), address
        return
    way = ThroughGateway(settings, signer)
    try:
        yield way, address
    finally:
        way.client.close()
