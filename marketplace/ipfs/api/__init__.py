"""The node's HTTP surface: Kubo RPC routes under /api/v0 and the trustless gateway under /ipfs."""
