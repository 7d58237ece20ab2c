"""The weights a fine-tuning job starts from: a registered model version's safetensors, read by its
folder's CID and bounded by what the job's own model can hold."""

from __future__ import annotations

import safetensors.torch
from safetensors import SafetensorError

from marketplace.folders import FolderError, read_list
from marketplace.protocol.spec import HFSpec, JobSpec

from .data import ContentStore, DataError
from .limits import checkpoint_bytes

WEIGHTS = "model.safetensors"


def load_base(spec: JobSpec, model, storage: ContentStore | None) -> None:
    """Load the version `spec` fine-tunes into `model` (the engine's `hf` module), whose shapes it
    must match tensor for tensor (a tied output layer may be left out: the model shares it), in
    place, so the optimizer keeps its parameters; DataError naming what is wrong otherwise."""
    assert isinstance(spec.model, HFSpec) and spec.model.base is not None
    base = spec.model.base
    where = f"model.from ({base.name})"
    if base.cid is None:
        raise DataError(
            f"{where} names no folder CID: `zoo-compute train` resolves it from the registry"
        )
    if storage is None:
        raise DataError(f"{where}: fine-tuning reads its base model from IPFS, and none is set")
    try:
        listing = read_list(storage, base.cid)
    except FolderError as exc:
        raise DataError(f"{where}: {exc}") from None
    entry = next((e for e in listing.files if e.path == WEIGHTS), None)
    if entry is None:
        raise DataError(f"{where}: its folder has no {WEIGHTS}")
    bound = checkpoint_bytes(spec)
    if entry.size > bound:
        raise DataError(f"{where}: {entry.size:,} bytes of weights, more than this model holds")
    try:
        weights = safetensors.torch.load(storage.cat(entry.cid, max_bytes=entry.size))
    except SafetensorError as exc:
        raise DataError(f"{where}: {WEIGHTS} is not a safetensors file: {exc}") from None
    tied = model.hf.config.tie_word_embeddings
    try:
        loaded = model.hf.load_state_dict(weights, strict=False)
    except RuntimeError as exc:  # a tensor of another shape
        raise DataError(f"{where} is not this spec's model: {exc}") from None
    missing = [k for k in loaded.missing_keys if not (tied and k == "lm_head.weight")]
    if missing or loaded.unexpected_keys:
        names = ", ".join([*missing, *loaded.unexpected_keys][:4])
        raise DataError(f"{where} is not this spec's model: its weights differ in {names}")
