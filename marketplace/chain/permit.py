"""ERC-2612 permits for ZEN: approve and stake, or approve and escrow, in one transaction."""

from __future__ import annotations

from eth_account.signers.local import LocalAccount

from marketplace.chain.ledger import Ledger

PERMIT_TTL = 3_600  # seconds a permit stays valid


def sign_permit(ledger: Ledger, owner: LocalAccount, spender: str, value: int) -> tuple[int, int, bytes, bytes]:
    """Sign a permit for `spender` to take `value` ZEN from `owner`: (deadline, v, r, s)."""
    zen = ledger.zen.functions
    deadline = ledger.w3.eth.get_block("latest")["timestamp"] + PERMIT_TTL
    message = {
        "types": {
            "EIP712Domain": [{"name": "name", "type": "string"}, {"name": "version", "type": "string"},
                             {"name": "chainId", "type": "uint256"},
                             {"name": "verifyingContract", "type": "address"}],
            "Permit": [{"name": "owner", "type": "address"}, {"name": "spender", "type": "address"},
                       {"name": "value", "type": "uint256"}, {"name": "nonce", "type": "uint256"},
                       {"name": "deadline", "type": "uint256"}],
        },
        "primaryType": "Permit",
        "domain": {"name": zen.name().call(), "version": "1", "chainId": ledger.w3.eth.chain_id,
                   "verifyingContract": ledger.zen.address},
        "message": {"owner": owner.address, "spender": spender, "value": value,
                    "nonce": zen.nonces(owner.address).call(), "deadline": deadline},
    }
    signed = owner.sign_typed_data(full_message=message)
    return deadline, signed.v, signed.r.to_bytes(32, "big"), signed.s.to_bytes(32, "big")
