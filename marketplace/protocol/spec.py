"""The job spec: pydantic models of the YAML a user submits, and loading with readable errors.

Part of the protocol rather than the provider's engine because the gateway, the CLI and the SDK
read and check specs too; nothing here needs torch, which only the engine that trains loads.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, NamedTuple, TypeVar

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializeAsAny,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_serializer,
    model_validator,
)
from pydantic_core import PydanticCustomError

if TYPE_CHECKING:
    from torch import nn

logger = logging.getLogger(__name__)

# A spec is a page of YAML; one that is longer is not read, wherever it comes from.
MAX_SPEC_BYTES = 100_000
VOCAB_SIZE = 256  # without a tokenizer every data source is a byte stream: one id per byte


class SpecError(ValueError):
    """A job spec that cannot be run; `errors` holds one `(field, message)` pair per problem."""

    def __init__(self, errors: list[tuple[str, str]]):
        self.errors = errors
        super().__init__("; ".join(f"{field}: {message}" for field, message in errors))


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _LeavesOutUnset(BaseModel):
    """A section whose unset optional fields stay out of its dump, so that a spec using none of a
    newer field hashes as it always did."""

    @model_serializer(mode="wrap")
    def _leave_out_unset(self, handler: Any) -> dict[str, Any]:
        return {key: value for key, value in handler(self).items() if value is not None}


class ModelSpec(BaseModel):
    """Base of every architecture's config; a subclass knows how to build its module.

    A new architecture plugs in by subclassing this, implementing `build`, and decorating the
    class with `@register("name")`; job specs can then say `model: {architecture: name, ...}`.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    architecture: str  # registry name, e.g. "gpt" or "mlp"

    def build(self, seq_len: int, vocab_size: int = VOCAB_SIZE) -> nn.Module:
        """Return a freshly initialised module whose forward is `(idx, targets) -> (logits, loss)`
        over token ids below `vocab_size`.

        The built-in architectures' modules are the provider engine's (`node.engine.models` names
        them with `builds`), so that reading a spec here never loads torch.
        """
        try:
            make = _MODULES[self.architecture]
        except KeyError:
            raise NotImplementedError(
                f"architecture {self.architecture!r} has no module: import node.engine to build it"
            ) from None
        return make(self, seq_len, vocab_size)

    def check_fits(self, seq_len: int) -> None:
        """Raise SpecError when the model cannot take sequences of `seq_len` tokens."""

    def has_dropout(self) -> bool:
        """Whether training applies dropout. The engine hashes its masks (node.engine.dropout)
        rather than drawing them, and watches the generator of a unit split across devices."""
        return False


ARCHITECTURES: dict[str, type[ModelSpec]] = {}
_MODULES: dict[str, Callable[[Any, int, int], nn.Module]] = {}

SpecT = TypeVar("SpecT", bound=type[ModelSpec])
MakeT = TypeVar("MakeT", bound=Callable[[Any, int, int], "nn.Module"])


def register(name: str):
    """Class decorator that makes an architecture available to job specs under `name`."""

    def add(cls: SpecT) -> SpecT:
        if name in ARCHITECTURES:
            raise ValueError(f"architecture {name!r} is already registered")
        ARCHITECTURES[name] = cls
        logger.debug("registered architecture %s", name)
        return cls

    return add


def builds(name: str):
    """Decorator for `(spec, seq_len, vocab_size) -> module`: what `build` makes for the built-in
    architecture `name`."""

    def add(make: MakeT) -> MakeT:
        _MODULES[name] = make
        return make

    return add


@register("gpt")
class GPTSpec(ModelSpec):
    """A decoder-only transformer in the shape of nanoGPT."""

    n_layer: int = Field(4, ge=1, le=1024)  # transformer blocks
    n_embd: int = Field(128, ge=1, le=1 << 16)  # residual stream width
    n_head: int = Field(4, ge=1, le=1024)  # attention heads; must divide n_embd
    dropout: float = Field(0.0, ge=0.0, lt=1.0)  # dropout on attention, MLP and embeddings
    bias: bool = True  # biases in Linear and LayerNorm layers

    def has_dropout(self) -> bool:
        return self.dropout > 0

    @field_validator("n_head")
    @classmethod
    def _heads_divide_width(cls, n_head: int, info: ValidationInfo) -> int:
        n_embd = info.data.get("n_embd")
        if n_embd is not None and n_embd % n_head:
            raise ValueError(f"must divide n_embd ({n_embd}); got {n_head}")
        return n_head


