"""ERC-2612 permits for ZEN: approve and stake, or approve and escrow, in one transaction."""

from __future__ import annotations

from eth_account.signers.local import LocalAccount

from marketplace.chain.ledger import Ledger

PERMIT_TTL = 3_600  # seconds a permit stays valid
# The EIP-712 types of an ERC-2612 permit, as every wallet signs it.
PERMIT_TYPES = {
    "EIP712Domain": [
        {"name": "name", "type": "string"},
        {"name": "version", "type": "string"},
        {"name": "chainId", "type": "uint256"},
        {"name": "verifyingContract", "type": "address"},
    ],
    "Permit": [
        {"name": "owner", "type": "address"},
        {"name": "spender", "type": "address"},
        {"name": "value", "type": "uint256"},
        {"name": "nonce", "type": "uint256"},
        {"name": "deadline", "type": "uint256"},
    ],
}


def permit_typed_data(ledger: Ledger, owner: str, spender: str, value: int) -> dict:
    """The EIP-712 message that lets `spender` take `value` ZEN from `owner`, for its owner to sign
    (here with a local key, or in a wallet for callers that never hand their key over)."""
    zen = ledger.zen.functions
    deadline = ledger.w3.eth.get_block("latest")["timestamp"] + PERMIT_TTL
    return {
        "types": PERMIT_TYPES,
        "primaryType": "Permit",
        "domain": {
            "name": zen.name().call(),
            "version": "1",
            "chainId": ledger.w3.eth.chain_id,
            "verifyingContract": ledger.zen.address,
        },
        "message": {
            "owner": owner,
            "spender": spender,
            "value": value,
            "nonce": zen.nonces(owner).call(),
            "deadline": deadline,
        },
    }


def split_signature(signature: bytes) -> tuple[int, bytes, bytes]:
    """(v, r, s) of a 65-byte signature, as `permit` takes them."""
    return signature[64], signature[:32], signature[32:64]


def sign_permit(
    ledger: Ledger, owner: LocalAccount, spender: str, value: int
) -> tuple[int, int, bytes, bytes]:
    """Sign a permit for `spender` to take `value` ZEN from `owner`: (deadline, v, r, s)."""
    message = permit_typed_data(ledger, owner.address, spender, value)
    signed = owner.sign_typed_data(full_message=message)
    return message["message"]["deadline"], *split_signature(signed.signature)
