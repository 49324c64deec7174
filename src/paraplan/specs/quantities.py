"""Annotated field types of the system inputs: unit strings ("80 GiB", "3.35 TB/s", "5 us") parsed to SI
units (bytes, bytes/s, seconds) and the bounded fractions (paraplan.units.parse_quantity)."""

from __future__ import annotations

from typing import Annotated

from pydantic import BeforeValidator, Field, ValidationInfo

from paraplan.units import parse_quantity


def _quantity(kind):
    def convert(value, info: ValidationInfo):
        if value is None:
            return None
        return parse_quantity(value, kind, field=info.field_name or "value")

    return BeforeValidator(convert)


Bytes = Annotated[float, _quantity("bytes"), Field(gt=0)]
BytesPerS = Annotated[float, _quantity("bandwidth"), Field(gt=0)]
Seconds = Annotated[float, _quantity("time"), Field(ge=0)]
Fraction = Annotated[float, Field(gt=0, le=1)]
Share = Annotated[float, Field(ge=0, le=1)]  # a share that may be 0 (an overlap cost)
