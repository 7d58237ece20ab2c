"""A client of the model and dataset registry contract: names, versions, lineage, owners."""

from __future__ import annotations

import re
from dataclasses import dataclass

from eth_account.signers.local import LocalAccount
from web3 import Web3
from web3.contract.contract import ContractFunction
from web3.logs import DISCARD
from web3.types import TxReceipt

from marketplace.chain.deploy import Deployment
from marketplace.chain.errors import ChainError
from marketplace.chain.tx import call, send
from marketplace.errors import ZooError
from marketplace.licenses import spdx_id
from marketplace.protocol.terms import Kind

# The contract's rule (Registry._validName), checked here first so a bad name costs no gas.
MAX_NAME_LENGTH = 96
NAME = re.compile(r"[a-z0-9._-]+/[a-z0-9._-]+")
MAX_VERSION = 2**32 - 1


class BadReference(ZooError, ValueError):
    """A registry name or `name@version` that is not well formed."""


def kind_named(label: str) -> Kind:
    """The registry kind a label names: "model" or "dataset"."""
    try:
        return Kind.named(label)
    except KeyError:
        raise BadReference(f"{label!r} is not a registry kind: model or dataset") from None


class NotNameOwner(ChainError, PermissionError):
    """Publishing under a name that someone else owns."""


def check_name(name: str) -> str:
    """`name` if it is an `org/name` the contract accepts; BadReference otherwise."""
    if len(name.encode()) > MAX_NAME_LENGTH or not NAME.fullmatch(name):
        raise BadReference(
            f"{name!r} is not org/name: lowercase letters, digits, '-', '_' and '.', exactly one "
            f"'/', at most {MAX_NAME_LENGTH} characters"
        )
    return name


@dataclass(frozen=True)
class Reference:
    """A name and a version number; no number means the newest version."""

    name: str
    version: int | None = None

    @classmethod
    def parse(cls, text: str) -> Reference:
        """`org/name` or `org/name@N`, N from 1."""
        name, at, number = text.partition("@")
        check_name(name)
        if not at:
            return cls(name)
        if not number.isdecimal() or not 1 <= int(number) <= MAX_VERSION:
            raise BadReference(f"{text!r}: the version after '@' must be a number from 1")
        return cls(name, int(number))

    def __str__(self) -> str:
        return self.name if self.version is None else f"{self.name}@{self.version}"


@dataclass(frozen=True)
class Version:
    """One published version, as the contract stores it."""

    kind: Kind
    name: str
    number: int
    cid: str
    license: str
    metadata_cid: str | None
    parent: Reference | None
    job_id: int | None
    publisher: str
    published_at: int  # unix seconds

    @property
    def reference(self) -> Reference:
        return Reference(self.name, self.number)

    def as_json(self) -> dict:
        return {
            "kind": self.kind.label,
            "name": self.name,
            "version": self.number,
            "cid": self.cid,
            "license": self.license,
            "metadata_cid": self.metadata_cid,
            "parent": None if self.parent is None else str(self.parent),
            "job_id": self.job_id,
            "publisher": self.publisher,
            "published_at": self.published_at,
        }


