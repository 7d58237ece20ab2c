"""Zoo Compute: what users and the network share (chain bindings, storage, CLI)."""
