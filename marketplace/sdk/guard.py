"""What the SDK checks before its wallet signs anything a gateway handed it.

A gateway builds unsigned transactions and permits for the wallet to sign, and a gateway (or
anyone on a plain-http path to it) may be hostile: it could hand back `approve(attacker, max)`,
a permit whose spender is the attacker, or the right call on another chain. So the SDK builds the
call it asked for itself, from a deployment manifest it trusts (never from the gateway), and
signs the gateway's transaction only if its target, calldata, chain and value are exactly that
call's, and its gas and fees are within bounds. A permit is signed only if it is a standard
ERC-2612 permit of the manifest's ZEN, on its chain, from this wallet, for the named spender
contract and exactly the amount asked: that contract takes only what the call signed with it
does, so the permit is worth nothing to anyone else.
"""

from __future__ import annotations

from typing import Any

from hexbytes import HexBytes
from web3 import Web3
from web3.contract.contract import ContractFunction

from marketplace.chain.deploy import Deployment
from marketplace.chain.ledger import Ledger
from marketplace.chain.permit import PERMIT_TYPES
from marketplace.sdk.errors import RefusedToSign

# A transaction of ours uses well under a million gas (createJob: about 270,000).
MAX_GAS = 2_000_000
# Far above what an L2 or a calm mainnet asks, far below what would drain a wallet in fees.
MAX_FEE_PER_GAS = 100 * 10**9


class Guard:
    """The ledger as the wallet's owner knows it: calls built here to compare the gateway's with."""

    def __init__(self, deployment: Deployment, max_fee_per_gas: int = MAX_FEE_PER_GAS):
        self.deployment = deployment
        self.ledger = Ledger(Web3(), deployment)  # no provider: it only encodes calls
        self.max_fee_per_gas = max_fee_per_gas

    def check_transaction(self, unsigned: Any, expected: ContractFunction, sender: str) -> dict:
        """The gateway's transaction, if it is `expected` sent by `sender`; else RefusedToSign."""
        if not isinstance(unsigned, dict):
            raise RefusedToSign("the gateway's transaction is not an object")
        want_to, want_data = expected.address, HexBytes(expected._encode_transaction_data())
        problems = []
        if _address(unsigned.get("to")) != want_to:
            problems.append(f"it calls {unsigned.get('to')}, not {want_to}")
        if _bytes(unsigned.get("data")) != want_data:
            problems.append(f"its calldata is not {expected.fn_name} with the arguments asked for")
        if unsigned.get("chainId") != self.deployment.chain_id:
            problems.append(f"chain {unsigned.get('chainId')}, not {self.deployment.chain_id}")
        if _int(unsigned.get("value", 0)) != 0:
            problems.append(f"it sends {unsigned.get('value')} wei of ETH along")
        if "from" in unsigned and _address(unsigned["from"]) != sender:
            problems.append(f"it is from {unsigned['from']}, not this wallet")
        if not 0 < _int(unsigned.get("gas")) <= MAX_GAS:
            problems.append(f"gas {unsigned.get('gas')} is outside 1..{MAX_GAS}")
        fees = [unsigned.get(k) for k in ("maxFeePerGas", "gasPrice") if k in unsigned]
        if any(not 0 <= _int(fee) <= self.max_fee_per_gas for fee in fees):
            problems.append(f"a fee per gas above {self.max_fee_per_gas} wei")
        if problems:
            raise RefusedToSign(
                f"refused to sign the gateway's {expected.fn_name} transaction: "
                + "; ".join(problems)
            )
        return unsigned

    def check_permit(self, typed_data: Any, owner: str, spender: str, value: int) -> dict:
        """The gateway's permit, if it lets the manifest's `spender` contract take exactly `value`
        ZEN of `owner`'s, on the manifest's chain; else RefusedToSign."""
        problems = []
        try:
            domain, message = typed_data["domain"], typed_data["message"]
            if typed_data["types"] != PERMIT_TYPES or typed_data["primaryType"] != "Permit":
                problems.append("it is not an ERC-2612 Permit")
            if domain["chainId"] != self.deployment.chain_id:
                problems.append(f"chain {domain['chainId']}, not {self.deployment.chain_id}")
            if _address(domain["verifyingContract"]) != self.deployment.addresses["ZenToken"]:
                problems.append(f"token {domain['verifyingContract']} is not ZEN")
            if _address(message["owner"]) != owner:
                problems.append(f"owner {message['owner']} is not this wallet")
            if _address(message["spender"]) != self.deployment.addresses[spender]:
                problems.append(f"spender {message['spender']} is not the {spender} contract")
            if _int(message["value"]) != value:
                problems.append(f"value {message['value']}, not {value}")
            if _int(message["deadline"]) < 0 or _int(message["nonce"]) < 0:
                problems.append("its deadline or nonce is not a number")
        except (KeyError, TypeError, ValueError) as exc:
            problems.append(f"it is malformed ({type(exc).__name__}: {exc})")
        if problems:
            raise RefusedToSign("refused to sign the gateway's permit: " + "; ".join(problems))
        return typed_data


def _address(value: Any) -> str | None:
    try:
        return Web3.to_checksum_address(value)
    except (TypeError, ValueError):
        return None


def _bytes(value: Any) -> HexBytes | None:
    try:
        return HexBytes(value)
    except (TypeError, ValueError):
        return None


def _int(value: Any) -> int:
    """An integer field as JSON carries it (a number or a 0x hex string); -1 for anything else,
    which no bound accepts."""
    if isinstance(value, bool):
        return -1
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        try:
            return int(value, 16) if value.startswith("0x") else int(value)
        except ValueError:
            return -1
    return -1
