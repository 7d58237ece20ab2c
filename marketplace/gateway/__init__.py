"""The gateway: the chain indexer and the read API over what it indexed."""
