"""Dotted-path access to a spec's fields: ``accelerator.kernel_tables``, ``node.gpus_per_domain``.

A spec with fields replaced is rebuilt with ``model_validate`` on a modified ``model_dump()``, so the
rules of the schema (units, ranges, cross-field checks) apply to the new values unchanged
(pydantic's ``model_copy(update=...)`` validates nothing). Used by the sweep's ``--set``
(sweep.params), calibrate (calibrate.fit.with_values, calibrate.tables) and validate.tables; ``picked`` reads named
attributes of any object into a dict (the results' to_dict).
"""

from __future__ import annotations

from typing import TypeVar

from pydantic import BaseModel

Spec = TypeVar("Spec", bound=BaseModel)


def picked(obj, names: str) -> dict:
    """{name: obj.name} for each of the space-separated ``names``, in their order (a result's fields
    as a JSON document writes them)."""
    return {name: getattr(obj, name) for name in names.split()}


def set_in(data: dict, keys: list[str], value) -> None:
    """data[k0][k1]...[kn] = value."""
    for key in keys[:-1]:
        data = data[key]
    data[keys[-1]] = value


def get_in(data: dict, keys: list[str]):
    """data[k0][k1]...[kn], or None where a key is missing."""
    for key in keys:
        if not isinstance(data, dict) or key not in data:
            return None
        data = data[key]
    return data


def with_fields(spec: Spec, values: dict[str, object]) -> Spec:
    """``spec`` with each dotted path of ``values`` replaced, re-validated (module docstring); a
    value the schema refuses raises pydantic's ValidationError."""
    data = spec.model_dump()
    for path, value in values.items():
        set_in(data, path.split("."), value)
    return type(spec).model_validate(data)
