"""A folder on IPFS as one CID: a JSON list of its files' paths, sizes and CIDs.

Registry versions are folders (a Hugging Face model: config.json, model.safetensors, tokenizer
files; a dataset's shards). The list works with any Kubo-compatible node, the embedded one
included, which stores files but not UnixFS directories. A pulled list may be anyone's: its
size, its number of files, each path and each file's size are bounded before anything is written,
and every path stays inside the folder it is pulled into.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from pathlib import Path, PurePosixPath
from typing import Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from marketplace.errors import ZooError
from marketplace.storage import Storage

FORMAT = "zoo-compute/folder/1"
MAX_FILES = 1_000
MAX_LIST_BYTES = 1 << 20
MAX_PATH_BYTES = 255
MAX_DEPTH = 8
MAX_FOLDER_BYTES = 1 << 40  # what one pull may declare, all files together
# A path component: no leading dot (so no `..`, no hidden files), no separators, no controls.
_COMPONENT = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._+-]{0,127}")


class FolderError(ZooError, ValueError):
    """A folder that cannot be pushed, or a file list that is not a safe folder to pull."""


def check_path(path: str) -> str:
    """`path` if it is a relative POSIX path of safe components that stays inside its folder."""
    parts = path.split("/")
    if (
        len(path.encode()) > MAX_PATH_BYTES
        or len(parts) > MAX_DEPTH
        or not all(_COMPONENT.fullmatch(p) for p in parts)
    ):
        raise FolderError(
            f"{path!r} is not a file name a folder may hold: relative, at most {MAX_DEPTH} levels "
            f"and {MAX_PATH_BYTES} bytes, each part letters, digits, '_', '.', '+' or '-' and not "
            "starting with '.'"
        )
    return path


class Entry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str
    size: int = Field(ge=0)
    cid: str = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9]+$")

    @field_validator("path")
    @classmethod
    def _safe(cls, path: str) -> str:
        return check_path(path)


class FileList(BaseModel):
    """What the folder's CID holds."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    format: Literal["zoo-compute/folder/1"]
    files: list[Entry] = Field(min_length=1, max_length=MAX_FILES)

    @field_validator("files")
    @classmethod
    def _one_tree(cls, files: list[Entry]) -> list[Entry]:
        """No path twice, and no file where another path needs a folder (`a` and `a/b`)."""
        paths = {e.path for e in files}
        if len(paths) != len(files):
            raise ValueError("a path is listed twice")
        for path in paths:
            for parent in PurePosixPath(path).parents:
                if str(parent) in paths:
                    raise ValueError(f"{parent} is both a file and a folder")
        if sum(e.size for e in files) > MAX_FOLDER_BYTES:
            raise ValueError(f"the files add up to more than {MAX_FOLDER_BYTES} bytes")
        return files

    @property
    def size(self) -> int:
        return sum(e.size for e in self.files)


def _files_of(path: Path) -> list[tuple[str, Path]]:
    """(relative path, file) for a file, or every file under a folder, in name order. Hidden
    files and folders (`.git`, `.gitattributes`, `.cache`) are left out."""
    if path.is_file():
        return [(check_path(path.name), path)]
    if not path.is_dir():
        raise FolderError(f"{path} is neither a file nor a folder")
    found = []
    for item in sorted(path.rglob("*")):
        if any(part.startswith(".") for part in item.relative_to(path).parts):
            continue
        if item.is_symlink():
            raise FolderError(f"{item} is a symbolic link: push the file it points to instead")
        if item.is_file():
            found.append((check_path(item.relative_to(path).as_posix()), item))
    if not found:
        raise FolderError(f"{path} holds no files")
    if len(found) > MAX_FILES:
        raise FolderError(f"{path} holds {len(found)} files, more than {MAX_FILES}")
    return found


def push(storage: Storage, path: Path, replicas: int = 3) -> tuple[str, FileList]:
    """Add every file of `path` (a folder, or one file) and their list; the list's CID and the
    list. Each file and the list are pinned on `replicas` of the known nodes (as many as there
    are, if fewer): the list does not link its files, so each is pinned on its own."""
    entries = [
        Entry(path=rel, size=file.stat().st_size, cid=storage.add_file(file))
        for rel, file in _files_of(Path(path))
    ]
    listing = FileList(format=FORMAT, files=entries)
    cid = storage.add_bytes(listing.model_dump_json().encode())
    for pinned in dict.fromkeys([*(e.cid for e in entries), cid]):
        storage.pin(pinned, replicas=min(replicas, len(storage.nodes)))
    return cid, listing


class Catalogue(Protocol):
    """What reading a file list takes: content by CID, bounded (a Storage, or the engine's)."""

    def cat(self, cid: str, max_bytes: int | None = None) -> bytes: ...


def read_list(storage: Catalogue, cid: str) -> FileList:
    """The file list at `cid`, checked; FolderError if it is not one."""
    raw = storage.cat(cid, max_bytes=MAX_LIST_BYTES)
    try:
        return FileList.model_validate(json.loads(raw))
    except (ValueError, ValidationError) as exc:
        reason = (
            "; ".join(e["msg"] for e in exc.errors()[:3])
            if isinstance(exc, ValidationError)
            else "not JSON"
        )
        raise FolderError(f"{cid} is not a folder's file list: {reason}") from None


def pull(storage: Storage, cid: str, out: Path) -> FileList:
    """Fetch the folder at `cid` into `out` (which must not exist, or be empty).

    Files are fetched into a hidden folder beside `out`, each bounded by its listed size and
    checked against it, and the folder is renamed to `out` only when all of them are there: `out`
    never holds half a model."""
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise FolderError(f"{out} exists and is not an empty folder")
    listing = read_list(storage, cid)
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.", suffix=".part"))
    try:
        for entry in listing.files:
            target = staging.joinpath(*entry.path.split("/"))
            target.parent.mkdir(parents=True, exist_ok=True)
            storage.read_to(entry.cid, target, max_bytes=entry.size)
            if target.stat().st_size != entry.size:
                raise FolderError(
                    f"{entry.path} is {target.stat().st_size} bytes, the list says {entry.size}"
                )
        if out.exists():
            out.rmdir()
        os.replace(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return listing
