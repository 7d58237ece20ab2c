"""Length and quality filters: cheap heuristics that drop boilerplate, tables of numbers and
spam before any token is spent on them."""

from __future__ import annotations

import re

from marketplace.protocol.spec import FilterSpec

_LETTERS = re.compile(r"[^\W\d_]+")  # runs of letters, in any script
_SPACE = re.compile(r"\s+")


class QualityFilter:
    """Keeps a document when every configured check passes; `dropped` counts the others."""

    def __init__(self, spec: FilterSpec):
        self.spec = spec
        self.dropped = 0

    def keep(self, text: str) -> bool:
        if self._passes(text):
            return True
        self.dropped += 1
        return False

    def _passes(self, text: str) -> bool:
        spec = self.spec
        if len(text) < spec.min_chars:
            return False
        if spec.max_chars is not None and len(text) > spec.max_chars:
            return False
        if spec.min_alpha_ratio > 0 and alpha_ratio(text) < spec.min_alpha_ratio:
            return False
        if spec.max_repeated_line_ratio < 1:
            return repeated_line_ratio(text) <= spec.max_repeated_line_ratio
        return True


def alpha_ratio(text: str) -> float:
    """Letters among the non-space characters (0 for a document of only spaces); counted by
    regex substitution, which runs in C rather than a Python loop over characters."""
    visible = len(_SPACE.sub("", text))
    letters = len(text) - len(_LETTERS.sub("", text))
    return letters / visible if visible else 0.0


def repeated_line_ratio(text: str) -> float:
    """Non-blank lines that repeat an earlier line of the same document, over all non-blank."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return 1 - len(set(lines)) / len(lines) if lines else 0.0
