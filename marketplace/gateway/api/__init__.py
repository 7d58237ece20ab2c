"""The gateway's read API over the indexed ledger."""
