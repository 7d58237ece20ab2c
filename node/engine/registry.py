"""The architecture registry: maps a spec's `model.architecture` name to its config class."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, TypeVar

from pydantic import BaseModel, ConfigDict

if TYPE_CHECKING:
    from torch import nn

logger = logging.getLogger(__name__)

VOCAB_SIZE = 256  # every data source is a byte stream, so every model predicts one of 256 bytes


class ModelSpec(BaseModel):
    """Base of every architecture's config; a subclass knows how to build its module.

    A new architecture plugs in by subclassing this, implementing `build`, and decorating the
    class with `@register("name")`; job specs can then say `model: {architecture: name, ...}`.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    architecture: str  # registry name, e.g. "gpt" or "mlp"

    def build(self, seq_len: int) -> nn.Module:
        """Return a freshly initialised module whose forward is `(idx, targets) -> (logits, loss)`."""
        raise NotImplementedError


ARCHITECTURES: dict[str, type[ModelSpec]] = {}

SpecT = TypeVar("SpecT", bound=type[ModelSpec])


def register(name: str):
    """Class decorator that makes an architecture available to job specs under `name`."""

    def add(cls: SpecT) -> SpecT:
        if name in ARCHITECTURES:
            raise ValueError(f"architecture {name!r} is already registered")
        ARCHITECTURES[name] = cls
        logger.debug("registered architecture %s", name)
        return cls

    return add
