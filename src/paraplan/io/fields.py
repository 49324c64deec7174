"""Typed reads from documents other tools wrote (Calculon and AMPeD inputs, DeepSpeed and torchtitan
configs, search results, measured-step and benchmark files).

Each value is checked where a converter reads it: a missing key, a wrong type or a value out of range
is one :class:`~paraplan.specs.errors.InputError` line naming the field (``calculon system
networks[0].bandwidth``), the value and what is allowed — never a ``KeyError``/``TypeError`` from
inside a converter (which the CLI could only report as an internal error). Types are strict: a
string is not a number, ``true`` is not 1, a number is finite.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from paraplan.specs.errors import InputError

MISSING: Any = object()
MAX_INTEGER = (
    2**53
)  # larger integers are not exact as JSON numbers; no plan or model field comes close


def show(value: Any) -> str:
    """A value as it appears in an error line: its repr, shortened to 60 characters."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def refuse(where: str, value: Any, allowed: str) -> InputError:
    """The one-line error: ``WHERE: VALUE is not allowed; ALLOWED``."""
    return InputError(f"{where}: {show(value)} is not allowed; {allowed}")


def as_number(
    value: Any, where: str, *, positive: bool = False, minimum: float | None = None
) -> float:
    """A finite int/float as given (not a bool, not a string); ``positive``: > 0; ``minimum``: >= it."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise refuse(where, value, "must be a number")
    number = float(value) if not isinstance(value, int) or abs(value) < MAX_INTEGER else math.inf
    if not math.isfinite(number):
        raise refuse(where, value, "must be a finite number")
    if positive and not number > 0:
        raise refuse(where, value, "must be positive")
    if minimum is not None and number < minimum:
        raise refuse(where, value, f"must be >= {minimum:g}")
    return value  # as given: an int stays an int


def as_integer(value: Any, where: str, *, minimum: int | None = None) -> int:
    """An integer (an integral float such as ``8.0`` too), within +-2^53, at least ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise refuse(where, value, "must be an integer")
    if isinstance(value, float) and not (math.isfinite(value) and value.is_integer()):
        raise refuse(where, value, "must be an integer")
    if abs(value) >= MAX_INTEGER:
        raise refuse(where, value, f"must be an integer below 2^53 ({MAX_INTEGER})")
    if minimum is not None and value < minimum:
        raise refuse(where, value, f"must be an integer >= {minimum}")
    return int(value)


def as_boolean(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise refuse(where, value, "must be true or false")
    return value


def as_text(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise refuse(where, value, "must be a string")
    return value


def as_choice(value: Any, where: str, allowed: Mapping | Iterable) -> Any:
    """``value`` if it is one of ``allowed``; with a mapping, what it maps to."""
    options = allowed if isinstance(allowed, Mapping) else tuple(allowed)
    try:
        known = value in options
    except TypeError:  # unhashable (a list or mapping where a name belongs)
        known = False
    if isinstance(value, bool) and not any(isinstance(option, bool) for option in options):
        known = False  # true == 1 in Python; a switch is not a number
    if not known:
        raise refuse(where, value, f"allowed: {', '.join(map(str, options))}")
    return options[value] if isinstance(options, Mapping) else value


def as_list(value: Any, where: str, *, nonempty: bool = False) -> list:
    if not isinstance(value, list):
        raise refuse(where, value, "must be a list")
    if nonempty and not value:
        raise refuse(where, value, "must be a non-empty list")
    return value


def as_pairs(value: Any, where: str) -> list[tuple[float, float]]:
    """A non-empty list of ``[number, number]`` pairs (an efficiency curve)."""
    pairs = []
    for i, item in enumerate(as_list(value, where, nonempty=True)):
        if not isinstance(item, list) or len(item) != 2:
            raise refuse(f"{where}[{i}]", item, "must be a pair [number, number]")
        pairs.append(
            (as_number(item[0], f"{where}[{i}][0]"), as_number(item[1], f"{where}[{i}][1]"))
        )
    return pairs


class Doc:
    """A mapping read from a file, with its place (``where``) for error lines; read it field by field."""

    def __init__(self, data: Any, where: str):
        if not isinstance(data, dict):
            raise refuse(where, data, "must be a mapping (key: value)")
        self.data, self.where = data, where

    def at(self, key: Any) -> str:
        """The field's name in error lines."""
        return f"{self.where}.{key}" if self.where else str(key)

    def __contains__(self, key: Any) -> bool:
        return key in self.data

    def keys(self):
        return self.data.keys()

    def get(self, key: Any, default: Any = MISSING, hint: str = "") -> Any:
        """The raw value; a missing key without a default is an error (``hint`` says what to give)."""
        if key in self.data and self.data[key] is not None:
            return self.data[key]
        if default is MISSING:
            raise InputError(f"{self.at(key)}: missing{'; ' + hint if hint else ''}")
        return default

    def doc(self, key: Any, default: Any = MISSING) -> Doc:
        """A nested mapping (``default``, e.g. ``{}``, when absent)."""
        return Doc(self.get(key, default, "give a mapping"), self.at(key))

    def docs(self, key: Any, default: Any = MISSING, *, nonempty: bool = False) -> list[Doc]:
        """A list of mappings."""
        items = as_list(self.get(key, default, "give a list"), self.at(key), nonempty=nonempty)
        return [Doc(item, f"{self.at(key)}[{i}]") for i, item in enumerate(items)]

    def number(self, key: Any, default: Any = MISSING, **bounds) -> float:
        return as_number(self.get(key, default, "give a number"), self.at(key), **bounds)

    def integer(self, key: Any, default: Any = MISSING, **bounds) -> int:
        return as_integer(self.get(key, default, "give an integer"), self.at(key), **bounds)

    def boolean(self, key: Any, default: Any = MISSING) -> bool:
        return as_boolean(self.get(key, default, "give true or false"), self.at(key))

    def text(self, key: Any, default: Any = MISSING) -> str:
        return as_text(self.get(key, default, "give a string"), self.at(key))

    def choice(self, key: Any, allowed: Mapping | Iterable, default: Any = MISSING) -> Any:
        options = allowed if isinstance(allowed, Mapping) else tuple(allowed)
        return as_choice(
            self.get(key, default, f"allowed: {', '.join(map(str, options))}"),
            self.at(key),
            options,
        )

    def pairs(self, key: Any) -> list[tuple[float, float]]:
        return as_pairs(
            self.get(key, MISSING, "give a list of [number, number] pairs"), self.at(key)
        )


__all__ = [
    "Doc",
    "MISSING",
    "as_boolean",
    "as_choice",
    "as_integer",
    "as_list",
    "as_number",
    "as_pairs",
    "as_text",
    "refuse",
    "show",
]
