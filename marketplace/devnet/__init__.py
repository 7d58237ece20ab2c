"""The local devnet: every part of the network on loopback, started and stopped by pid."""
