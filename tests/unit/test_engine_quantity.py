"""The engine's quantity parser agrees with the official client's and with render's on every form the API
server accepts, and refuses the forms the official client takes but the server does not."""

from __future__ import annotations

from decimal import Decimal
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kubernetes.utils import parse_quantity as official

from reconcile.engine.quantity import parse_quantity
from render.quantity import parse as render_parse

SUFFIXES = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "n", "u", "m", "k", "M", "G", "T", "P", "E"]

numbers = st.one_of(
    st.from_regex(r"[+-]?[0-9]{1,12}", fullmatch=True),
    st.from_regex(r"[+-]?[0-9]{1,8}\.[0-9]{0,8}", fullmatch=True),
    st.from_regex(r"[+-]?\.[0-9]{1,8}", fullmatch=True),
)
exponents = st.builds(
    lambda e, n: f"{e}{n:+d}" if n < 0 else f"{e}{n}", st.sampled_from("eE"), st.integers(-30, 30)
)
quantities = st.builds(lambda n, s: n + s, numbers, st.one_of(st.sampled_from(SUFFIXES), exponents))


@given(quantities)
def test_every_form_the_server_accepts_has_the_official_value(text: str) -> None:
    """Equal to the official value, and to render's exact one within the 28 significant digits that both
    Decimal parsers keep (a mantissa of 12 digits times 2**60 has more)."""
    ours = parse_quantity(text)
    assert ours == official(text)
    exact = render_parse(text)[0]
    assert abs(Fraction(ours) - exact) <= abs(exact) / 10**27


@pytest.mark.parametrize(
    ("text", "value"),
    [("500m", Decimal("0.5")), ("1Gi", Decimal(2**30)), ("2e3", Decimal(2000)), ("1E", Decimal(10**18))],
)
def test_examples(text: str, value: Decimal) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize("text", ["1K", "NaN", "Infinity", "1_000", "", " 1", "1 ", "1ki", "m", "1e", "0x10"])
def test_forms_the_server_refuses_are_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_quantity(text)


def test_numbers_are_taken_as_they_are() -> None:
    assert parse_quantity(2) == 2 and parse_quantity(0.1) == Decimal("0.1")
    assert parse_quantity(1e20) == Decimal(10**20)
    for refused in (True, float("nan"), float("inf")):
        with pytest.raises(ValueError):
            parse_quantity(refused)
