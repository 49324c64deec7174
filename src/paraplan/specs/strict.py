"""The inputs' scalar types, checked before pydantic's coercion: a boolean is never read as a number, nor a
number or a string as a boolean, nor a string as a number (pydantic's lax mode would read ``tp: true`` as 1,
``sequence_parallel: "no"`` as false and ``tp: "2"`` as 2). Every input model derives from ``InputModel``."""

from __future__ import annotations

import sys
import types
import typing
from functools import lru_cache
from typing import Any

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    PlainValidator,
    ValidationInfo,
    WrapValidator,
    field_validator,
)

_NOT_NUMBERS = (bool, str, bytes)


def _numpy_bool(v) -> bool:
    """A numpy boolean (numpy is not imported for it: without numpy loaded, no value is one)."""
    np = sys.modules.get("numpy")
    return np is not None and isinstance(v, np.bool_)


_RULES = {
    int: ("an integer", lambda v: not isinstance(v, _NOT_NUMBERS) and not _numpy_bool(v)),
    float: ("a number", lambda v: not isinstance(v, _NOT_NUMBERS) and not _numpy_bool(v)),
    bool: ("true or false", lambda v: isinstance(v, bool) or _numpy_bool(v)),
}


def _scalar_kinds(annotation: Any) -> tuple[type, ...]:
    """The scalar types (int, float, bool) a field annotation admits, unwrapping ``X | None`` and Annotated;
    () when it admits anything else too (a string, a literal, a container, a type with its own parser:
    pydantic's and that parser's checks apply)."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        base, *metadata = typing.get_args(annotation)
        if any(isinstance(m, (BeforeValidator, PlainValidator, WrapValidator)) for m in metadata):
            return ()  # its own parser decides (a unit string such as "80 GiB")
        return _scalar_kinds(base)
    if origin in (typing.Union, types.UnionType):
        kinds: list[type] = []
        for arg in typing.get_args(annotation):
            if arg is type(None):
                continue
            inner = _scalar_kinds(arg)
            if not inner:
                return ()
            kinds += inner
        return tuple(kinds)
    return (annotation,) if annotation in _RULES else ()


def _parses_itself(cls: type[BaseModel], name: str) -> bool:
    """The field has its own before / plain / wrap validator (a unit string such as "80 GiB" read into a number):
    that parser decides what it takes."""
    if any(
        isinstance(m, (BeforeValidator, PlainValidator, WrapValidator))
        for m in cls.model_fields[name].metadata
    ):
        return True
    for key, decorator in cls.__pydantic_decorators__.field_validators.items():
        if (
            key != "_scalar_of_its_kind"
            and decorator.info.mode in ("before", "plain", "wrap")
            and (name in decorator.info.fields or "*" in decorator.info.fields)
        ):
            return True
    return False


@lru_cache(maxsize=None)
def _field_kinds(cls: type[BaseModel], name: str) -> tuple[type, ...]:
    """_scalar_kinds of a field of a model, () for a field with its own parser (once per model and field)."""
    return () if _parses_itself(cls, name) else _scalar_kinds(cls.model_fields[name].annotation)


def _field_check(cls: type[BaseModel], name: str):
    """The one test of _RULES a field's values must pass (its kinds' rules agree: a number refuses the same types
    for int and float), None when it has no scalar kind; memoised per model and field (the validator runs for
    every field of every model built, e.g. every plan a --csv-all search lists)."""
    key = (cls, name)
    if key not in _CHECKS:
        kinds = _field_kinds(cls, name)
        rules = {_RULES[k][1] for k in kinds}
        _CHECKS[key] = (
            (rules.pop() if len(rules) == 1 else (lambda v: any(rule(v) for rule in rules)))
            if kinds
            else None
        )
    return _CHECKS[key]


_CHECKS: dict = {}


class InputModel(BaseModel):
    """A frozen input model with no unknown fields whose int, float and bool fields take only values of their kind
    (the one model_config of every input model). Each model's validator is built when it first validates
    (``defer_build``), not when its class is defined: a search builds 9 of the 22 (issue 31's start-up; ~20 ms
    less to import the search's modules, ~5 ms more to load the first model and system)."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    @field_validator("*", mode="before")
    @classmethod
    def _scalar_of_its_kind(cls, value: Any, info: ValidationInfo) -> Any:
        """Refuses a value of another kind for a scalar field (the module doc); the error names the field."""
        name = info.field_name
        if value is None or name is None:
            return value
        check = _CHECKS.get((cls, name), _field_check)
        if check is _field_check:
            check = _field_check(cls, name)
        if check is not None and not check(value):
            raise ValueError(
                f"must be {' or '.join(_RULES[k][0] for k in _field_kinds(cls, name))}"
            )
        return value
