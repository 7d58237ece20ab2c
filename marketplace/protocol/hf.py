"""Hugging Face causal LMs: the `transformers` config and model a job's `hf` spec makes, and the
trained model as a folder `transformers.AutoModelForCausalLM.from_pretrained` loads.

Models are built from their config alone, never from the hub: the process that imports this
module has HF_HUB_OFFLINE set, so no code path in `transformers` reaches the network. The
engine's module wraps the `transformers` model under `PREFIX`, so its weights are the
`transformers` model's with that prefix.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from marketplace.protocol.spec import HF_FAMILIES, HFSpec, SpecError

if TYPE_CHECKING:
    import torch
    from transformers import PretrainedConfig, PreTrainedModel

os.environ["HF_HUB_OFFLINE"] = "1"  # whatever the caller set: a job never reaches the hub

PREFIX = "hf."  # where the engine's module holds the transformers model


def hf_config(spec: HFSpec, seq_len: int, vocab_size: int) -> PretrainedConfig:
    """The `transformers` config of `spec` for a job's sequences and vocabulary, its attention
    kernel fixed; SpecError naming `model.config` when the family's config class refuses it."""
    import transformers

    family = HF_FAMILIES[spec.family]
    values = spec.config_values(seq_len, vocab_size)
    try:
        config = getattr(transformers, family.config_class)(**values, use_cache=False)
    except Exception as exc:  # noqa: BLE001  (a config class raises whatever its checks raise)
        raise SpecError([("model.config", f"not a {spec.family} config: {exc}")]) from None
    config._attn_implementation = spec.attn_implementation
    config.architectures = [family.model_class]
    return config


def hf_model(spec: HFSpec, seq_len: int, vocab_size: int) -> PreTrainedModel:
    """A freshly initialised `transformers` model of `spec` (from torch's current RNG state, on
    torch's current default device); SpecError naming `model.config` when it does not build."""
    import transformers

    config = hf_config(spec, seq_len, vocab_size)
    try:
        return getattr(transformers, HF_FAMILIES[spec.family].model_class)(config)
    except Exception as exc:  # noqa: BLE001
        raise SpecError(
            [("model.config", f"does not build a {spec.family} model: {exc}")]
        ) from None


def save_folder(
    spec: HFSpec,
    seq_len: int,
    vocab_size: int,
    weights: Mapping[str, torch.Tensor],
    folder: Path,
    tokenizer_files: Mapping[str, bytes] | None = None,
) -> None:
    """Write the engine's trained `weights` as a Hugging Face folder: config.json and
    model.safetensors, plus the job's tokenizer files when it has a tokenizer (by file name).

    The model is made on the meta device and takes the weights as they are, so writing one costs
    no initialisation; weights that are not this spec's model are a SpecError.
    """
    import torch

    with torch.device("meta"):
        model = hf_model(spec, seq_len, vocab_size)
    state = {k.removeprefix(PREFIX): v for k, v in weights.items()}
    try:
        model.load_state_dict(state, strict=True, assign=True)
    except RuntimeError as exc:
        raise SpecError([("model", f"the weights are not this spec's model: {exc}")]) from None
    if model.config.tie_word_embeddings:
        model.tie_weights()
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    for name, data in (tokenizer_files or {}).items():
        (folder / Path(name).name).write_bytes(data)
