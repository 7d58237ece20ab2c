"""The project's base exception, so callers can catch every Zoo Compute error at a boundary."""


class ZooError(Exception):
    """Base of every error Zoo Compute raises on purpose."""
