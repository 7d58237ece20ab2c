"""The protocol every role and app shares: the ledger's terms and the formats of its work."""