class Registry:
    """The deployed Registry contract on one chain."""

    def __init__(self, w3: Web3, deployment: Deployment):
        if "Registry" not in deployment.addresses:
            raise ChainError(
                "this deployment has no registry contract: it predates it; deploy the ledger again"
            )
        self.w3 = w3
        self.contract = deployment.contract(w3, "Registry")
        # Read by the ABI's field names, so a field added to the struct shifts none of these.
        (output,) = next(
            i["outputs"] for i in deployment.abis["Registry"] if i.get("name") == "version"
        )
        self._fields = [c["name"] for c in output["components"]]

    # --- writes ----------------------------------------------------------------------------

    def publish(
        self,
        account: LocalAccount,
        kind: Kind,
        name: str,
        cid: str,
        license: str,
        *,
        metadata_cid: str | None = None,
        parent: Reference | None = None,
        job_id: int | None = None,
    ) -> Version:
        """Publish the next version of `name` (claiming the name if new) and return it as stored.

        Nothing is sent for a license that is not an SPDX id, a name that is not org/name, a
        parent that does not exist, a name owned by someone else or a job someone else paid for
        (the gas estimate meets the contract's error). A parent without a number means its
        newest version."""
        if parent is not None:
            parent = self.resolve(kind, parent).reference
        call = self.publish_call(kind, name, cid, license, metadata_cid, parent, job_id)
        receipt = send(self.w3, call, account)
        (number,) = self.published(receipt)
        return self.version(kind, name, number)

    def publish_call(
        self,
        kind: Kind,
        name: str,
        cid: str,
        license: str,
        metadata_cid: str | None = None,
        parent: Reference | None = None,
        job_id: int | None = None,
    ) -> ContractFunction:
        """The publish call, built by a wallet's client and by a gateway alike: the name and the
        license (as its SPDX id) are checked here; a parent must name its version."""
        check_name(name)
        if parent is not None and parent.version is None:
            raise BadReference(f"the parent {parent} needs a version number: {parent}@N")
        publication = (
            cid,
            spdx_id(license),
            metadata_cid or "",
            parent.name if parent else "",
            parent.version if parent else 0,
            job_id or 0,
        )
        return self.contract.functions.publish(kind, name, publication)

    def transfer(self, account: LocalAccount, kind: Kind, name: str, to: str) -> TxReceipt:
        """Hand `name` to `to`; only its owner can."""
        to = Web3.to_checksum_address(to)
        return send(
            self.w3, self.contract.functions.transferName(kind, check_name(name), to), account
        )

    def published(self, receipt: TxReceipt) -> list[int]:
        """The version numbers a mined transaction published."""
        events = self.contract.events.VersionPublished().process_receipt(receipt, errors=DISCARD)
        return [e["args"]["version"] for e in events]

    # --- reads -----------------------------------------------------------------------------

    def check_publisher(self, kind: Kind, name: str, publisher: str) -> None:
        """NotNameOwner unless `publisher` may publish the next version of `name` (it owns the
        name, or nobody does yet): checked before a long upload that the contract would refuse."""
        owner = self.owner_of(kind, name)
        if owner is not None and owner != publisher:
            raise NotNameOwner(
                f"{kind.label} {name} belongs to {owner}, not to {publisher}: only its owner "
                "publishes its versions"
            )

    def owner_of(self, kind: Kind, name: str) -> str | None:
        owner = call(self.contract.functions.ownerOf(kind, name))
        return None if int(owner, 16) == 0 else owner

    def version_count(self, kind: Kind, name: str) -> int:
        return call(self.contract.functions.versionCount(kind, name))

    def version(self, kind: Kind, name: str, number: int) -> Version:
        """Version `number` of `name`; a ContractRevert (UnknownVersion) if it has none."""
        stored = call(self.contract.functions.version(kind, name, number))
        return self._version(kind, name, number, stored)

    def resolve(self, kind: Kind, ref: Reference | str) -> Version:
        """The version `ref` names (`org/name@N`, or `org/name` for the newest): what a pull or a
        fine-tuning spec starts from."""
        if isinstance(ref, str):
            ref = Reference.parse(ref)
        if ref.version is not None:
            return self.version(kind, ref.name, ref.version)
        number, stored = call(self.contract.functions.latest(kind, ref.name))
        return self._version(kind, ref.name, number, stored)

    def versions(self, kind: Kind, name: str) -> list[Version]:
        """Every version of `name`, oldest first."""
        return [self.version(kind, name, n) for n in range(1, self.version_count(kind, name) + 1)]

    def names(self, kind: Kind) -> list[str]:
        """Every name of `kind`, in the order they were first published."""
        fns = self.contract.functions
        return [call(fns.nameAt(kind, i)) for i in range(call(fns.nameCount(kind)))]

    def _version(self, kind: Kind, name: str, number: int, stored: tuple) -> Version:
        v = dict(zip(self._fields, stored, strict=True))
        return Version(
            kind=kind,
            name=name,
            number=number,
            cid=v["cid"],
            license=v["license"],
            metadata_cid=v["metadataCid"] or None,
            parent=Reference(v["parentName"], v["parentVersion"]) if v["parentVersion"] else None,
            job_id=v["jobId"] or None,
            publisher=v["publisher"],
            published_at=v["publishedAt"],
        )
