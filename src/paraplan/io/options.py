"""Option values the command line (cli) and the web page (web.params) both read, parsed once.

Each bad value is one :class:`~paraplan.specs.errors.InputError` line naming the option
(``--tokens: ...``), the value and what is allowed.
"""

from __future__ import annotations

import math

from paraplan.specs.errors import InputError

# token-count suffixes, either case: thousand, million, billion (B or G), trillion
TOKEN_SUFFIX = {"": 1.0, "K": 1e3, "M": 1e6, "B": 1e9, "G": 1e9, "T": 1e12}


def parse_tokens(text: str) -> float:
    """'15e12', '15T', '2.5B', '300k' -> tokens; InputError naming --tokens otherwise."""
    raw = str(text).strip()
    suffix = raw[-1].upper() if raw and raw[-1].isalpha() else ""
    try:
        value = float(raw[: len(raw) - len(suffix)]) * TOKEN_SUFFIX[suffix]
    except (ValueError, KeyError):
        raise InputError(
            f"--tokens: {text!r} is not a number of tokens; e.g. 15e12, 15T, 300B"
        ) from None
    if not 0 < value < math.inf:
        raise InputError(f"--tokens: {text!r} must be a finite positive number of tokens")
    return value


def parse_price(value: str | float) -> float:
    """--price: a positive number of USD per GPU-hour (0 would make every plan free)."""
    try:
        price = float(value)
    except (TypeError, ValueError):
        raise InputError(f"--price: {value!r} is not a number of USD per GPU-hour") from None
    if not 0 < price < math.inf:
        raise InputError(
            f"--price: {price!r} is not allowed; must be a positive number of USD per GPU-hour"
        )
    return price


def check_price(price: float | None) -> None:
    """parse_price where a price is given."""
    if price is not None:
        parse_price(price)
