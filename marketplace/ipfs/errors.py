"""Exceptions raised by the embedded IPFS node and its codecs."""

from marketplace.errors import ZooError


class IpfsError(ZooError):
    """Base class for everything the embedded node refuses or cannot find."""


class InvalidCid(IpfsError, ValueError):
    """A string or byte sequence that is not a CID this node understands."""


class InvalidBlock(IpfsError, ValueError):
    """Block bytes that cannot be decoded for the codec their CID names."""


class HashMismatch(IpfsError, ValueError):
    """Bytes that do not hash to the CID they were offered or stored under."""


class BlockNotFound(IpfsError, LookupError):
    """A CID whose block this node does not hold."""

    def __init__(self, cid: object) -> None:
        super().__init__(f"block was not found locally (offline): ipld: could not find {cid}")
        self.cid = cid


class NotAFile(IpfsError, ValueError):
    """A DAG that is not a UnixFS file (a directory, symlink or foreign codec)."""


class Unsupported(IpfsError, ValueError):
    """A valid request for a feature this node does not implement."""


class DagTooLarge(IpfsError, ValueError):
    """A DAG whose walk would pass a bound: too many blocks, too deep, or more bytes declared
    than allowed."""


class QuotaExceeded(IpfsError):
    """A write the node's quotas do not leave room for."""


class AddTooLarge(QuotaExceeded, ValueError):
    """One request bringing more bytes than a single add may store."""


class RepoFull(QuotaExceeded):
    """A block that would take the repo past its size bound."""