@register("mlp")
class MLPSpec(ModelSpec):
    """A Bengio-style MLP language model: each byte is predicted from the `context` bytes before
    it."""

    context: int = Field(8, ge=1, le=4096)  # how many previous bytes each prediction sees
    n_embd: int = Field(32, ge=1, le=1 << 16)  # embedding width per byte
    hidden: int = Field(256, ge=1, le=1 << 20)  # width of each hidden layer
    n_layer: int = Field(2, ge=1, le=1024)  # hidden layers
    dropout: float = Field(0.0, ge=0.0, lt=1.0)  # dropout after each hidden layer

    def has_dropout(self) -> bool:
        return self.dropout > 0


class HFKey(NamedTuple):
    """What one key of a Hugging Face config may hold: a JSON type and, for numbers, a range, or
    one of a few strings."""

    kind: Any  # the type: int, float, bool or str
    low: float | None = None
    high: float | None = None
    choices: tuple[str, ...] = ()

    def problem(self, given: object) -> str | None:
        """Why `given` does not fit this key, or None when it does."""
        value: Any = given
        if self.kind is float and type(given) is int:
            value = float(given)
        if type(value) is not self.kind:
            return f"must be a {self.kind.__name__}, got {type(value).__name__}"
        if self.choices and value not in self.choices:
            return f"must be one of {', '.join(self.choices)}; got {value!r}"
        if self.low is not None and not value >= self.low:
            return f"must be at least {self.low:g}; got {value}"
        if self.high is not None and not value <= self.high:
            return f"must be at most {self.high:g}; got {value}"
        return None


class HFFamily(NamedTuple):
    """A family of `transformers` causal LMs a spec may name: its classes (looked up by name in
    `transformers`, which only the engine loads), the config keys a spec may set, the ones it
    must, and the names its config gives the shared sizes."""

    config_class: str
    model_class: str
    keys: Mapping[str, HFKey]
    required: tuple[str, ...]
    width: str  # residual stream width, which the heads divide
    heads: str
    positions: str  # how many positions the model embeds: at least the job's seq_len
    dropout: Mapping[str, float]  # the dropout keys, with transformers' defaults


_LAYERS = HFKey(int, 1, 1024)
_WIDTH = HFKey(int, 1, 1 << 16)
_HEADS = HFKey(int, 1, 1024)
_FFN = HFKey(int, 1, 1 << 20)
_POSITIONS = HFKey(int, 2, 1 << 20)
_TOKEN_ID = HFKey(int, 0, 1 << 24)  # below the vocabulary, which build checks
_EPS = HFKey(float, 1e-12, 1.0)
_INIT = HFKey(float, 0.0, 1.0)
_DROPOUT = HFKey(float, 0.0, 0.99)
_ACTIVATIONS = ("silu", "gelu", "gelu_new", "gelu_pytorch_tanh", "relu")
_SHARED = {"vocab_size": HFKey(int, 2, 1 << 24), "tie_word_embeddings": HFKey(bool)}
_SHARED |= {"bos_token_id": _TOKEN_ID, "eos_token_id": _TOKEN_ID, "pad_token_id": _TOKEN_ID}

