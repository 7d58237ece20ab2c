"""ZEN amounts as text are exact: integer arithmetic on wei, never a float."""

from __future__ import annotations

from marketplace.chain.zen import ZEN, exact, rounded


def test_exact_shows_every_wei_and_no_trailing_zeros():
    assert exact(3_999_999_999_999_998) == "0.003999999999999998"
    assert exact(1_234_500 * ZEN // 1000) == "1,234.5"
    assert (exact(0), exact(3)) == ("0", "0.000000000000000003")


def test_rounded_rounds_half_up_at_its_last_place_where_a_float_would_not():
    assert rounded(4 * ZEN // 1000) == "0.004000"
    assert rounded(4_999_988 * ZEN // 10**6) == "4.999988"
    big = 9_007_199 * ZEN + 5 * 10**11  # half a millionth above a whole number
    assert f"{big / ZEN:,.6f}" == "9,007,199.000000"  # what a float makes of it
    assert rounded(big) == "9,007,199.000001"
    assert (rounded(4 * 10**11), rounded(5 * 10**11), rounded(-5 * ZEN)) == (
        "0.000000",
        "0.000001",
        "-5.000000",
    )
    assert rounded(5 * ZEN // 10**4 - 1, 4) == "0.0005"
