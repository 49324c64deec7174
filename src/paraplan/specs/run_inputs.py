"""The run's length and price as the options give them: ``--tokens`` text (15T, 300B, 2e12) and
``--price`` (USD per GPU-hour), each checked with the CLI's one-line error. The CLI, the API and
the plan explorer read them through these two functions."""

from __future__ import annotations

from paraplan.specs.errors import InputError

_TOKEN_SUFFIX = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "B": 1e9, "G": 1e9, "T": 1e12}


def check_price(price: float | None) -> None:
    """--price must be a positive number of USD per GPU-hour (0 would make every plan free)."""
    if price is not None and not price > 0:
        raise InputError(
            f"--price: {price!r} is not allowed; must be a positive number of USD per GPU-hour"
        )


def parse_tokens(text: str) -> float:
    """'15e12', '15T', '2.5B' -> tokens (B = billion, T = trillion); InputError naming --tokens otherwise."""
    raw = text.strip()
    suffix = raw[-1] if raw and raw[-1] in _TOKEN_SUFFIX and raw[-1].isalpha() else ""
    number = raw[: len(raw) - len(suffix)]
    try:
        value = float(number) * _TOKEN_SUFFIX[suffix]
    except ValueError:
        raise InputError(
            f"--tokens: {text!r} is not a number of tokens; e.g. 15e12, 15T, 300B"
        ) from None
    if not 0 < value < float("inf"):
        raise InputError(f"--tokens: {text!r} must be a finite positive number of tokens")
    return value