# Only keys of plain sizes and switches: nothing that names a file, a hub repository or code
# (auto_map, trust_remote_code, _name_or_path, *_path), nor a dtype or attention kernel, which
# the engine fixes so that every party computes the same bits.
HF_FAMILIES: dict[str, HFFamily] = {
    "llama": HFFamily(
        "LlamaConfig",
        "LlamaForCausalLM",
        _SHARED
        | {
            "hidden_size": _WIDTH,
            "intermediate_size": _FFN,
            "num_hidden_layers": _LAYERS,
            "num_attention_heads": _HEADS,
            "num_key_value_heads": _HEADS,
            "head_dim": HFKey(int, 1, 4096),
            "hidden_act": HFKey(str, choices=_ACTIVATIONS),
            "max_position_embeddings": _POSITIONS,
            "initializer_range": _INIT,
            "rms_norm_eps": _EPS,
            "rope_theta": HFKey(float, 1.0, 1e9),
            "attention_bias": HFKey(bool),
            "attention_dropout": _DROPOUT,
            "mlp_bias": HFKey(bool),
        },
        ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads"),
        width="hidden_size",
        heads="num_attention_heads",
        positions="max_position_embeddings",
        dropout={"attention_dropout": 0.0},
    ),
    "gpt2": HFFamily(
        "GPT2Config",
        "GPT2LMHeadModel",
        _SHARED
        | {
            "n_embd": _WIDTH,
            "n_layer": _LAYERS,
            "n_head": _HEADS,
            "n_inner": _FFN,
            "n_positions": _POSITIONS,
            "activation_function": HFKey(str, choices=_ACTIVATIONS),
            "resid_pdrop": _DROPOUT,
            "embd_pdrop": _DROPOUT,
            "attn_pdrop": _DROPOUT,
            "layer_norm_epsilon": _EPS,
            "initializer_range": _INIT,
            "scale_attn_weights": HFKey(bool),
            "scale_attn_by_inverse_layer_idx": HFKey(bool),
            "reorder_and_upcast_attn": HFKey(bool),
        },
        ("n_embd", "n_layer", "n_head"),
        width="n_embd",
        heads="n_head",
        positions="n_positions",
        dropout={"resid_pdrop": 0.1, "embd_pdrop": 0.1, "attn_pdrop": 0.1},
    ),
}


class BaseModelRef(_Section):
    """The registered model version a job fine-tunes: its name, for lineage, and the CID of its
    folder, which every party loads, so that all start from the same bytes. `zoo-compute train`
    fills the CID in from the registry when a spec gives the name alone (`from: org/name@3`)."""

    name: str = Field(max_length=160, pattern=r"^[a-z0-9._-]+/[a-z0-9._-]+@[1-9][0-9]{0,9}$")
    cid: str | None = Field(None, min_length=1, max_length=128, pattern=r"^[A-Za-z0-9]+$")


