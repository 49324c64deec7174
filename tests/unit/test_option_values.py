"""--tokens and --price are parsed once (paraplan.io.options) for the command line and the web page."""

from __future__ import annotations

import pytest

from paraplan.io.options import parse_price, parse_tokens
from paraplan.specs.errors import InputError
from paraplan.web.params import flag_of, parse


@pytest.mark.parametrize(
    "text,tokens", [("15e12", 15e12), ("15T", 15e12), ("300B", 3e11), ("2G", 2e9), ("300k", 3e5)]
)
def test_the_page_and_the_cli_read_tokens_alike(text, tokens):
    assert parse_tokens(text) == tokens
    query = {"model": "gpt3-1.3b", "system": "dgx-a100-80gb", "gpus": "8", "global-batch": "64"}
    assert parse({**query, "tokens": text}).tokens == tokens


@pytest.mark.parametrize("text", ["15X", "", "-3T", "inf"])
def test_bad_tokens_name_the_option(text):
    with pytest.raises(InputError, match="^--tokens: "):
        parse_tokens(text)


def test_price_must_be_positive_and_the_page_keeps_the_field():
    assert parse_price("2.5") == 2.5 and parse_price(3) == 3.0
    for bad in ("0", "abc", -1.0):
        with pytest.raises(InputError, match="^--price: .* USD per GPU-hour"):
            parse_price(bad)
    query = {"model": "gpt3-1.3b", "system": "dgx-a100-80gb", "gpus": "8", "global-batch": "64"}
    with pytest.raises(InputError) as err:
        parse({**query, "price": "0"})
    assert flag_of(str(err.value)) == "price"  # the page shows it next to its field
