"""Zoo Compute: what users and the network share (chain bindings, storage, gateway, SDK, CLI)."""

SDK_NAMES = ("Client", "AsyncClient")


def __getattr__(name: str):
    """`from marketplace import Client` loads the SDK (and its HTTP and torch imports) only when
    asked for."""
    if name in SDK_NAMES:
        from marketplace import sdk

        return getattr(sdk, name)
    raise AttributeError(f"module 'marketplace' has no attribute {name!r}")
