"""A job's trained model read back from its committed units: the loss a unit reports, and the
final weights, checked against what the chain committed, by the rules of the job's unit format
(marketplace/protocol/units.py)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from marketplace.protocol.spec import MAX_SPEC_BYTES, HFSpec, JobSpec, SpecError, parse_spec
from marketplace.protocol.tokenizer import (
    END_OF_TEXT,
    MAX_TOKENIZER_BYTES,
    NotATokenizer,
)
from marketplace.protocol.tokenizer import load as load_tokenizer
from marketplace.protocol.units import (
    LastUnit,
    ResultError,
    UnitFormatError,
    read_unit,
    trained_model,
)
from marketplace.storage import Storage

logger = logging.getLogger(__name__)


def unit_loss(data: bytes) -> float | None:
    """The training loss a committed unit reports; None for bytes that are no unit. Units are
    tensor files: torch loads with the first unit read, not with every CLI command."""
    try:
        fmt, unit = read_unit(data)
    except UnitFormatError:
        return None
    return fmt.loss(unit)


def write_result(
    storage: Storage,
    job_id: int,
    units: list[LastUnit],
    nodes: int,
    units_per_node: int,
    output: Path,
    spec_cid: str | None = None,
) -> tuple[str, str, Path]:
    """Write the trained model to `output`; returns the CID and state hash of what it came from,
    and the path written.

    `units` are the slots' live last units; what makes the model of them is the format's rule
    (`trained_model`): slot 0's checkpoint checked against its committed state hash, or the
    model every rank's last bundle holds, all of them the same. A job whose spec (`spec_cid`)
    names a Hugging Face model gets a folder `transformers` loads (`output` less a .pt suffix);
    any other, its weights as a torch file.
    """
    model = trained_model(job_id, units, nodes, units_per_node, storage.cat)
    spec = None if spec_cid is None else job_spec(storage, spec_cid)
    if spec is not None and isinstance(spec.model, HFSpec):
        folder = output.with_suffix("") if output.suffix == ".pt" else output
        write_hf_folder(spec, model.weights, folder, _tokenizer_files(storage, spec))
        return model.cid, model.state_hash, folder
    write_weights(model.weights, output)
    return model.cid, model.state_hash, output


def job_spec(storage: Storage, spec_cid: str) -> JobSpec | None:
    """The spec a job was created with, read by its CID; None when it does not read as one here
    (an architecture this install does not know), and the weights are then written as they are."""
    try:
        return parse_spec(storage.cat(spec_cid, max_bytes=MAX_SPEC_BYTES))
    except SpecError as exc:
        logger.warning(
            "spec %s does not read here (%s): writing the weights as they are", spec_cid, exc
        )
        return None


def _tokenizer_files(storage: Storage, spec: JobSpec) -> dict[str, bytes]:
    """The job's tokenizer as a Hugging Face folder holds it, so that `AutoTokenizer` loads it
    beside the model; none for a byte-level job."""
    ref = spec.data.tokenizer
    if ref is None:
        return {}
    raw = storage.cat(ref.cid, max_bytes=MAX_TOKENIZER_BYTES)
    try:
        load_tokenizer(raw)
    except NotATokenizer as exc:
        raise ResultError(f"the job's tokenizer {ref.cid} {exc}") from None
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": spec.data.seq_len,
        "eos_token": END_OF_TEXT,
    }
    return {"tokenizer.json": raw, "tokenizer_config.json": json.dumps(config).encode()}


def write_hf_folder(
    spec: JobSpec, weights: dict, folder: Path, tokenizer_files: dict[str, bytes]
) -> None:
    """The trained weights as a Hugging Face folder: config.json and model.safetensors, with the
    job's tokenizer files when it has a tokenizer."""
    from marketplace.protocol.hf import save_folder  # loads torch and transformers

    assert isinstance(spec.model, HFSpec)
    try:
        save_folder(
            spec.model, spec.data.seq_len, spec.vocab_size, weights, folder, tokenizer_files
        )
    except SpecError as exc:
        raise ResultError(f"the trained model does not fit its spec: {exc}") from None


def write_weights(weights: dict, output: Path) -> None:
    import torch  # loaded only to write a result

    output.parent.mkdir(parents=True, exist_ok=True)
    torch.save(weights, output)
