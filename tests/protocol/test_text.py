"""The one definition of printable text: the gateway's schema refuses exactly the characters the CLI
writes as escapes, and what the CLI shows is always text the gateway would take."""

from __future__ import annotations

import re
from typing import Annotated

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import Field, TypeAdapter, ValidationError

from marketplace.protocol.text import PRINTABLE, printable

CONTROLS = [chr(c) for c in (*range(0x20), *range(0x7F, 0xA0))]
# Around each edge of the classes, and characters that look like trouble but are not controls.
NEIGHBOURS = [" ", "~", "\xa0", "é", "\u2028", "\u202e", "\ufeff", "🦓"]
schema = TypeAdapter(Annotated[str, Field(pattern=PRINTABLE)])


@pytest.mark.parametrize("char", CONTROLS)
def test_a_control_character_is_refused_by_the_schema_and_escaped_for_the_terminal(char):
    for text in (f"ok{char}ok", f"ok{char}"):  # at the end too: `$` must not let a newline by
        with pytest.raises(ValidationError):
            schema.validate_python(text)
    shown = printable(f"ok{char}ok")
    assert shown.startswith("ok\\") and shown.endswith("ok")
    assert shown.isascii() and shown.isprintable()


def test_any_other_character_passes_both_unchanged():
    for char in NEIGHBOURS:
        assert schema.validate_python(char) == char
        assert printable(char) == char


def test_tab_newline_and_escape_read_as_their_usual_escapes():
    assert printable("a\tb\nc\x1b[2J\x9b") == "a\\tb\\nc\\x1b[2J\\x9b"


@given(st.text())
def test_what_the_cli_shows_is_what_the_gateway_accepts(text):
    shown = printable(text)
    assert re.fullmatch(PRINTABLE, shown)
    assert schema.validate_python(shown) == shown
    assert (shown == text) == bool(re.fullmatch(PRINTABLE, text))
