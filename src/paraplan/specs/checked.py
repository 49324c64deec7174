"""A spec checked strictly, wherever it comes from (a catalog file, a user's file, a dict, a Hugging Face
config): types are not coerced, integers are bounded and every number is finite. The catalog, the Hugging
Face reader and the API all validate through :func:`validate_spec`."""

from __future__ import annotations

import json
import math
from typing import Any, TypeVar, get_args

from pydantic import BaseModel, ValidationError

from paraplan.specs.errors import InputError, Violation, input_error_from_pydantic
from paraplan.specs.model import ModelSpec
from paraplan.specs.system import SystemSpec

Spec = TypeVar("Spec", ModelSpec, SystemSpec)


MAX_INTEGER = (
    2**24
)  # largest count a spec may hold (layers, hidden, vocab, positions, SMs ...): 16.7M


def validate_spec(schema: type[Spec], data: Any, field: str) -> Spec:
    """Validate ``data`` as ``schema`` strictly: types are not coerced (``"4544"``, ``1e30`` or
    ``true`` for an integer, ``"false"`` for a flag are refused; quantity fields still take unit
    strings), integers are at most MAX_INTEGER and every number is finite. InputError listing
    every violation otherwise."""
    if not isinstance(data, dict):
        raise InputError(f"{field}: {type(data).__name__} is not allowed; give a mapping of fields")
    try:
        text = json.dumps(data, allow_nan=True, default=_not_json)
    except (TypeError, ValueError) as exc:
        raise InputError(f"{field}: {exc}") from None
    try:
        spec = schema.model_validate_json(text, strict=True)
    except ValidationError as exc:
        raise input_error_from_pydantic(exc, field, schema) from None
    problems = list(_out_of_range(spec, field))
    if (
        isinstance(spec, SystemSpec)
        and spec.accelerator.reserved_memory >= spec.accelerator.hbm_capacity
    ):
        problems.append(
            Violation(
                f"{field}.accelerator.reserved_memory",
                spec.accelerator.reserved_memory,
                f"must be less than hbm_capacity ({spec.accelerator.hbm_capacity:.4g} B)",
            )
        )
    if problems:
        raise InputError.from_violations(problems)
    return spec


def _not_json(value: Any) -> Any:
    raise TypeError(
        f"{value!r} ({type(value).__name__}) is not allowed; give numbers, strings, true/false, lists or mappings"
    )


def _out_of_range(value: Any, path: str, integer: bool = False):
    """Violations for non-finite floats and integer fields above MAX_INTEGER anywhere in a spec."""
    if isinstance(value, BaseModel):
        for name, info in type(value).model_fields.items():
            yield from _out_of_range(
                getattr(value, name), f"{path}.{name}", int in _types(info.annotation)
            )
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _out_of_range(item, f"{path}.{key}")
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            yield from _out_of_range(item, f"{path}[{i}]", integer)
    elif isinstance(value, str) and not all(ch.isprintable() for ch in value):
        yield Violation(path, value, "must not contain control characters (escape codes, newlines)")
    elif isinstance(value, bool):
        return
    elif isinstance(value, int) and integer and abs(value) > MAX_INTEGER:
        yield Violation(path, value, f"must be at most {MAX_INTEGER:,}")
    elif isinstance(value, float) and not math.isfinite(value):
        yield Violation(path, value, "must be a finite number")
    elif path.endswith(".price_per_gpu_hour") and isinstance(value, (int, float)) and value <= 0:
        yield Violation(
            path, value, "must be a positive price in USD per GPU-hour (leave it out when unknown)"
        )


def _types(annotation: Any) -> set:
    """The plain types an annotation admits (through Optional, Union, Annotated and tuple[...])."""
    args = get_args(annotation)
    if not args:
        return {annotation}
    out: set = set()
    for arg in args:
        out |= _types(arg)
    return out
