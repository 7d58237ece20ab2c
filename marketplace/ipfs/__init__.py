"""The embedded IPFS node: Kubo-compatible CIDs, an on-disk block store and a Kubo RPC subset."""
