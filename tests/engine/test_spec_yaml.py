"""Text that is not YAML is refused at its line and column, with the line shown."""

from __future__ import annotations

import pytest

from node.engine import SpecError, parse_spec

BROKEN = """name: broken
training:
  steps: 10
  lr: 0.1: 3
"""


def test_a_yaml_error_names_line_and_column_and_shows_the_line():
    with pytest.raises(SpecError) as caught:
        parse_spec(BROKEN)
    assert str(caught.value) == (
        "line 4, column 10: mapping values are not allowed here\n      lr: 0.1: 3\n             ^"
    )


def test_an_unclosed_bracket_shows_where_it_opened():
    with pytest.raises(SpecError) as caught:
        parse_spec("name: x\nmodel: [gpt, 2\n")
    assert str(caught.value) == (
        "line 3, column 1: expected ',' or ']', but got '<stream end>' "
        "(while parsing a flow sequence at line 2, column 8)\n"
        "    model: [gpt, 2\n"
        "           ^"
    )
