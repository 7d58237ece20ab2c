"""Printable text: what a line from the network may hold once a person's terminal shows it.

A control character in such a line is an instruction to the terminal (ESC starts a sequence that
clears the screen or retitles the window, U+009B is a one-character CSI on many), so the gateway
refuses text holding one and the CLI shows any it is handed anyway as an escape. Tab and newline
are controls here too: a log line is one line.
"""

from __future__ import annotations

import re

# The C0 controls, DEL and the C1 controls, written as escapes so the same text is a class in
# Python's re and in the regex engine behind pydantic's `pattern`.
CONTROLS = r"\x00-\x1f\x7f-\x9f"
PRINTABLE = rf"^[^{CONTROLS}]*$"  # a schema's pattern for text with none of them

_CONTROL = re.compile(f"[{CONTROLS}]")


def printable(text: str) -> str:
    """`text` with each control character written as its escape (ESC is `\\x1b`), so that
    showing it cannot rewrite what the reader sees."""
    return _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode(), text)