@register("hf")
class HFSpec(ModelSpec, _LeavesOutUnset):
    """A causal LM of the `transformers` library, built from its config alone (no hub files).

    `config` holds the family's config keys (see HF_FAMILIES); the vocabulary is the job's and
    the positions default to the job's seq_len, so neither needs to be given.
    """

    family: str  # which transformers model, one of HF_FAMILIES
    config: dict[str, Any] = Field(default_factory=dict)  # the family's config keys
    attn_implementation: Literal["eager", "sdpa"] = "sdpa"  # attention kernel, fixed per job
    # a registered version to fine-tune instead of a fresh initialisation: `from: org/name@N`
    base: BaseModelRef | None = Field(None, alias="from")

    @field_validator("base", mode="before")
    @classmethod
    def _name_alone(cls, value: Any) -> Any:
        return {"name": value} if isinstance(value, str) else value

    @field_validator("family")
    @classmethod
    def _known_family(cls, family: str) -> str:
        if family not in HF_FAMILIES:
            raise PydanticCustomError(
                "unknown_family",
                "unknown family {family}; allowed: {allowed}",
                {"family": repr(family), "allowed": ", ".join(sorted(HF_FAMILIES))},
            )
        return family

    @field_validator("config")
    @classmethod
    def _config_fits_family(cls, config: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        family = HF_FAMILIES.get(info.data.get("family", ""))
        if family is None:  # the family's own error says why
            return config
        name = info.data["family"]
        problems = [
            f"unknown key {key!r} for family {name} (allowed: {', '.join(family.keys)})"
            for key in config
            if key not in family.keys
        ]
        problems += [
            f"{key} {why}"
            for key, value in config.items()
            if key in family.keys and (why := family.keys[key].problem(value))
        ]
        problems += [f"{key} is required" for key in family.required if key not in config]
        if not problems:
            width, heads = config[family.width], config[family.heads]
            kv_heads = config.get("num_key_value_heads", heads)
            if "head_dim" not in config and width % heads:
                problems.append(f"{family.heads} ({heads}) must divide {family.width} ({width})")
            if heads % kv_heads:
                problems.append(f"num_key_value_heads ({kv_heads}) must divide {family.heads}")
        if problems:
            raise PydanticCustomError(
                "bad_hf_config", "{problems}", {"problems": "; ".join(problems)}
            )
        return config

    def has_dropout(self) -> bool:
        dropout = HF_FAMILIES[self.family].dropout
        return any(self.config.get(key, default) > 0 for key, default in dropout.items())

    def check_fits(self, seq_len: int) -> None:
        positions = self.config.get(HF_FAMILIES[self.family].positions, seq_len)
        if positions < seq_len:
            raise SpecError(
                [
                    (
                        f"model.config.{HF_FAMILIES[self.family].positions}",
                        f"must be at least data.seq_len ({seq_len}); got {positions}",
                    )
                ]
            )

    def config_values(self, seq_len: int, vocab_size: int) -> dict[str, Any]:
        """The config's keys completed for a job: its vocabulary and positions filled in, each
        checked against what the job's data needs (SpecError naming the key otherwise)."""
        self.check_fits(seq_len)
        family = HF_FAMILIES[self.family]
        given = self.config.get("vocab_size", vocab_size)
        if given != vocab_size:
            raise SpecError(
                [
                    (
                        "model.config.vocab_size",
                        f"must be the job's vocabulary size ({vocab_size}); got {given}",
                    )
                ]
            )
        for key in ("bos_token_id", "eos_token_id", "pad_token_id"):
            if self.config.get(key, 0) >= vocab_size:
                raise SpecError(
                    [(f"model.config.{key}", f"must be below the vocabulary size ({vocab_size})")]
                )
        # token ids the job's tokenizer defines, when it has one; none by default
        unset = {"bos_token_id": None, "eos_token_id": None, "pad_token_id": None}
        return {family.positions: seq_len, **unset, **self.config, "vocab_size": vocab_size}


class StdlibSource(_Section):
    """The Python standard library's own .py files, read at run time in sorted path order."""

    kind: Literal["stdlib"]
    weight: float = Field(1.0, gt=0)  # mixing ratio, relative to the other sources
    max_bytes: int | None = Field(None, gt=0)  # keep only the first max_bytes of the corpus

    @property
    def name(self) -> str:
        return f"stdlib:python{sys.version_info.major}.{sys.version_info.minor}"


class SyntheticSource(_Section):
    """Generated bytes that need no files: a random Markov chain or lines of arithmetic."""

    kind: Literal["synthetic"]
    weight: float = Field(1.0, gt=0)  # mixing ratio, relative to the other sources
    generator: Literal["markov", "arithmetic"]  # which generator produces the bytes
    num_bytes: int = Field(1_000_000, ge=1024)  # length of the generated corpus
    seed: int = Field(0, ge=0)  # generator seed, independent of the training seed

    @property
    def name(self) -> str:
        return f"synthetic:{self.generator}:seed={self.seed}:bytes={self.num_bytes}"


class FileSource(_Section):
    """A local file, read as raw bytes."""

    kind: Literal["file"]
    weight: float = Field(1.0, gt=0)  # mixing ratio, relative to the other sources
    path: str = Field(min_length=1)  # file path, relative to the working directory

    @property
    def name(self) -> str:
        return f"file:{self.path}"


class IpfsSource(_Section):
    """A file on IPFS, fetched by CID through the marketplace's storage API."""

    kind: Literal["ipfs"]
    weight: float = Field(1.0, gt=0)  # mixing ratio, relative to the other sources
    cid: str = Field(min_length=1)  # content identifier (CIDv0 or CIDv1)

    @property
    def name(self) -> str:
        return f"ipfs:{self.cid}"


class _DocumentSource(_Section):
    """Documents in a local file or a file on IPFS, streamed through the data pipeline (filters,
    dedup, tokenizer) rather than read as raw bytes."""

    kind: Literal["jsonl", "parquet", "text"]  # how the file holds its documents
    weight: float = Field(1.0, gt=0)  # mixing ratio, relative to the other sources
    path: str | None = Field(None, min_length=1)  # a local file, under the provider's data dirs
    cid: str | None = Field(None, min_length=1)  # or a file on IPFS

    @model_validator(mode="after")
    def _one_location(self) -> _DocumentSource:
        if (self.path is None) == (self.cid is None):
            raise PydanticCustomError("one_location", "give exactly one of path and cid")
        return self

    @property
    def name(self) -> str:
        where = self.path if self.path is not None else f"ipfs:{self.cid}"
        return f"{self.kind}:{where}"


class JsonlSource(_DocumentSource):
    """JSON Lines, one document per line in a string field."""

    kind: Literal["jsonl"]
    field: str = Field("text", min_length=1)  # the field that holds each line's text


class ParquetSource(_DocumentSource):
    """A Parquet file, one document per row of a string column, read a row group at a time."""

    kind: Literal["parquet"]
    column: str = Field("text", min_length=1)  # the column that holds each row's text


class TextSource(_DocumentSource):
    """Plain UTF-8 text, one document per paragraph (paragraphs end at a blank line)."""

    kind: Literal["text"]


Source = Annotated[
    StdlibSource
    | SyntheticSource
    | FileSource
    | IpfsSource
    | JsonlSource
    | ParquetSource
    | TextSource,
    Field(discriminator="kind"),
]
DocumentSource = JsonlSource | ParquetSource | TextSource
DOCUMENT_SOURCES = (JsonlSource, ParquetSource, TextSource)


class TokenizerRef(_Section):
    """A tokenizer.json on IPFS (`zoo-compute tokenizers train --add` makes one)."""

    cid: str = Field(min_length=1)  # content identifier of the tokenizer's JSON
    vocab_size: int = Field(ge=2, le=1 << 20)  # must equal the loaded tokenizer's; sizes the model


class FilterSpec(_Section):
    """Documents the pipeline drops before tokenizing; the defaults drop nothing."""

    min_chars: int = Field(0, ge=0)  # shorter documents are dropped
    max_chars: int | None = Field(None, ge=1)  # longer documents are dropped
    min_alpha_ratio: float = Field(0.0, ge=0, le=1)  # of letters among non-space characters
    max_repeated_line_ratio: float = Field(1.0, ge=0, le=1)  # of lines repeating an earlier one


class DedupSpec(_Section):
    """Duplicate removal among a source's documents, within a window of recent documents."""

    exact: bool = True  # drop a document whose normalised text was seen before
    near: bool = False  # drop one whose MinHash says it is near a seen one (datasketch LSH)
    threshold: float = Field(0.8, gt=0, lt=1)  # estimated Jaccard similarity that counts as near
    num_perm: int = Field(64, ge=16, le=256)  # MinHash permutations: accuracy against memory
    shingle: int = Field(3, ge=1, le=16)  # words per shingle
    window: int = Field(100_000, ge=1, le=10_000_000)  # documents remembered: the memory bound


class DataSpec(_Section, _LeavesOutUnset):
    sources: list[Source] = Field(min_length=1)  # byte or document sources, mixed by weight
    seq_len: int = Field(ge=2, le=1 << 20)  # tokens per training sequence (the context length)
    eval_fraction: float = Field(0.05, gt=0.0, lt=0.5)  # tail of every source held out for eval
    tokenizer: TokenizerRef | None = None  # document sources' tokens; default: their UTF-8 bytes
    filters: FilterSpec | None = None  # quality filters on document sources; default: none
    dedup: DedupSpec | None = None  # duplicate removal on document sources; default: none

    @model_validator(mode="after")
    def _pipeline_needs_documents(self) -> DataSpec:
        documents = [isinstance(s, DOCUMENT_SOURCES) for s in self.sources]
        if self.tokenizer is not None and not all(documents):
            raise PydanticCustomError(
                "tokenizer_on_bytes",
                "a tokenizer reads document sources (jsonl, parquet, text) only; stdlib, "
                "synthetic, file and ipfs sources are byte streams",
            )
        if (self.filters is not None or self.dedup is not None) and not any(documents):
            raise PydanticCustomError(
                "pipeline_without_documents",
                "filters and dedup apply to document sources (jsonl, parquet, text); there is none",
            )
        return self


class LossSpikeSpec(_Section):
    enabled: bool = True  # roll back on a loss spike instead of applying the step
    window: int = Field(20, ge=1)  # recent losses the spike threshold is measured against
    factor: float = Field(2.0, gt=1.0)  # a loss above factor x mean(window) is a spike
    skip_batches: int = Field(0, ge=0)  # extra batches skipped after the spiking one
    max_rollbacks: int = Field(3, ge=0)  # rollbacks allowed per unit before giving up


class TrainingSpec(_Section):
    optimizer: Literal["adamw"] = "adamw"  # the only optimizer for now
    lr: float = Field(gt=0)  # peak learning rate, reached after warmup
    min_lr_ratio: float = Field(0.1, ge=0.0, le=1.0)  # cosine decays to lr x min_lr_ratio
    betas: tuple[float, float] = (0.9, 0.95)  # AdamW betas
    weight_decay: float = Field(0.1, ge=0.0)  # AdamW decay on matrices (not biases or norms)
    batch_size: int = Field(ge=1, le=1 << 20)  # sequences per micro-batch
    grad_accum_steps: int = Field(1, ge=1, le=1 << 16)  # micro-batches per optimizer step
    max_steps: int = Field(ge=1)  # length of the learning-rate schedule, in optimizer steps
    warmup_steps: int = Field(0, ge=0)  # linear warmup from 0 to lr
    grad_clip: float = Field(1.0, ge=0.0)  # max global grad norm; 0 turns clipping off
    precision: Literal["fp32", "bf16"] = "fp32"  # bf16 runs forward/backward under autocast
    eval_batches: int = Field(4, ge=0, le=10_000)  # held-out batches scored at the end of each unit
    loss_spike: LossSpikeSpec = LossSpikeSpec()  # spike detection and rollback

    @field_validator("betas")
    @classmethod
    def _betas_in_range(cls, betas: tuple[float, float]) -> tuple[float, float]:
        if not all(0.0 <= b < 1.0 for b in betas):
            raise ValueError(f"each beta must be in [0, 1); got {list(betas)}")
        return betas

    @model_validator(mode="after")
    def _warmup_fits(self) -> TrainingSpec:
        if self.warmup_steps > self.max_steps:
            raise PydanticCustomError(
                "warmup_too_long",
                "warmup_steps ({warmup}) must not exceed max_steps ({max_steps})",
                {"warmup": self.warmup_steps, "max_steps": self.max_steps},
            )
        return self


class CheckpointSpec(_Section):
    every: int = Field(ge=1)  # H: optimizer steps per work unit and between checkpoints


class DilocoSpec(_Section):
    """DiLoCo's outer loop (Douillard et al., 2023): its defaults are the paper's."""

    inner_steps: int | None = Field(
        None, ge=1
    )  # H, local steps per round; default checkpoint.every
    outer_lr: float = Field(0.7, gt=0)  # outer SGD learning rate on the averaged pseudo-gradient
    outer_momentum: float = Field(0.9, ge=0, lt=1)  # outer Nesterov momentum


class CompressionSpec(_Section):
    """What a rank's update becomes on the wire; the default sends it whole, in float32."""

    ratio: float = Field(1.0, gt=0, le=1)  # fraction of entries sent
    selection: Literal["topk", "random"] = "topk"  # largest entries, or a mask shared by seed
    bits: Literal[32, 8, 4, 2] = 32  # bits per sent value; below 32, one scale per chunk
    chunk: int = Field(256, ge=1)  # sent values sharing one quantization scale
    error_feedback: bool = True  # carry what was not sent into the rank's next update


class AggregationSpec(_Section):
    """How the ranks' updates combine: the plain mean, or a Byzantine-robust rule."""

    method: Literal["mean", "centered_clip", "trimmed_mean", "median"] = "mean"
    trim: int = Field(1, ge=0)  # trimmed_mean: values dropped at each end of every coordinate
    clip_multiplier: float = Field(1.0, gt=0)  # centered_clip: radius in median distances
    clip_iterations: int = Field(3, ge=1)  # centered_clip: clipping passes


_MULTI_NODE_FIELDS = ("unit_deadline_s", "quorum", "diloco", "compression", "aggregation")


class DistributedSpec(_Section, _LeavesOutUnset):
    """How the job's nodes train together; every field after `strategy` is for nodes > 1.

    Fields left out are left out of the canonical form too, so the hash of a single-node spec
    does not depend on settings it cannot use.
    """

    nodes: int = Field(1, ge=1)  # providers training this job together
    strategy: Literal["single", "ddp", "diloco"] = "single"  # how nodes combine updates
    unit_deadline_s: float | None = Field(None, gt=0)  # seconds a round waits for every node
    quorum: int | None = Field(None, ge=1)  # updates a round closes with after the deadline
    diloco: DilocoSpec | None = None  # outer-loop settings; strategy diloco only
    compression: CompressionSpec | None = None  # default: float32, sent whole
    aggregation: AggregationSpec | None = None  # default: the plain mean

    @model_validator(mode="after")
    def _strategy_fits_nodes(self) -> DistributedSpec:
        if (self.nodes == 1) != (self.strategy == "single"):
            raise PydanticCustomError(
                "strategy_mismatch",
                "strategy 'single' is for nodes: 1, and nodes > 1 needs 'ddp' or 'diloco' "
                "(got nodes: {nodes}, strategy: {strategy})",
                {"nodes": self.nodes, "strategy": self.strategy},
            )
        return self

    @field_validator(*_MULTI_NODE_FIELDS)
    @classmethod
    def _only_with_several_nodes(cls, value: Any, info: ValidationInfo) -> Any:
        if value is not None and info.data.get("strategy") == "single":
            raise PydanticCustomError(
                "single_node",
                "{field} is for nodes > 1 (strategy ddp or diloco)",
                {"field": info.field_name},
            )
        return value

    @field_validator("quorum")
    @classmethod
    def _quorum_fits_nodes(cls, quorum: int | None, info: ValidationInfo) -> int | None:
        if quorum is not None and info.data.get("unit_deadline_s") is None:
            raise PydanticCustomError(
                "quorum_without_deadline",
                "quorum needs unit_deadline_s: without a deadline a round waits for every node",
            )
        nodes = info.data.get("nodes")
        if quorum is not None and nodes is not None and quorum > nodes:
            raise PydanticCustomError(
                "quorum_too_large",
                "quorum ({quorum}) must not exceed nodes ({nodes})",
                {"quorum": quorum, "nodes": nodes},
            )
        return quorum

    @field_validator("diloco")
    @classmethod
    def _diloco_needs_its_strategy(
        cls, diloco: DilocoSpec | None, info: ValidationInfo
    ) -> DilocoSpec | None:
        if diloco is not None and info.data.get("strategy") == "ddp":
            raise PydanticCustomError("diloco_with_ddp", "diloco settings need strategy diloco")
        return diloco

    @field_validator("aggregation")
    @classmethod
    def _trim_leaves_an_update(
        cls, aggregation: AggregationSpec | None, info: ValidationInfo
    ) -> AggregationSpec | None:
        fewest = info.data.get("quorum") or info.data.get("nodes")
        if aggregation is None or fewest is None or aggregation.method != "trimmed_mean":
            return aggregation
        if 2 * aggregation.trim >= fewest:
            raise PydanticCustomError(
                "trim_too_large",
                "trim ({trim}) drops every update of a round of {fewest} (quorum or nodes); "
                "trim must be below half of it",
                {"trim": aggregation.trim, "fewest": fewest},
            )
        return aggregation


class ResourcesSpec(_Section):
    """The hardware one unit trains on inside the provider's node."""

    # devices one unit trains on, data parallel: each takes a fixed share of every step's
    # grad_accum_steps micro-batches and the gradients are summed in micro-batch order, so the
    # unit's bits do not depend on how many devices ran it
    devices: int = Field(1, ge=1, le=64)


class ReproducibilitySpec(_Section):
    seed: int = Field(1337, ge=0)  # seeds model init, dropout and the data sampler
    deterministic: bool = True  # torch.use_deterministic_algorithms for bit-identical reruns
    num_threads: int = Field(1, ge=1, le=1024)  # CPU threads; bit-identical only at equal counts


class JobSpec(_Section, _LeavesOutUnset):
    name: str = "job"  # a label for people; not used by training
    model: SerializeAsAny[ModelSpec]  # architecture and sizes, see ARCHITECTURES
    data: DataSpec
    training: TrainingSpec
    checkpoint: CheckpointSpec
    distributed: DistributedSpec = DistributedSpec()
    reproducibility: ReproducibilitySpec = ReproducibilitySpec()
    resources: ResourcesSpec | None = None  # default: one device

    @field_validator("model", mode="wrap")
    @classmethod
    def _dispatch_architecture(cls, value: Any, handler: Any) -> ModelSpec:
        """Validate `model` against the config class of the architecture it names."""
        if isinstance(value, ModelSpec):
            return value
        if not isinstance(value, Mapping):
            return handler(value)
        arch = value.get("architecture")
        if not isinstance(arch, str) or arch not in ARCHITECTURES:
            raise PydanticCustomError(
                "unknown_architecture",
                "unknown architecture {arch}; allowed: {allowed}",
                {"arch": repr(arch), "allowed": ", ".join(sorted(ARCHITECTURES))},
            )
        return ARCHITECTURES[arch].model_validate(value)

    @model_validator(mode="after")
    def _rounds_fill_units(self) -> JobSpec:
        inner = self.distributed.diloco and self.distributed.diloco.inner_steps
        if inner and self.checkpoint.every % inner:
            raise PydanticCustomError(
                "rounds_split_units",
                "distributed.diloco.inner_steps ({inner}) must divide checkpoint.every "
                "({every}): a work unit is whole rounds",
                {"inner": inner, "every": self.checkpoint.every},
            )
        return self

    @model_validator(mode="after")
    def _devices_share_micro_batches(self) -> JobSpec:
        devices = self.devices
        if devices == 1:
            return self
        if self.distributed.nodes > 1:
            raise PydanticCustomError(
                "devices_in_group",
                "resources.devices > 1 is for single-node jobs; a group job's ranks train on "
                "one device each",
            )
        if self.training.grad_accum_steps % devices:
            raise PydanticCustomError(
                "devices_split_batch",
                "resources.devices ({devices}) must divide training.grad_accum_steps "
                "({accum}): every device takes the same number of a step's micro-batches",
                {"devices": devices, "accum": self.training.grad_accum_steps},
            )
        return self

    @model_validator(mode="after")
    def _model_takes_sequences(self) -> JobSpec:
        self.model.check_fits(self.data.seq_len)
        return self

    @property
    def devices(self) -> int:
        """Devices one unit trains on (resources.devices; 1 when left out)."""
        return 1 if self.resources is None else self.resources.devices

    @property
    def vocab_size(self) -> int:
        """How many token ids the data yields and the model predicts: the named tokenizer's
        vocabulary, else 256, one per byte."""
        tokenizer = self.data.tokenizer
        return tokenizer.vocab_size if tokenizer is not None else VOCAB_SIZE

    def build_model(self) -> nn.Module:
        """The job's freshly initialised model, sized for its sequences and vocabulary."""
        return self.model.build(self.data.seq_len, self.vocab_size)

    def sha256(self) -> str:
        """Hash of the canonical JSON form; checkpoints record it to bind them to their job."""
        canonical = json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()


def parse_spec(source: str | bytes | Mapping[str, Any]) -> JobSpec:
    """Validate a spec given as YAML text or an already-parsed mapping.

    Text that is not YAML is refused at its line and column (1-based, as editors count), with the
    line shown and a caret under the column: the line the parser stopped at, or, when that one is
    blank (an unclosed bracket or quote), the line where the unclosed construct began.
    """
    if isinstance(source, (str, bytes)):
        try:
            source = yaml.safe_load(source)
        except yaml.MarkedYAMLError as exc:
            mark, began, message = exc.problem_mark, exc.context_mark, exc.problem or "not YAML"
            if exc.context is not None:
                at = (
                    f" at line {began.line + 1}, column {began.column + 1}"
                    if began is not None
                    else ""
                )
                message += f" ({exc.context}{at})"
            if mark is None:
                raise SpecError([("yaml", message)]) from None
            shown = mark.get_snippet()
            if (shown is None or not shown.split("\n")[0].strip()) and began is not None:
                shown = began.get_snippet()
            where = f"line {mark.line + 1}, column {mark.column + 1}"
            raise SpecError([(where, f"{message}\n{shown}" if shown else message)]) from None
        except yaml.YAMLError as exc:
            raise SpecError([("yaml", str(exc))]) from None
    if not isinstance(source, Mapping):
        raise SpecError(
            [("spec", f"expected a mapping at the top level, got {type(source).__name__}")]
        )
    try:
        return JobSpec.model_validate(source)
    except ValidationError as exc:
        errors: list[tuple[str, str]] = []
        for error in exc.errors():
            raised = error.get("ctx", {}).get("error")
            errors += raised.errors if isinstance(raised, SpecError) else [_describe(error)]
        raise SpecError(errors) from None


def load_spec(path: str | os.PathLike[str]) -> JobSpec:
    """Read and validate a YAML spec file."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise SpecError([("spec", f"cannot read {path}: {exc.strerror}")]) from None
    return parse_spec(text)


def _describe(error: Mapping[str, Any]) -> tuple[str, str]:
    """Turn one pydantic error into `(dotted.field[0].path, message)`."""
    loc = tuple(error["loc"])
    if error["type"] == "unknown_architecture":
        loc += ("architecture",)
    message = str(error["ctx"]["error"]) if error["type"] == "value_error" else error["msg"]
    path = ""
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else part)
    return path or "spec", message
