"""Registry versions end to end: a folder pushed to IPFS and published under a name on the chain,
and a named version pulled back into a folder."""

from __future__ import annotations

from pathlib import Path

from eth_account.signers.local import LocalAccount

from marketplace.chain.registry import Reference, Registry, Version, check_name
from marketplace.folders import FileList, FolderError
from marketplace.folders import pull as pull_folder
from marketplace.folders import push as push_folder
from marketplace.licenses import spdx_id
from marketplace.protocol.terms import Kind
from marketplace.storage import Storage

# Formats that unpickle (and so may run code) when loaded: a model version carries safetensors.
PICKLED_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".pickle", ".ckpt")


def check_model_folder(path: Path) -> None:
    """A model version is a Hugging Face layout that `from_pretrained` loads without unpickling:
    config.json and safetensors weights, no pickled files."""
    path = Path(path)
    if not (path / "config.json").is_file():
        raise FolderError(f"{path} has no config.json: save the model with save_pretrained")
    files = [f for f in path.rglob("*") if f.is_file()]
    pickled = sorted(f.name for f in files if f.suffix in PICKLED_SUFFIXES)
    if pickled:
        raise FolderError(
            f"{path} holds pickled files ({', '.join(pickled[:3])}): save the weights as "
            "safetensors (save_pretrained(..., safe_serialization=True))"
        )
    if not any(f.suffix == ".safetensors" for f in files):
        raise FolderError(f"{path} has no .safetensors weights")


def push(
    registry: Registry,
    storage: Storage,
    account: LocalAccount,
    kind: Kind,
    path: Path,
    name: str,
    license: str,
    *,
    parent: Reference | None = None,
    job_id: int | None = None,
    metadata: Path | None = None,
) -> Version:
    """Add `path` (and `metadata`) to IPFS and publish it as the next version of `name`.

    What can be refused without uploading is refused first: a name that is not org/name or is
    someone else's, a license that is not an SPDX id, a missing parent, a model folder that is
    not a safetensors Hugging Face layout."""
    check_name(name)
    license = spdx_id(license)
    registry.check_publisher(kind, name, account.address)
    if parent is not None:
        parent = registry.resolve(kind, parent).reference
    if kind is Kind.MODEL:
        check_model_folder(path)
    cid, _ = push_folder(storage, Path(path))
    metadata_cid = storage.add_file(metadata) if metadata is not None else None
    return registry.publish(
        account,
        kind,
        name,
        cid,
        license,
        metadata_cid=metadata_cid,
        parent=parent,
        job_id=job_id,
    )


def pull(storage: Storage, version: Version, out: Path) -> FileList:
    """Fetch `version`'s folder into `out` (absent or empty), bounded and checked file by file
    (marketplace.folders.pull)."""
    return pull_folder(storage, version.cid, Path(out))
